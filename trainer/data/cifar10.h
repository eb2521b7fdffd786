// The CIFAR-10 binary format: a file is a sequence of 3073-byte records, one
// label byte (0..9) followed by 3072 pixel bytes (1024 red, 1024 green, 1024
// blue, each plane row-major 32x32). That is already the layout a Dataset
// serves, so the files are mapped (mapped_file.h) and read in place: the
// workers of one machine share one copy, the page cache's. LoadCifar10
// (dataset.h) builds on these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/data/dataset.h"
#include "trainer/data/mapped_file.h"

namespace elastic::trainer {

inline constexpr int64_t kCifar10PixelBytes = 3 * 32 * 32;
inline constexpr int64_t kCifar10RecordBytes = 1 + kCifar10PixelBytes;
inline constexpr int kCifar10NumClasses = 10;
inline constexpr int kCifar10TrainBatches = 5;

// Statistics of the full CIFAR-10 training set (the constants every
// pytorch-cifar script uses; std is the per-pixel standard deviation).
inline constexpr Normalization kCifar10Normalization = {{0.4914f, 0.4822f, 0.4465f},
                                                        {0.2470f, 0.2435f, 0.2616f}};

std::vector<std::string> Cifar10ClassNames();

// The file names of a split: data_batch_1.bin .. data_batch_5.bin, or test_batch.bin.
std::vector<std::string> Cifar10FileNames(Split split);

// One batch file, mapped and checked when it is opened: non-empty, a whole
// number of records, every label in 0..9. Throws std::runtime_error naming
// the file and the byte offset otherwise. The label check reads one byte of
// every record, and records (3073 bytes) are shorter than a page (4096), so
// it touches every page of the file: opening reads the whole file into the
// page cache once per machine (a cold 150 MB set: one sequential read of it)
// and maps it in each process, but copies nothing.
class Cifar10File {
 public:
  explicit Cifar10File(const std::string& path);

  const std::string& path() const { return file_.path(); }
  int64_t records() const { return records_; }
  // Record r's 3072 pixel bytes and its label; r in [0, records()), unchecked.
  const uint8_t* pixels(int64_t r) const { return Record(r) + 1; }
  int64_t label(int64_t r) const { return Record(r)[0]; }

 private:
  const uint8_t* Record(int64_t r) const { return file_.data() + r * kCifar10RecordBytes; }

  MappedFile file_;
  int64_t records_ = 0;
};

// CIFAR-10 served from its mapped batch files: the samples are the records of
// the files taken in order (data_batch_1's, then data_batch_2's, ...).
class Cifar10Dataset : public Dataset {
 public:
  // Throws std::invalid_argument when `files` is empty.
  explicit Cifar10Dataset(std::vector<Cifar10File> files);

  std::string name() const override { return "cifar10"; }
  int64_t size() const override { return ends_.back(); }
  const uint8_t* image(int64_t i) const override;
  int64_t label(int64_t i) const override;
  std::vector<std::string> class_names() const override { return Cifar10ClassNames(); }
  Normalization normalization() const override { return kCifar10Normalization; }

 private:
  struct Place {
    const Cifar10File* file;
    int64_t record;
  };
  Place Locate(int64_t i) const;

  std::vector<Cifar10File> files_;
  std::vector<int64_t> ends_;  // ends_[f]: one past the last sample of files_[f]
};

}  // namespace elastic::trainer
