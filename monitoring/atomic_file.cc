#include "monitoring/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace elastic::monitoring {

namespace {

[[noreturn]] void Fail(const std::string& what, const std::string& path, int error) {
  throw FileWriteError(what + " " + path + ": " + std::strerror(error));
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

void WriteFileAtomically(const std::string& path, const std::string& contents) {
  std::vector<char> temp(path.begin(), path.end());
  const std::string suffix = ".tmp-XXXXXX";
  temp.insert(temp.end(), suffix.begin(), suffix.end());
  temp.push_back('\0');
  const int fd = mkstemp(temp.data());
  if (fd < 0) Fail("cannot create a temp file for", path, errno);
  const std::string temp_path = temp.data();

  auto abandon = [&](const std::string& what) {
    const int error = errno;
    close(fd);
    unlink(temp_path.c_str());
    Fail(what, temp_path, error);
  };
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("cannot write");
    }
    written += static_cast<size_t>(n);
  }
  // mkstemp makes 0600; a report is for everyone who can read the run directory.
  if (fchmod(fd, 0644) != 0) abandon("cannot chmod");
  if (fsync(fd) != 0) abandon("cannot fsync");
  if (close(fd) != 0) {
    const int error = errno;
    unlink(temp_path.c_str());
    Fail("cannot close", temp_path, error);
  }
  if (rename(temp_path.c_str(), path.c_str()) != 0) {
    const int error = errno;
    unlink(temp_path.c_str());
    Fail("cannot rename " + temp_path + " to", path, error);
  }
  // The rename is durable only once the directory entry is.
  const std::string directory = DirectoryOf(path);
  const int dir_fd = open(directory.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir_fd >= 0) {
    fsync(dir_fd);
    close(dir_fd);
  }
}

}  // namespace elastic::monitoring
