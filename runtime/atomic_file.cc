#include "runtime/atomic_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace elastic::runtime {
namespace {

[[noreturn]] void Fail(const std::string& what, int error) {
  throw FileWriteError(what + ": " + std::strerror(error));
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// A temporary file beside `target`, unique to this call (mkostemp: O_CREAT |
// O_EXCL, so it never opens an existing file or follows a link an attacker
// planted under the name). Removed by the destructor unless Published().
class TempFile {
 public:
  TempFile(const std::string& target, mode_t mode) : target_(target) {
    std::string pattern = target + ".tmp-XXXXXX";
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    fd_ = ::mkostemp(name.data(), O_CLOEXEC | O_NOFOLLOW);
    if (fd_ < 0) Fail("cannot create a temporary file for " + target_, errno);
    path_ = name.data();
    // mkostemp makes 0600; a report is for everyone who can read its directory.
    if (::fchmod(fd_, mode) != 0) {
      const int error = errno;
      Discard();  // the destructor does not run for a constructor that throws
      Fail("cannot chmod " + path_, error);
    }
  }
  ~TempFile() { Discard(); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& path() const { return path_; }

  void Write(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) Fail("cannot write " + path_ + " (the new " + target_ + ")", errno);
      data.remove_prefix(static_cast<size_t>(n));
    }
  }

  // The data must be on disk before the name points at it, or a crash right
  // after the rename could publish an empty file.
  void SyncAndClose() {
    if (::fsync(fd_) != 0) Fail("cannot fsync " + path_ + " (the new " + target_ + ")", errno);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) Fail("cannot close " + path_ + " (the new " + target_ + ")", errno);
  }

  // The temporary name is gone (renamed to the target): nothing to remove.
  void Published() { owns_name_ = false; }

 private:
  void Discard() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (owns_name_) ::unlink(path_.c_str());
    owns_name_ = false;
  }

  std::string target_;
  std::string path_;
  int fd_ = -1;
  bool owns_name_ = true;
};

// A rename or link is durable only once the directory entry is.
void SyncDirectoryOf(const std::string& path) {
  const std::string directory = DirectoryOf(path);
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    Fail(path + " is in place, but its directory " + directory + " cannot be opened", errno);
  // Some file systems cannot sync a directory and say EINVAL: nothing to do.
  if (::fsync(fd) != 0 && errno != EINVAL) {
    const int error = errno;
    ::close(fd);
    Fail(path + " is in place, but fsync of its directory " + directory +
             " failed (the new name may not survive a crash)",
         error);
  }
  ::close(fd);
}

// Gives `temp` the name `path` unless that name exists. renameat2 with
// RENAME_NOREPLACE where the file system has it, else link() (which never
// replaces either) and removal of the temporary name.
bool PublishIfAbsent(TempFile& temp, const std::string& path) {
  if (::renameat2(AT_FDCWD, temp.path().c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) {
    temp.Published();
    return true;
  }
  if (errno == EEXIST) return false;
  if (errno != EINVAL && errno != ENOSYS) {
    Fail("cannot rename " + temp.path() + " to " + path, errno);
  }
  if (::link(temp.path().c_str(), path.c_str()) != 0) {
    if (errno == EEXIST) return false;
    Fail("cannot link " + temp.path() + " to " + path, errno);
  }
  return true;  // the destructor removes the temporary name
}

}  // namespace

void WriteFileAtomically(const std::string& path, std::initializer_list<std::string_view> pieces,
                         mode_t mode) {
  TempFile temp(path, mode);
  for (std::string_view piece : pieces) temp.Write(piece);
  temp.SyncAndClose();
  if (::rename(temp.path().c_str(), path.c_str()) != 0) {
    Fail("cannot rename " + temp.path() + " to " + path, errno);
  }
  temp.Published();
  SyncDirectoryOf(path);
}

void WriteFileAtomically(const std::string& path, std::string_view contents, mode_t mode) {
  WriteFileAtomically(path, {contents}, mode);
}

bool CreateFileExclusively(const std::string& path, std::string_view contents, mode_t mode) {
  TempFile temp(path, mode);
  temp.Write(contents);
  temp.SyncAndClose();
  if (!PublishIfAbsent(temp, path)) return false;
  SyncDirectoryOf(path);
  return true;
}

}  // namespace elastic::runtime
