// Files that readers see whole or not at all, for checkpoints, reports and
// token files.
//
// Both writers go through a temporary file made by mkstemp in the target's
// directory (unique per call, so concurrent writers of one path never share
// it), write it, fsync it, publish it with one rename or link, and fsync the
// directory. On any failure the temporary file is removed and the target is
// left as it was; errors name the file and the system error.
#pragma once

#include <sys/types.h>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

namespace elastic::runtime {

class FileWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Replaces `path` with the concatenation of `pieces`, mode `mode`. Concurrent
// callers for the same path each publish a whole file; the last rename wins.
void WriteFileAtomically(const std::string& path, std::initializer_list<std::string_view> pieces,
                         mode_t mode = 0644);
void WriteFileAtomically(const std::string& path, std::string_view contents, mode_t mode = 0644);

// Creates `path` with `contents` and mode `mode` unless something (a file, a
// directory, a symbolic link, dangling or not) already has that name: then
// returns false and touches nothing. Of concurrent callers exactly one
// returns true.
bool CreateFileExclusively(const std::string& path, std::string_view contents, mode_t mode = 0600);

}  // namespace elastic::runtime
