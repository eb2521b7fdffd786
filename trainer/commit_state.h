// What every rank snapshots at a commit point, and the bytes a state transfer
// carries: rank 0's broadcast at the start of a generation, and the copy the
// controller keeps (CommitReport.state, Generation's source state).
//
// Sealed bytes are HMAC-SHA256 under the cluster token (32 bytes), then four
// doubles (loss sum, metric sum, seen, training seconds since the epoch began),
// then the learner's state, which is what a checkpoint file holds. The MAC is
// checked before anything is decoded: LibTorch's archive reader crashes on
// some malformed input (state_fuzz_test found it), so only bytes sealed by a
// holder of the token ever reach it. LibTorch-free.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace elastic::trainer {

// Bytes that are not a state sealed under this token. The message says what.
class StateTransferError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr size_t kSealBytes = 32;
inline constexpr size_t kCommitHeaderBytes = 4 * sizeof(double);

struct Commit {
  double loss_sum = 0;
  double metric_sum = 0;  // the objective's metric (accuracy: samples right), summed
  double seen = 0;
  double train_seconds = 0;
  std::string learner;  // Learner::CaptureState

  std::string Seal(const std::string& token) const;
  // Throws StateTransferError naming `what` (where the bytes came from) when
  // they are truncated or their MAC does not match.
  static Commit Open(const std::string& token, std::string_view sealed, const std::string& what);
};

}  // namespace elastic::trainer
