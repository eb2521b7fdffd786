// A minimal, strict reader of NumPy's .npy files (format versions 1.0, 2.0
// and 3.0: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html),
// and the `--dataset npy` data set built on it (LoadNpyData, user_data.h).
//
// Strict: what np.save writes for a C-ordered little-endian array of numbers
// is read; anything else (Fortran order, big-endian, objects, strings,
// structured dtypes, a short file, bytes after the data) is a
// std::runtime_error that names the file and the problem, never a guess.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace elastic::trainer {

struct NpyArray {
  std::string descr;           // the dtype as the header writes it, e.g. "<f4", "|u1"
  std::vector<int64_t> shape;  // () for a scalar
  // The values in C order with `shape`: bool, uint8, int8..int64, float16,
  // float32 or float64 as stored; uint16 widened to int32, uint32 and uint64
  // to int64 (torch has no wider unsigned types; a uint64 value above
  // INT64_MAX is an error).
  torch::Tensor data;
};

// Reads the .npy file at `path`. Throws std::runtime_error naming the file
// and the problem for a missing file, bad magic, an unsupported version or
// dtype, a malformed header, Fortran order, or data shorter or longer than the
// header promises.
NpyArray ReadNpy(const std::string& path);

// The shape as NumPy prints it: "(3,)", "(2, 3)", "()".
std::string NpyShapeString(const std::vector<int64_t>& shape);

}  // namespace elastic::trainer
