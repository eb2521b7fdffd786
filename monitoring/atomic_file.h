// Replaces a file so that readers see the old contents or the new, never a
// part: write a temp file beside it, fsync, rename over, fsync the directory.
#pragma once

#include <stdexcept>
#include <string>

namespace elastic::monitoring {

class FileWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws FileWriteError naming the path and the system error; the temp file is
// removed on failure.
void WriteFileAtomically(const std::string& path, const std::string& contents);

}  // namespace elastic::monitoring
