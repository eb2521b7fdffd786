// Little-endian writer and bounds-checked reader for the small fixed fields
// of the training state (counters, schedule state). Tensors go through
// LibTorch's archives; these carry everything else.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

namespace elastic::trainer {

// Malformed or truncated state bytes.
class StateFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ByteWriter {
 public:
  void U64(uint64_t value) {
    for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
  void I64(int64_t value) { U64(static_cast<uint64_t>(value)); }
  void F64(double value) {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    U64(bits);
  }
  // Length-prefixed.
  void Bytes(std::string_view value) {
    U64(value.size());
    bytes_.append(value.data(), value.size());
  }
  const std::string& bytes() const { return bytes_; }
  std::string Take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class ByteReader {
 public:
  // `what` names the thing being read in error messages.
  ByteReader(std::string_view bytes, std::string what) : bytes_(bytes), what_(std::move(what)) {}

  uint64_t U64() {
    Need(8);
    uint64_t value = 0;
    for (int i = 0; i < 8; ++i)
      value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes_[offset_ + i])) << (8 * i);
    offset_ += 8;
    return value;
  }
  int64_t I64() { return static_cast<int64_t>(U64()); }
  double F64() {
    const uint64_t bits = U64();
    double value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  std::string_view Bytes() {
    const uint64_t size = U64();
    Need(size);
    std::string_view value = bytes_.substr(offset_, size);
    offset_ += size;
    return value;
  }
  bool done() const { return offset_ == bytes_.size(); }
  // Throws unless every byte was consumed.
  void ExpectEnd() const {
    if (!done())
      throw StateFormatError(what_ + ": " + std::to_string(bytes_.size() - offset_) +
                             " unexpected trailing bytes");
  }

 private:
  void Need(uint64_t size) const {
    if (size > bytes_.size() - offset_)
      throw StateFormatError(what_ + ": truncated at byte " + std::to_string(offset_) + " (need " +
                             std::to_string(size) + " more, have " +
                             std::to_string(bytes_.size() - offset_) + ")");
  }

  std::string_view bytes_;
  std::string what_;
  size_t offset_ = 0;
};

}  // namespace elastic::trainer
