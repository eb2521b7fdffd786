// Helpers for the data tests: scratch directories and generated data files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace elastic::trainer::testing {

// A fresh directory under $TEST_TMPDIR (or /tmp), removed with its contents
// when the object goes away.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes);
std::vector<uint8_t> ReadFile(const std::string& path);
void WriteGzip(const std::string& path, const std::vector<uint8_t>& bytes);

// n CIFAR-10 records: record r has label labels[r % labels.size()] and pixel
// p equal to (r * 31 + p * 7 + first) % 256, so every byte is checkable.
std::vector<uint8_t> CifarRecords(int n, const std::vector<uint8_t>& labels, int first = 0);
uint8_t CifarPixel(int record, int pixel, int first = 0);

// The path of the real CIFAR-10 subset from $ELASTIC_CIFAR10_SUBSET, or ""
// when it is unset or does not hold test_batch.bin.
std::string Cifar10SubsetDir();

}  // namespace elastic::trainer::testing
