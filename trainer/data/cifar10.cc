#include "trainer/data/cifar10.h"

#include <sys/stat.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace elastic::trainer {
namespace {

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::vector<std::string> Cifar10ClassNames() {
  return {"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
}

std::vector<std::string> Cifar10FileNames(Split split) {
  if (split == Split::kTest) return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= kCifar10TrainBatches; ++i) {
    names.push_back("data_batch_" + std::to_string(i) + ".bin");
  }
  return names;
}

Cifar10File::Cifar10File(const std::string& path) : file_(path) {
  const auto size = static_cast<int64_t>(file_.size());
  if (size == 0) {
    throw std::runtime_error(path + ": empty file at byte offset 0; a CIFAR-10 batch holds " +
                             std::to_string(kCifar10RecordBytes) + "-byte records");
  }
  records_ = size / kCifar10RecordBytes;
  if (size % kCifar10RecordBytes != 0) {
    // The last whole record ends at this offset; what follows is a partial record.
    const int64_t offset = records_ * kCifar10RecordBytes;
    throw std::runtime_error(
        path + ": truncated or corrupt: " + std::to_string(size) +
        " bytes is not a multiple of the " + std::to_string(kCifar10RecordBytes) +
        "-byte record; partial record at byte offset " + std::to_string(offset) + " (record " +
        std::to_string(records_) + ", " + std::to_string(size - offset) + " bytes)");
  }
  for (int64_t r = 0; r < records_; ++r) {
    const int64_t label = this->label(r);
    if (label >= kCifar10NumClasses) {
      throw std::runtime_error(path + ": corrupt record " + std::to_string(r) + " at byte offset " +
                               std::to_string(r * kCifar10RecordBytes) + ": label " +
                               std::to_string(label) + " is not in 0..9");
    }
  }
}

Cifar10Dataset::Cifar10Dataset(std::vector<Cifar10File> files) : files_(std::move(files)) {
  if (files_.empty()) throw std::invalid_argument("Cifar10Dataset: no batch file");
  int64_t end = 0;
  for (const Cifar10File& file : files_) ends_.push_back(end += file.records());
}

Cifar10Dataset::Place Cifar10Dataset::Locate(int64_t i) const {
  // Five files at most for the real data set: a binary search is a few comparisons.
  const auto f = std::upper_bound(ends_.begin(), ends_.end(), i) - ends_.begin();
  return {&files_[f], f == 0 ? i : i - ends_[f - 1]};
}

const uint8_t* Cifar10Dataset::image(int64_t i) const {
  const Place place = Locate(i);
  return place.file->pixels(place.record);
}

int64_t Cifar10Dataset::label(int64_t i) const {
  const Place place = Locate(i);
  return place.file->label(place.record);
}

std::shared_ptr<Dataset> LoadCifar10(const std::string& data_dir, Split split) {
  std::vector<Cifar10File> files;
  for (const std::string& name : Cifar10FileNames(split)) {
    const std::string path = data_dir + "/" + name;
    if (!FileExists(path)) continue;
    files.emplace_back(path);
  }
  if (files.empty()) {
    const bool train = split == Split::kTrain;
    throw std::runtime_error(
        "no CIFAR-10 " + std::string(SplitName(split)) + " data in '" + data_dir + "': expected " +
        (train ? "data_batch_1.bin .. data_batch_5.bin (at least one)" : "test_batch.bin") +
        " in the CIFAR-10 binary format (leave --data-dir empty to download CIFAR-10)");
  }
  return std::make_shared<Cifar10Dataset>(std::move(files));
}

}  // namespace elastic::trainer
