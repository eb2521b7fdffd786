// A minimal, strict reader of NumPy's .npy files (format versions 1.0, 2.0
// and 3.0: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html),
// and the `--dataset npy` data set built on it (LoadNpyData, user_data.h).
// Files are mapped (mapped_file.h): MappedNpy checks the header and leaves
// the data where they are, so the images of `--dataset npy` are read in place
// and the workers of one machine share one copy; ReadNpy copies them into a
// tensor (labels, small arrays).
//
// Strict: what np.save writes for a C-ordered little-endian array of numbers
// is read; anything else (Fortran order, big-endian, objects, strings,
// structured dtypes, a short file, bytes after the data) is a
// std::runtime_error that names the file and the problem, never a guess.
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "trainer/data/mapped_file.h"

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

// A .npy file mapped, its header read and checked; the data are not read.
class MappedNpy {
 public:
  // Throws std::runtime_error naming the file and the problem, as ReadNpy
  // does, for everything but a uint64 value above INT64_MAX (only Read()
  // looks at the values).
  explicit MappedNpy(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::string& descr() const { return descr_; }           // e.g. "<f4", "|u1"
  const std::vector<int64_t>& shape() const { return shape_; }  // () for a scalar
  // The values' type as stored: uint16, uint32 and uint64 are stored as the
  // signed type of their width (NpyArray::data widens them).
  torch::ScalarType stored_type() const { return stored_; }
  // The first value, in C order, at its place in the mapping.
  const uint8_t* data() const { return file_.data() + data_offset_; }
  size_t data_bytes() const { return file_.size() - data_offset_; }

  // A copy of the values, as ReadNpy returns them.
  NpyArray Read() const;

 private:
  MappedFile file_;
  std::string descr_;
  std::vector<int64_t> shape_;
  torch::ScalarType stored_ = torch::kUInt8;
  size_t data_offset_ = 0;
};

// Reads the .npy file at `path`. Throws std::runtime_error naming the file
// and the problem for a missing file, bad magic, an unsupported version or
// dtype, a malformed header, Fortran order, or data shorter or longer than the
// header promises.
NpyArray ReadNpy(const std::string& path);

// The shape as NumPy prints it: "(3,)", "(2, 3)", "()".
std::string NpyShapeString(const std::vector<int64_t>& shape);

}  // namespace elastic::trainer
