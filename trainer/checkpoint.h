// Checkpoint files: a header (magic, format version, payload size, SHA-256 of
// the payload) followed by the payload, which is the training state bytes of
// Learner::CaptureState().
//
// Writing goes to a temporary file unique to the call (`<path>.tmp-XXXXXX`,
// runtime/atomic_file.h), is fsync'ed, then renamed over `path` and the
// directory fsync'ed: a crash, a failed write or a second writer at the same
// time leaves a whole checkpoint in place, never a half-written one.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace elastic::trainer {

// A checkpoint that cannot be written, or read back intact. The message names
// the file and what is wrong with it.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void WriteCheckpointFile(const std::string& path, std::string_view payload);

// Returns the payload after checking magic, version, size and checksum.
std::string ReadCheckpointFile(const std::string& path);

// The checkpoint a run writes to and resumes from: <dir>/checkpoint.ckpt.
std::string CheckpointPath(const std::string& dir);

// Writes `payload` as the checkpoint of `dir` (created if missing) and returns
// its path. Throws CheckpointError when the directory cannot be made.
std::string WriteCheckpointIn(const std::string& dir, std::string_view payload);

// A new run (not --resume) would replace the checkpoint in `dir` with its
// own, which starts from a fresh model: throws CheckpointError saying so and
// how to go on (--resume, or another --checkpoint-dir) when `dir` holds one.
// Nothing to check for an empty `dir` (no checkpoints) or with `resume`.
void CheckNoCheckpointToReplace(const std::string& dir, bool resume);

}  // namespace elastic::trainer
