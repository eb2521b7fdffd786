#include "trainer/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace elastic::trainer {
namespace {

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

int AdviceFor(MappedFile::Access access) {
  switch (access) {
    case MappedFile::Access::kRandom:
      return MADV_RANDOM;
    case MappedFile::Access::kSequential:
      return MADV_SEQUENTIAL;
    case MappedFile::Access::kNormal:
      break;
  }
  return MADV_NORMAL;
}

// Closes the descriptor on every path out of the constructor: the mapping
// keeps the file open by itself, so no descriptor is held per data file.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

MappedFile::MappedFile(std::string path, Access access) : path_(std::move(path)) {
  const Descriptor fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    Fail(path_, errno == ENOENT ? "no such file"
                                : "cannot open (" + std::string(std::strerror(errno)) + ")");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    Fail(path_, "cannot stat (" + std::string(std::strerror(errno)) + ")");
  }
  if (!S_ISREG(st.st_mode)) Fail(path_, "not a regular file");
  if (st.st_size == 0) return;  // mmap refuses a length of 0
  void* map = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd.get(), 0);
  if (map == MAP_FAILED) Fail(path_, "cannot map (" + std::string(std::strerror(errno)) + ")");
  data_ = static_cast<const uint8_t*>(map);
  size_ = static_cast<size_t>(st.st_size);
  Advise(access);
}

MappedFile::~MappedFile() { Release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::Advise(Access access) const {
  if (data_ != nullptr) ::madvise(const_cast<uint8_t*>(data_), size_, AdviceFor(access));
}

void MappedFile::Release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace elastic::trainer
