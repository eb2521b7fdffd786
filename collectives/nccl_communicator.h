// The GPU backend: NCCL. Buffers passed to its operations are CUDA device
// pointers on the communicator's device; operations run on the communicator's
// own CUDA stream, after the work already queued on the legacy default stream
// (LibTorch's), and Wait() blocks until they have completed on the GPU.
//
// Rendezvous: rank 0 creates the ncclUniqueId and publishes it in the runtime's
// key-value store under a generation-scoped key; the others wait for it. Init
// is non-blocking (ncclCommInitRankConfig with blocking = 0) and polled with a
// timeout, so a member that never arrives cannot hang the others; Abort and
// every timeout use ncclCommAbort, which also frees the communicator.
//
// Built against CUDA 13 and NCCL 2.28 from /usr/local/cuda (//third_party:nccl);
// needs a GPU at run time.
#pragma once

#include <memory>
#include <string>

#include "collectives/communicator.h"
#include "runtime/kv_store.h"

namespace elastic::collectives {

struct NcclOptions {
  // CUDA device of this member; -1 picks rank % device count.
  int device = -1;
  std::string tag = "world";
  Timeout default_timeout = std::chrono::seconds(60);
  // Bound on the unique-id exchange plus ncclCommInitRankConfig.
  Timeout init_timeout = std::chrono::seconds(60);
};

// The ncclUniqueId of `membership`'s generation as bytes: created by rank 0 and
// put into `store`, read back by every other rank. Needs no GPU. A change of n
// members costs the store n requests (rank 0's Put, one Wait per other rank)
// and n-1 replies of 128 bytes: linear already, unlike Gloo's own full mesh
// (gloo_mesh.h).
std::string ExchangeNcclUniqueId(runtime::KeyValueStore& store, const Membership& membership,
                                 const std::string& tag, Timeout timeout);

// The key under which ExchangeNcclUniqueId publishes the id.
std::string NcclUniqueIdKey(uint64_t generation, const std::string& tag);

// True when a CUDA device can be used; otherwise false and *why says why.
bool CudaDeviceAvailable(std::string* why);

class NcclCommunicatorFactory : public CommunicatorFactory {
 public:
  NcclCommunicatorFactory(runtime::KeyValueStore& store, NcclOptions options = {});
  std::unique_ptr<Communicator> Create(const Membership& membership) override;

 private:
  runtime::KeyValueStore& store_;
  const NcclOptions options_;
};

}  // namespace elastic::collectives
