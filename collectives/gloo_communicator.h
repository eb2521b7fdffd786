// The CPU backend: Gloo over TCP, rendezvousing through the runtime's
// key-value store with one Put and one WaitAll per rank (GlooMeshContext). Each communicator owns
// its own Gloo device (event-loop thread + sockets), so destroying it releases everything it made.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "collectives/communicator.h"
#include "runtime/kv_store.h"

namespace elastic::collectives {

struct GlooOptions {
  // Address this member listens on and advertises to its peers.
  std::string hostname = "127.0.0.1";
  // Separates several communicators created in the same generation.
  std::string tag = "world";
  // Timeout of an operation that does not name its own.
  Timeout default_timeout = std::chrono::seconds(60);
  // Bound on the rendezvous (all members publishing their addresses, connecting
  // and authenticating their pairs).
  Timeout rendezvous_timeout = std::chrono::seconds(60);
  // The cluster token. With one, every pair proves through its own connection
  // that both ends hold it before the communicator is handed out
  // (collectives/gloo_pair_proof.h). Empty: no proof (unit tests without a
  // token); production always passes it.
  std::string token;
  // Asked while the pairs connect: true once the generation is superseded, so
  // that Create gives up (CollectiveAborted) at once rather than wait out the
  // rendezvous timeout for a member that died after publishing its address.
  // Empty: never.
  std::function<bool()> abandoned;
};

class GlooCommunicatorFactory : public CommunicatorFactory {
 public:
  // `store` must outlive the factory and every communicator it creates.
  // Sets SIGPIPE to be ignored when its action is the default: a write to a
  // dead peer must fail the operation, not end the process.
  GlooCommunicatorFactory(runtime::KeyValueStore& store, GlooOptions options = {});

  // Blocks until all `membership.size` members of the generation have joined.
  // Throws CollectiveTimeout naming the missing ranks when they do not within
  // rendezvous_timeout, and CollectiveError naming the peer's rank and address
  // when a peer's pair fails to connect or fails the pair proof.
  std::unique_ptr<Communicator> Create(const Membership& membership) override;

 private:
  runtime::KeyValueStore& store_;
  const GlooOptions options_;
};

}  // namespace elastic::collectives
