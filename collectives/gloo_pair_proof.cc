#include "collectives/gloo_pair_proof.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "collectives/types.h"
#include "runtime/auth.h"

namespace elastic::collectives {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kLabel[] = "gloo-pair-v1";
// Gloo's collectives build their slots from prefixes 0x01..0x08 (gloo/types.h):
// the exchange's own prefix can never meet a collective's message.
constexpr uint8_t kPairProofSlotPrefix = 0x50;
constexpr size_t kProofBytes = 32;  // HMAC-SHA256

void AppendU64(std::string& out, uint64_t value) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(value >> shift));
}

// One end of the exchange with one peer: what this rank sends it and what it
// receives from it, first the nonces, then the proofs.
struct PeerExchange {
  int rank = -1;
  std::string sent;
  std::string received;
  std::unique_ptr<gloo::transport::UnboundBuffer> send_buffer;
  std::unique_ptr<gloo::transport::UnboundBuffer> recv_buffer;
};

// Posts the receive of `size` bytes from the peer and the send of `payload`
// to it, both on `slot`.
void Post(gloo::Context& context, PeerExchange& peer, std::string payload, size_t size,
          uint64_t slot) {
  peer.sent = std::move(payload);
  peer.received.assign(size, '\0');
  peer.recv_buffer = context.createUnboundBuffer(peer.received.data(), peer.received.size());
  peer.send_buffer = context.createUnboundBuffer(peer.sent.data(), peer.sent.size());
  peer.recv_buffer->recv(peer.rank, slot);
  peer.send_buffer->send(peer.rank, slot);
}

std::chrono::milliseconds Left(Clock::time_point deadline) {
  return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                  std::chrono::milliseconds(1));
}

// Waits for both halves of the step with `peer`, turning Gloo's failures into
// errors that name the peer.
void Complete(PeerExchange& peer, const char* step, Clock::time_point deadline,
              std::chrono::milliseconds timeout,
              const std::function<std::string(int)>& describe_peer) {
  bool done = false;
  try {
    done = peer.recv_buffer->waitRecv(Left(deadline)) && peer.send_buffer->waitSend(Left(deadline));
  } catch (const std::exception& e) {
    const std::string message = e.what();
    const std::string what = "gloo pair authentication: " + describe_peer(peer.rank);
    if (message.find("Timed out") != std::string::npos) {
      throw CollectiveTimeout(
          what + " sent no " + step + " within " + std::to_string(timeout.count()) +
          " ms (not a member of this job, or not speaking the pair proof): " + message);
    }
    throw CollectiveError(what + " broke the connection during the " + step +
                          " exchange: " + message);
  }
  if (!done) {
    throw CollectiveError("gloo pair authentication: the " + std::string(step) + " exchange with " +
                          describe_peer(peer.rank) + " was aborted");
  }
}

}  // namespace

std::string PairProofMessage(const PairScope& scope, int from, int to,
                             const std::string& nonce_lower, const std::string& nonce_higher) {
  std::string message(kLabel);
  // Lengths first, so that no two different scopes encode to the same bytes.
  AppendU64(message, scope.tag.size());
  message += scope.tag;
  AppendU64(message, scope.generation);
  AppendU64(message, static_cast<uint64_t>(std::min(from, to)));
  AppendU64(message, static_cast<uint64_t>(std::max(from, to)));
  AppendU64(message, nonce_lower.size());
  message += nonce_lower;
  AppendU64(message, nonce_higher.size());
  message += nonce_higher;
  // The direction: a proof from the lower rank is not one from the higher.
  message.push_back(from < to ? '>' : '<');
  return message;
}

std::string PairProof(const std::string& token, const PairScope& scope, int from, int to,
                      const std::string& nonce_lower, const std::string& nonce_higher) {
  return runtime::HmacSha256(token, PairProofMessage(scope, from, to, nonce_lower, nonce_higher));
}

void AuthenticatePairs(gloo::Context& context, const std::string& token, const PairScope& scope,
                       std::chrono::milliseconds timeout,
                       const std::function<std::string(int)>& describe_peer) {
  const auto deadline = Clock::now() + timeout;
  const uint64_t nonce_slot = gloo::Slot::build(kPairProofSlotPrefix, 0);
  const uint64_t proof_slot = gloo::Slot::build(kPairProofSlotPrefix, 1);
  const int self = context.rank;
  std::vector<PeerExchange> peers;
  for (int rank = 0; rank < context.size; ++rank) {
    if (rank != self) peers.push_back(PeerExchange{rank});
  }
  // Every pair at once: a rank waits for one round trip, not one per peer.
  for (auto& peer : peers)
    Post(context, peer, runtime::RandomNonce(), runtime::kNonceBytes, nonce_slot);
  for (auto& peer : peers) Complete(peer, "nonce", deadline, timeout, describe_peer);

  std::vector<std::string> expected(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    PeerExchange& peer = peers[i];
    const bool lower = self < peer.rank;
    const std::string mine = peer.sent, theirs = peer.received;
    const std::string& nonce_lower = lower ? mine : theirs;
    const std::string& nonce_higher = lower ? theirs : mine;
    expected[i] = PairProof(token, scope, peer.rank, self, nonce_lower, nonce_higher);
    Post(context, peer, PairProof(token, scope, self, peer.rank, nonce_lower, nonce_higher),
         kProofBytes, proof_slot);
  }
  for (size_t i = 0; i < peers.size(); ++i) {
    Complete(peers[i], "proof", deadline, timeout, describe_peer);
    if (!runtime::ConstantTimeEquals(peers[i].received, expected[i])) {
      throw CollectiveError("gloo pair authentication failed: " + describe_peer(peers[i].rank) +
                            " does not hold this job's cluster token (an impostor on the data "
                            "plane, or a worker of another cluster); generation " +
                            std::to_string(scope.generation) + " is not formed");
    }
  }
}

}  // namespace elastic::collectives
