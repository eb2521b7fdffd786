// Authenticates the pairs of a freshly connected Gloo context.
//
// Gloo's TCP transport takes whoever connects to a pair's listening port for
// the peer: a process that reaches a worker's port during the rendezvous could
// stand in for a rank and feed it gradients or a forged state. So, before the
// first collective of a generation, every pair proves through its own
// connection that both ends hold the cluster token: each end sends the other a
// fresh random nonce, then answers with
//   HMAC-SHA256(token, "gloo-pair-v1" | tag | generation | lower rank |
//               higher rank | nonce of lower | nonce of higher | direction)
// and checks the peer's answer in constant time. The nonces make a recorded
// answer useless later; the direction keeps an answer from being reflected.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace gloo {
class Context;
}

namespace elastic::collectives {

// What the pairs of one communicator are bound to.
struct PairScope {
  uint64_t generation = 0;
  std::string tag;  // GlooOptions::tag: tells communicators of one generation apart
};

// The bytes `from` MACs to prove the token to `to`. `nonce_lower` is the nonce
// the lower of the two ranks chose, `nonce_higher` the other's.
std::string PairProofMessage(const PairScope& scope, int from, int to,
                             const std::string& nonce_lower, const std::string& nonce_higher);

// HMAC-SHA256(token, PairProofMessage(...)).
std::string PairProof(const std::string& token, const PairScope& scope, int from, int to,
                      const std::string& nonce_lower, const std::string& nonce_higher);

// Runs the exchange with every peer of `context` (all pairs at once) and
// returns when each proved the token. Throws CollectiveError naming the first
// peer (through `describe_peer(rank)`) whose answer is wrong or whose pair
// failed, or CollectiveTimeout when one did not answer within `timeout`; the
// context is unusable then.
void AuthenticatePairs(gloo::Context& context, const std::string& token, const PairScope& scope,
                       std::chrono::milliseconds timeout,
                       const std::function<std::string(int)>& describe_peer);

}  // namespace elastic::collectives
