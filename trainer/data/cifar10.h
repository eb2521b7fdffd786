// The CIFAR-10 binary format: a file is a sequence of 3073-byte records, one
// label byte (0..9) followed by 3072 pixel bytes (1024 red, 1024 green, 1024
// blue, each plane row-major 32x32). LoadCifar10 (dataset.h) builds on these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/data/dataset.h"

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

// The records of one file, appended to `pixels` (3072 bytes each) and `labels`.
// Throws std::runtime_error naming the file and the byte offset when the file
// cannot be read, is empty, is not a whole number of records or holds a label
// outside 0..9.
void ReadCifar10File(const std::string& path, std::vector<uint8_t>* pixels,
                     std::vector<int64_t>* labels);

}  // namespace elastic::trainer
