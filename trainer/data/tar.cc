#include "trainer/data/tar.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace elastic::trainer {
namespace {

// A GNU long name or pax header longer than this is damage, not a name.
constexpr uint64_t kMaxNameEntry = 1 << 20;

// A numeric header field: octal digits (space/NUL padded), or base-256 when
// the top bit of the first byte is set (GNU tar, files over 8 GiB).
bool ParseNumber(const uint8_t* field, size_t len, uint64_t* out) {
  uint64_t value = 0;
  if (field[0] & 0x80) {
    value = field[0] & 0x7f;
    for (size_t i = 1; i < len; ++i) value = (value << 8) | field[i];
    *out = value;
    return true;
  }
  size_t i = 0;
  while (i < len && (field[i] == ' ' || field[i] == '\0')) ++i;
  bool any = false;
  for (; i < len && field[i] >= '0' && field[i] <= '7'; ++i) {
    value = value * 8 + (field[i] - '0');
    any = true;
  }
  for (; i < len; ++i) {
    if (field[i] != ' ' && field[i] != '\0') return false;
  }
  *out = value;
  return any;
}

std::string Field(const uint8_t* field, size_t len) {
  const char* text = reinterpret_cast<const char*>(field);
  return std::string(text, strnlen(text, len));
}

}  // namespace

TarBlock ParseTarHeader(const uint8_t* block, TarHeader* header) {
  if (std::all_of(block, block + kTarBlock, [](uint8_t c) { return c == 0; })) {
    return TarBlock::kZero;
  }
  uint64_t checksum = 0, size = 0;
  if (!ParseNumber(block + 148, 8, &checksum) || !ParseNumber(block + 124, 12, &size)) {
    return TarBlock::kNotAHeader;
  }
  // The checksum is the sum of the block's bytes with its own field as spaces.
  uint64_t sum = 0;
  for (size_t i = 0; i < kTarBlock; ++i) sum += (i >= 148 && i < 156) ? ' ' : block[i];
  if (sum != checksum) return TarBlock::kChecksumMismatch;
  header->type = static_cast<char>(block[156]);
  header->size = size;
  header->name = Field(block, 100);
  // POSIX ustar ("ustar\0") splits a long path into prefix and name; GNU's
  // magic ("ustar  ") keeps other fields where the prefix would be.
  if (std::memcmp(block + 257, "ustar\0", 6) == 0 && block[345] != '\0') {
    header->name = Field(block + 345, 155) + "/" + header->name;
  }
  return TarBlock::kHeader;
}

uint64_t TarPadded(uint64_t size) { return (size + kTarBlock - 1) / kTarBlock * kTarBlock; }

std::string PaxPath(std::string_view records) {
  size_t pos = 0;
  while (pos < records.size()) {
    const size_t space = records.find(' ', pos);
    if (space == std::string_view::npos) break;
    const size_t len =
        std::strtoull(std::string(records.substr(pos, space - pos)).c_str(), nullptr, 10);
    if (len == 0 || pos + len > records.size() || space + 1 >= pos + len) break;
    const std::string_view record = records.substr(space + 1, pos + len - space - 2);  // no '\n'
    if (record.substr(0, 5) == "path=") return std::string(record.substr(5));
    pos += len;
  }
  return "";
}

std::string GnuLongName(std::string_view data) {
  return std::string(data.substr(0, data.find('\0')));
}

TarScanner::TarScanner(std::string name, const uint8_t* data, size_t size)
    : name_(std::move(name)), data_(data), size_(size) {}

void TarScanner::Fail(TarError::Kind kind, uint64_t offset, const std::string& why,
                      const std::string& member) const {
  throw TarError(kind, offset, why, name_ + ": " + why, member);
}

std::optional<TarMember> TarScanner::Next() {
  std::string long_name;  // from a GNU 'L' or pax 'x' entry, for the next entry
  while (!ended_) {
    const uint64_t at = offset_;
    if (at == size_) {
      Fail(TarError::Kind::kTruncated, at,
           "ends at byte " + std::to_string(at) +
               " without the end-of-archive block that every tar writer adds (cut short?)");
    }
    if (size_ - at < kTarBlock) {
      Fail(TarError::Kind::kTruncated, at,
           "ends at byte " + std::to_string(size_) + " inside the tar header at byte offset " +
               std::to_string(at));
    }
    TarHeader header;
    const TarBlock block = ParseTarHeader(data_ + at, &header);
    ++headers_read_;
    if (block == TarBlock::kZero) {
      // One zero block ends the walk: some writers add only one, and what
      // follows the end is not read.
      ended_ = true;
      break;
    }
    if (block == TarBlock::kNotAHeader) {
      Fail(TarError::Kind::kCorrupt, at,
           "corrupt tar header at byte offset " + std::to_string(at) +
               " (its size or checksum field is not an octal number)");
    }
    if (block == TarBlock::kChecksumMismatch) {
      Fail(TarError::Kind::kCorrupt, at,
           "corrupt tar header at byte offset " + std::to_string(at) + " (checksum mismatch)");
    }
    const uint64_t data_offset = at + kTarBlock;
    if (header.size > size_ - data_offset) {
      const std::string member = long_name.empty() ? header.name : long_name;
      Fail(TarError::Kind::kTruncated, at,
           "ends at byte " + std::to_string(size_) + " inside member '" + member +
               "', whose header at byte offset " + std::to_string(at) + " says " +
               std::to_string(header.size) + " bytes",
           member);
    }
    // Padding past the end is tolerated: some writers omit the last member's.
    offset_ = std::min<uint64_t>(size_, data_offset + TarPadded(header.size));
    const std::string_view body(reinterpret_cast<const char*>(data_ + data_offset), header.size);
    if (header.type == 'L' || header.type == 'x') {
      if (header.size > kMaxNameEntry) {
        Fail(TarError::Kind::kCorrupt, at,
             "corrupt tar header at byte offset " + std::to_string(at) + " (a name entry of " +
                 std::to_string(header.size) + " bytes)");
      }
      long_name = header.type == 'L' ? GnuLongName(body) : PaxPath(body);
      continue;
    }
    if (header.type == 'g' || header.type == '5') {  // pax global header, directory
      long_name.clear();
      continue;
    }
    TarMember member;
    member.name = long_name.empty() ? header.name : long_name;
    member.header_offset = at;
    member.data_offset = data_offset;
    member.size = header.size;
    member.regular = header.type == '0' || header.type == '\0' || header.type == '7';
    return member;
  }
  return std::nullopt;
}

std::string_view TarScanner::Data(const TarMember& member) const {
  return std::string_view(reinterpret_cast<const char*>(data_ + member.data_offset), member.size);
}

}  // namespace elastic::trainer
