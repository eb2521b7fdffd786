#include "trainer/data/tar_gz.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace elastic::trainer {
namespace {

constexpr size_t kBlock = 512;

// A gzip stream read in whole pieces, remembering how far it got.
class GzStream {
 public:
  explicit GzStream(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {
    if (file_ == nullptr) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
    gzbuffer(file_, 1 << 20);
  }
  ~GzStream() { gzclose(file_); }
  GzStream(const GzStream&) = delete;
  GzStream& operator=(const GzStream&) = delete;

  // Reads exactly n bytes; false if the stream ends first (at offset()).
  bool Read(void* out, size_t n) {
    auto* p = static_cast<uint8_t*>(out);
    while (n > 0) {
      const int got = gzread(file_, p, static_cast<unsigned>(std::min<size_t>(n, 1 << 30)));
      if (got < 0) Fail("gzip error");
      if (got == 0) {
        int code = 0;
        const char* message = gzerror(file_, &code);
        if (code != Z_OK && code != Z_STREAM_END) Fail(std::string("gzip error: ") + message);
        return false;
      }
      p += got;
      n -= got;
      offset_ += got;
    }
    return true;
  }

  [[noreturn]] void Fail(const std::string& what) const {
    throw std::runtime_error(path_ + ": " + what + " at byte offset " + std::to_string(offset_) +
                             " of the tar stream");
  }

  uint64_t offset() const { return offset_; }

 private:
  std::string path_;
  gzFile file_;
  uint64_t offset_ = 0;
};

// A numeric header field: octal digits (space/NUL padded), or base-256 when
// the top bit of the first byte is set (GNU tar, files over 8 GiB).
bool ParseNumber(const char* field, size_t len, uint64_t* out) {
  const auto* u = reinterpret_cast<const uint8_t*>(field);
  uint64_t value = 0;
  if (u[0] & 0x80) {
    value = u[0] & 0x7f;
    for (size_t i = 1; i < len; ++i) value = (value << 8) | u[i];
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

std::string Field(const char* field, size_t len) { return std::string(field, strnlen(field, len)); }

std::string BaseName(const std::string& path) {
  std::string p = path;
  while (!p.empty() && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// The "path" record of a pax extended header ("<len> path=<value>\n" records).
std::string PaxPath(const std::string& data) {
  size_t pos = 0;
  while (pos < data.size()) {
    const size_t space = data.find(' ', pos);
    if (space == std::string::npos) break;
    const size_t len = std::strtoull(data.c_str() + pos, nullptr, 10);
    if (len == 0 || pos + len > data.size()) break;
    const std::string record = data.substr(space + 1, pos + len - space - 2);  // drop '\n'
    if (record.rfind("path=", 0) == 0) return record.substr(5);
    pos += len;
  }
  return "";
}

void WriteAll(int fd, const uint8_t* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(path + ": write failed: " + std::strerror(errno));
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

std::vector<std::string> ExtractTarGz(const std::string& archive, const std::string& dest_dir,
                                      const std::function<bool(const std::string&)>& want) {
  GzStream in(archive);
  std::vector<std::string> written;
  std::string long_name;  // from a GNU 'L' or pax 'x' entry, for the next entry
  std::vector<uint8_t> buffer(1 << 20);
  char header[kBlock];
  int zero_blocks = 0;
  for (;;) {
    const uint64_t header_offset = in.offset();
    if (!in.Read(header, kBlock)) {
      // Archives end with two zero blocks; some writers stop after one or none.
      if (in.offset() == header_offset && (zero_blocks > 0 || header_offset > 0)) break;
      in.Fail("truncated tar header");
    }
    if (std::all_of(header, header + kBlock, [](char c) { return c == 0; })) {
      if (++zero_blocks == 2) break;
      continue;
    }
    zero_blocks = 0;

    uint64_t checksum = 0, size = 0;
    if (!ParseNumber(header + 148, 8, &checksum) || !ParseNumber(header + 124, 12, &size)) {
      throw std::runtime_error(archive + ": not a tar header at byte offset " +
                               std::to_string(header_offset) + " of the tar stream");
    }
    uint64_t sum = 0;
    for (size_t i = 0; i < kBlock; ++i) {
      sum += (i >= 148 && i < 156) ? ' ' : static_cast<uint8_t>(header[i]);
    }
    if (sum != checksum) {
      throw std::runtime_error(archive + ": tar header checksum mismatch at byte offset " +
                               std::to_string(header_offset) + " of the tar stream");
    }

    const char type = header[156];
    std::string name = Field(header, 100);
    if (std::memcmp(header + 257, "ustar", 5) == 0 && header[345] != '\0') {
      name = Field(header + 345, 155) + "/" + name;
    }
    if (!long_name.empty()) name = long_name;
    const uint64_t padded = (size + kBlock - 1) / kBlock * kBlock;

    if (type == 'L' || type == 'x') {  // the name of the next entry
      if (size > (1 << 20)) in.Fail("oversized tar name entry");
      std::string data(padded, '\0');
      if (!in.Read(data.data(), padded)) in.Fail("truncated tar name entry");
      data.resize(size);
      long_name = type == 'L' ? Field(data.data(), data.size()) : PaxPath(data);
      continue;
    }
    long_name.clear();

    const bool regular = type == '0' || type == '\0';
    const std::string base = BaseName(name);
    int fd = -1;
    std::string out_path;
    if (regular && !base.empty() && base != "." && base != ".." && want(base)) {
      out_path = dest_dir + "/" + base;
      fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) throw std::runtime_error(out_path + ": cannot create: " + std::strerror(errno));
    }
    uint64_t left = padded;
    uint64_t data_left = size;
    while (left > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buffer.size()));
      if (!in.Read(buffer.data(), n)) {
        if (fd >= 0) ::close(fd);
        in.Fail("truncated data of '" + name + "'");
      }
      if (fd >= 0) {
        const size_t keep = static_cast<size_t>(std::min<uint64_t>(n, data_left));
        try {
          WriteAll(fd, buffer.data(), keep, out_path);
        } catch (...) {
          ::close(fd);
          throw;
        }
      }
      data_left -= std::min<uint64_t>(n, data_left);
      left -= n;
    }
    if (fd >= 0) {
      const bool ok = ::fsync(fd) == 0;
      ::close(fd);
      if (!ok) throw std::runtime_error(out_path + ": fsync failed: " + std::strerror(errno));
      written.push_back(base);
    }
  }
  return written;
}

}  // namespace elastic::trainer
