#include "trainer/data/tar_test_files.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace elastic::trainer::testing {
namespace {

constexpr size_t kBlock = 512;

void Octal(char* field, size_t len, size_t value) {
  std::snprintf(field, len, "%0*zo", static_cast<int>(len - 1), value);
}

void Pad(std::string& out) { out.resize((out.size() + kBlock - 1) / kBlock * kBlock, '\0'); }

}  // namespace

void TarWriter::Header(const std::string& name, size_t size, char type) {
  char block[kBlock] = {};
  std::memcpy(block, name.data(), std::min<size_t>(name.size(), 100));
  Octal(block + 100, 8, 0644);  // mode
  Octal(block + 108, 8, 0);     // uid
  Octal(block + 116, 8, 0);     // gid
  Octal(block + 124, 12, size);
  Octal(block + 136, 12, 0);  // mtime
  block[156] = type;
  std::memcpy(block + 257,
              "ustar\0"
              "00",
              8);
  std::memset(block + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < kBlock; ++i) sum += static_cast<unsigned char>(block[i]);
  std::snprintf(block + 148, 8, "%06o", sum);  // six digits, NUL, then the space already there
  out_.append(block, kBlock);
}

void TarWriter::Add(const std::string& name, std::string_view data, char type) {
  if (name.size() > 100) {
    // "<len> path=<name>\n", where <len> counts its own digits.
    const std::string record = " path=" + name + "\n";
    size_t len = record.size() + 1;
    while (std::to_string(len).size() + record.size() != len) ++len;
    const std::string pax = std::to_string(len) + record;
    Header("PaxHeader/" + name.substr(0, 80), pax.size(), 'x');
    out_.append(pax);
    Pad(out_);
  }
  Header(name, data.size(), type);
  out_.append(data);
  Pad(out_);
}

std::string TarWriter::Finish(int zero_blocks) const {
  return out_ + std::string(kBlock * zero_blocks, '\0');
}

}  // namespace elastic::trainer::testing
