// The NCCL backend of a build made where /usr/local/cuda held no CUDA or NCCL
// (third_party/cuda.bzl): the same interface, and every use says what is
// missing instead of failing the whole build on machines without GPUs.
#include "collectives/nccl_communicator.h"
#include "runtime/kv_store.h"

namespace elastic::collectives {
namespace {

constexpr char kNoNccl[] =
    "this build has no NCCL: /usr/local/cuda held no CUDA and NCCL when it was built "
    "(docs/build.md, GPU builds); train on the CPU (--device=cpu) or rebuild on a machine "
    "with them";

}  // namespace

std::string NcclUniqueIdKey(uint64_t generation, const std::string& tag) {
  return runtime::GenerationKey(generation, "nccl/" + tag + "/unique_id");
}

std::string ExchangeNcclUniqueId(runtime::KeyValueStore&, const Membership&, const std::string&,
                                 Timeout) {
  throw CollectiveError(kNoNccl);
}

bool CudaDeviceAvailable(std::string* why) {
  if (why) *why = kNoNccl;
  return false;
}

NcclCommunicatorFactory::NcclCommunicatorFactory(runtime::KeyValueStore& store, NcclOptions options)
    : store_(store), options_(std::move(options)) {}

std::unique_ptr<Communicator> NcclCommunicatorFactory::Create(const Membership&) {
  throw CollectiveError(kNoNccl);
}

}  // namespace elastic::collectives
