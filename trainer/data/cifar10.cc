#include "trainer/data/cifar10.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

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

void ReadCifar10File(const std::string& path, std::vector<uint8_t>* pixels,
                     std::vector<int64_t>* labels) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error(path + ": read error: " + std::strerror(errno));

  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size == 0) {
    throw std::runtime_error(path + ": empty file at byte offset 0; a CIFAR-10 batch holds " +
                             std::to_string(kCifar10RecordBytes) + "-byte records");
  }
  const int64_t records = size / kCifar10RecordBytes;
  if (size % kCifar10RecordBytes != 0) {
    // The last whole record ends at this offset; what follows is a partial record.
    const int64_t offset = records * kCifar10RecordBytes;
    throw std::runtime_error(
        path + ": truncated or corrupt: " + std::to_string(size) +
        " bytes is not a multiple of the " + std::to_string(kCifar10RecordBytes) +
        "-byte record; partial record at byte offset " + std::to_string(offset) + " (record " +
        std::to_string(records) + ", " + std::to_string(size - offset) + " bytes)");
  }
  // Validate everything before appending, so a bad file leaves the outputs untouched.
  for (int64_t r = 0; r < records; ++r) {
    const int64_t offset = r * kCifar10RecordBytes;
    const auto label = static_cast<uint8_t>(bytes[offset]);
    if (label >= kCifar10NumClasses) {
      throw std::runtime_error(path + ": corrupt record " + std::to_string(r) + " at byte offset " +
                               std::to_string(offset) + ": label " + std::to_string(label) +
                               " is not in 0..9");
    }
  }
  pixels->reserve(pixels->size() + records * kCifar10PixelBytes);
  labels->reserve(labels->size() + records);
  for (int64_t r = 0; r < records; ++r) {
    const char* record = bytes.data() + r * kCifar10RecordBytes;
    labels->push_back(static_cast<uint8_t>(record[0]));
    pixels->insert(pixels->end(), reinterpret_cast<const uint8_t*>(record + 1),
                   reinterpret_cast<const uint8_t*>(record + kCifar10RecordBytes));
  }
}

std::shared_ptr<Dataset> LoadCifar10(const std::string& data_dir, Split split) {
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
  std::vector<std::string> read;
  for (const std::string& name : Cifar10FileNames(split)) {
    const std::string path = data_dir + "/" + name;
    if (!FileExists(path)) continue;
    ReadCifar10File(path, &pixels, &labels);
    read.push_back(name);
  }
  if (read.empty()) {
    const bool train = split == Split::kTrain;
    throw std::runtime_error(
        "no CIFAR-10 " + std::string(SplitName(split)) + " data in '" + data_dir + "': expected " +
        (train ? "data_batch_1.bin .. data_batch_5.bin (at least one)" : "test_batch.bin") +
        " in the CIFAR-10 binary format (leave --data-dir empty to download CIFAR-10)");
  }
  const auto n = static_cast<int64_t>(labels.size());
  torch::Tensor images = torch::empty({n, 3, 32, 32}, torch::kUInt8);
  std::memcpy(images.data_ptr<uint8_t>(), pixels.data(), pixels.size());
  torch::Tensor label_tensor = torch::empty({n}, torch::kInt64);
  std::memcpy(label_tensor.data_ptr<int64_t>(), labels.data(), n * sizeof(int64_t));
  return std::make_shared<InMemoryDataset>("cifar10", std::move(images), std::move(label_tensor),
                                           Cifar10ClassNames(), kCifar10Normalization);
}

}  // namespace elastic::trainer
