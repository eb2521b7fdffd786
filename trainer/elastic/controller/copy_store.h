// The controller's copy of the job's state, kept on disk in --state-dir so
// that it outlives the controller (docs/elastic.md, "Where a generation's
// state comes from").
//
// Every copy rank 0 sends is written whole to its own file,
// <dir>/copy-step<S>-<first 16 hex digits of its SHA-256>, with
// runtime/atomic_file (temporary file, fsync, rename, fsync of the
// directory). The journal names the file and its digest only after the file
// is complete, and the previous copy is removed only after the journal names
// the new one: whatever moment the controller dies at, the journal names a
// complete copy or none. The bytes are what rank 0 sealed (commit_state.h),
// so a reader also needs the cluster token to use them.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "trainer/state_point.h"

namespace elastic::trainer {

// A copy on disk, as the journal names it.
struct StoredCopy {
  StatePoint point;
  std::string file;    // a name in the state directory, not a path
  std::string sha256;  // of the file's bytes, 64 lowercase hex digits
};
bool operator==(const StoredCopy& a, const StoredCopy& b);

// A copy that cannot be read back whole. The message names the file and what is wrong.
class StoredCopyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CopyStore {
 public:
  explicit CopyStore(std::string dir);

  // Writes `sealed` (rank 0's copy of the state at `point`) to a new file and
  // returns what the journal is to name. Throws runtime::FileWriteError (a
  // full or read-only directory) after removing its temporary file; the
  // copies already there are untouched.
  StoredCopy Write(const StatePoint& point, std::string_view sealed) const;

  // The bytes of `copy`, checked against its digest. Throws StoredCopyError
  // when the file is missing, unreadable, or not the one the journal names.
  std::string Read(const StoredCopy& copy) const;

  // Removes every copy file (and a killed writer's temporary file) but
  // `keep`: the copies the journal no longer names. Returns how many went;
  // a file that cannot be removed is left for the next call.
  int RemoveAllBut(const std::optional<StoredCopy>& keep) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// 64 lowercase hex digits.
std::string Sha256Hex(std::string_view bytes);

}  // namespace elastic::trainer
