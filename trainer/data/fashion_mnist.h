// Fashion-MNIST from its IDX files (gzip'd, as Debian's dataset-fashion-mnist
// installs them): 28x28 gray images, zero-padded to 32x32 and replicated to
// three channels. LoadFashionMnist (dataset.h) builds on these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/data/dataset.h"

namespace elastic::trainer {

inline constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension

// Measured on the 60,000 training images after padding to 32x32 (the padding
// lowers the mean from the 0.2860 of the 28x28 images); the same for all
// channels because they are copies. fashion_mnist_test checks these numbers.
inline constexpr Normalization kFashionMnistNormalization = {{0.2190f, 0.2190f, 0.2190f},
                                                             {0.3318f, 0.3318f, 0.3318f}};

std::vector<std::string> FashionMnistClassNames();

// The whole decompressed contents of a gzip file (a plain file reads as is).
// Throws std::runtime_error naming the file on an open or decompression error.
std::vector<uint8_t> ReadGzipFile(const std::string& path);

// An IDX image file: count x 28 x 28 bytes. Throws std::runtime_error naming
// the file and the byte offset on a bad magic number, bad dimensions or a size
// that does not match the header.
std::vector<uint8_t> ReadIdxImages(const std::string& path, int64_t* count);

// An IDX label file; every label must be below num_classes.
std::vector<uint8_t> ReadIdxLabels(const std::string& path, int num_classes);

}  // namespace elastic::trainer
