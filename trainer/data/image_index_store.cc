#include "trainer/data/image_index_store.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace elastic::trainer {
namespace {

namespace fs = std::filesystem;

// 16 hex digits of SHA-256(text): which data directory a cached index is of.
std::string ShortHash(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), digest, &n, EVP_sha256(), nullptr);
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 8; ++i) {
    out += kDigits[digest[i] >> 4];
    out += kDigits[digest[i] & 15];
  }
  return out;
}

std::string CachedName(const std::string& data_dir, const std::string& suffix) {
  std::string base = fs::path(data_dir).filename().string();
  if (base.empty()) base = fs::path(data_dir).parent_path().filename().string();
  if (base.empty()) base = "root";
  return base + "-" + ShortHash(data_dir) + suffix;
}

std::string Errno() { return std::strerror(errno); }

void FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// The whole file behind `fd` (false, errno set, when it cannot be read).
bool ReadWhole(int fd, std::string* bytes) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) return false;
  bytes->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes->size()) {
    const ssize_t n = ::read(fd, bytes->data() + done, bytes->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;  // shorter than it was: the decoder says it is truncated
    done += static_cast<size_t>(n);
  }
  bytes->resize(done);
  return true;
}

}  // namespace

IndexPlaces PlacesFor(const std::string& data_dir, bool data_dir_writable,
                      const std::string& index_dir, const std::string& cache_root,
                      const std::string& beside_name, const std::string& suffix) {
  const std::string cached = CachedName(data_dir, suffix);
  if (!index_dir.empty()) {
    const std::string path = index_dir + "/" + cached;
    return IndexPlaces{{path}, path};
  }
  const std::string beside = data_dir + "/" + beside_name;
  const std::string in_cache = cache_root + "/image-index/" + cached;
  return IndexPlaces{{beside, in_cache}, data_dir_writable ? beside : in_cache};
}

bool DirectoryWritable(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  // access() sees a read-only file system (EROFS) and, for others than root,
  // the permissions.
  if (::access(dir.c_str(), W_OK) != 0) return false;
  return ::geteuid() != 0 || (st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) != 0;
}

std::vector<StoredBytes> ReadStoredFiles(const std::vector<std::string>& paths) {
  std::vector<StoredBytes> found;
  for (const std::string& path : paths) {
    std::string bytes;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) continue;
    StoredBytes stored;
    stored.path = path;
    if (!ReadWhole(fd, &bytes)) {
      stored.problem = "cannot read: " + Errno();
    } else {
      stored.bytes = std::move(bytes);
    }
    if (fd >= 0) ::close(fd);
    found.push_back(std::move(stored));
  }
  return found;
}

std::vector<StoredIndex> ReadIndexFiles(const std::vector<std::string>& paths) {
  std::vector<StoredIndex> found;
  for (StoredBytes& file : ReadStoredFiles(paths)) {
    StoredIndex stored;
    stored.path = std::move(file.path);
    stored.problem = std::move(file.problem);
    if (file.bytes) {
      try {
        stored.index = DecodeIndex(*file.bytes);
      } catch (const IndexFormatError& e) {
        stored.problem = e.what();
      }
    }
    found.push_back(std::move(stored));
  }
  return found;
}

void WriteIndexFile(const std::string& path, const ImageIndex& index) {
  WriteFileAtomically(path, EncodeIndex(index));
}

void WriteFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string dir = fs::path(path).parent_path().string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir + ": cannot create: " + ec.message());
  // The pid keeps two writers' temporaries apart; the rename makes the whole
  // file appear at once, so a reader sees the old index or the new one.
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(temp + ": cannot create: " + Errno());
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string reason = Errno();
      ::close(fd);
      ::unlink(temp.c_str());
      throw std::runtime_error(temp + ": cannot write: " + reason);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string reason = Errno();
    ::unlink(temp.c_str());
    throw std::runtime_error(temp + ": cannot flush: " + reason);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = Errno();
    ::unlink(temp.c_str());
    throw std::runtime_error("cannot rename " + temp + " to " + path + ": " + reason);
  }
  FsyncDir(dir);
}

IndexLock::IndexLock(const std::string& index_path) {
  const std::string path = index_path + ".lock";
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error(path + ": cannot open: " + Errno());
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      const std::string reason = Errno();
      ::close(fd_);
      throw std::runtime_error(path + ": cannot lock: " + reason);
    }
  }
}

IndexLock::~IndexLock() { ::close(fd_); }  // closing releases the lock

}  // namespace elastic::trainer
