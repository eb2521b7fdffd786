#include "trainer/data/test_files.h"

#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace elastic::trainer::testing {

ScratchDir::ScratchDir() {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string pattern = std::string(root != nullptr ? root : "/tmp") + "/data_test.XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + pattern);
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
}

void WriteGzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  if (file == nullptr) throw std::runtime_error("cannot write " + path);
  const bool ok =
      bytes.empty() || gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) ==
                           static_cast<int>(bytes.size());
  if (gzclose(file) != Z_OK || !ok) throw std::runtime_error("gzip write failed: " + path);
}

uint8_t CifarPixel(int record, int pixel, int first) {
  return static_cast<uint8_t>((record * 31 + pixel * 7 + first) % 256);
}

std::vector<uint8_t> CifarRecords(int n, const std::vector<uint8_t>& labels, int first) {
  std::vector<uint8_t> bytes;
  for (int r = 0; r < n; ++r) {
    bytes.push_back(labels[r % labels.size()]);
    for (int p = 0; p < 3072; ++p) bytes.push_back(CifarPixel(r, p, first));
  }
  return bytes;
}

std::string Cifar10SubsetDir() {
  const char* dir = std::getenv("ELASTIC_CIFAR10_SUBSET");
  if (dir == nullptr || *dir == '\0') return "";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(std::string(dir) + "/test_batch.bin", ec)) return "";
  return dir;
}

}  // namespace elastic::trainer::testing
