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

#include "trainer/data/tar.h"

namespace elastic::trainer {
namespace {

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

std::string BaseName(const std::string& path) {
  std::string p = path;
  while (!p.empty() && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
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
  uint8_t header_block[kTarBlock];
  int zero_blocks = 0;
  for (;;) {
    const uint64_t header_offset = in.offset();
    if (!in.Read(header_block, kTarBlock)) {
      // Archives end with two zero blocks; some writers stop after one or none.
      if (in.offset() == header_offset && (zero_blocks > 0 || header_offset > 0)) break;
      in.Fail("truncated tar header");
    }
    TarHeader header;
    const TarBlock block = ParseTarHeader(header_block, &header);
    if (block == TarBlock::kZero) {
      if (++zero_blocks == 2) break;
      continue;
    }
    zero_blocks = 0;
    if (block == TarBlock::kNotAHeader) {
      throw std::runtime_error(archive + ": not a tar header at byte offset " +
                               std::to_string(header_offset) + " of the tar stream");
    }
    if (block == TarBlock::kChecksumMismatch) {
      throw std::runtime_error(archive + ": tar header checksum mismatch at byte offset " +
                               std::to_string(header_offset) + " of the tar stream");
    }

    const char type = header.type;
    const uint64_t size = header.size;
    const std::string name = long_name.empty() ? header.name : long_name;
    const uint64_t padded = TarPadded(size);

    if (type == 'L' || type == 'x') {  // the name of the next entry
      if (size > (1 << 20)) in.Fail("oversized tar name entry");
      std::string data(padded, '\0');
      if (!in.Read(data.data(), padded)) in.Fail("truncated tar name entry");
      data.resize(size);
      long_name = type == 'L' ? GnuLongName(data) : PaxPath(data);
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
