#include "trainer/commit_state.h"

#include <cstring>

#include "runtime/auth.h"

namespace elastic::trainer {
namespace {

// Binds the MAC to its use: a MAC of other bytes under the same token (a
// handshake's) is never a valid seal.
constexpr char kContext[] = "elastic-state-v1";

std::string Mac(const std::string& token, std::string_view body) {
  return runtime::HmacSha256(runtime::HmacSha256(token, kContext), body);
}

}  // namespace

std::string Commit::Seal(const std::string& token) const {
  std::string body(kCommitHeaderBytes, '\0');
  const double header[4] = {loss_sum, metric_sum, seen, train_seconds};
  std::memcpy(body.data(), header, sizeof(header));
  body += learner;
  return Mac(token, body) + body;
}

Commit Commit::Open(const std::string& token, std::string_view sealed, const std::string& what) {
  if (sealed.size() < kSealBytes + kCommitHeaderBytes) {
    throw StateTransferError("the state from " + what + " is truncated (" +
                             std::to_string(sealed.size()) + " bytes)");
  }
  const std::string_view body = sealed.substr(kSealBytes);
  if (!runtime::ConstantTimeEquals(std::string(sealed.substr(0, kSealBytes)), Mac(token, body))) {
    throw StateTransferError("the state from " + what +
                             " is not sealed under this job's token (corrupt, or not from a "
                             "worker of this job): refused before decoding");
  }
  Commit c;
  double header[4];
  std::memcpy(header, body.data(), sizeof(header));
  c.loss_sum = header[0];
  c.metric_sum = header[1];
  c.seen = header[2];
  c.train_seconds = header[3];
  c.learner = std::string(body.substr(kCommitHeaderBytes));
  return c;
}

}  // namespace elastic::trainer
