#include "collectives/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

namespace elastic::collectives {
namespace {

using Clock = std::chrono::steady_clock;

void CheckCuda(cudaError_t code, const std::string& what) {
  if (code != cudaSuccess) {
    throw CollectiveError(what + ": CUDA error: " + cudaGetErrorString(code));
  }
}

ncclDataType_t NcclType(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

// What the communicator and its outstanding Works share: a Work may outlive
// the communicator, and then reports that it was aborted.
struct NcclState {
  std::mutex mutex;  // serialises NCCL calls on `comm`
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  std::atomic<bool> aborted{false};
  std::string name;

  // Tears the communicator down without waiting for peers. Caller holds mutex.
  void AbortLocked() {
    aborted = true;
    if (comm != nullptr) {
      ncclCommAbort(comm);
      comm = nullptr;
    }
  }

  // Polls a non-blocking NCCL call until it leaves ncclInProgress.
  void Settle(ncclResult_t result, const std::string& what, Clock::time_point deadline) {
    while (result == ncclInProgress) {
      if (Clock::now() >= deadline) {
        AbortLocked();
        throw CollectiveTimeout(what + ": NCCL call still in progress at its deadline");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ncclCommGetAsyncError(comm, &result);
    }
    if (result != ncclSuccess) {
      const std::string reason = ncclGetErrorString(result);
      const std::string detail = comm != nullptr ? ncclGetLastError(comm) : "";
      AbortLocked();
      throw CollectiveError(what + ": NCCL error: " + reason + " " + detail);
    }
  }
};

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, cudaEvent_t event, std::string what,
           Clock::time_point deadline)
      : state_(std::move(state)), event_(event), what_(std::move(what)), deadline_(deadline) {}
  ~NcclWork() override { cudaEventDestroy(event_); }

  bool IsCompleted() override {
    return done_ || state_->aborted || cudaEventQuery(event_) != cudaErrorNotReady;
  }

  void Wait() override {
    if (done_) return;
    for (;;) {
      if (state_->aborted) throw CollectiveAborted(what_ + ": communicator aborted");
      const cudaError_t query = cudaEventQuery(event_);
      if (query == cudaSuccess) break;
      if (query != cudaErrorNotReady) CheckCuda(query, what_);
      {
        std::lock_guard<std::mutex> lock(state_->mutex);
        if (state_->comm == nullptr) throw CollectiveAborted(what_ + ": communicator aborted");
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(state_->comm, &async);
        if (async != ncclSuccess && async != ncclInProgress) {
          const std::string reason = ncclGetErrorString(async);
          state_->AbortLocked();
          throw CollectiveError(what_ + ": NCCL error (a peer failed?): " + reason);
        }
        if (Clock::now() >= deadline_) {
          state_->AbortLocked();
          throw CollectiveTimeout(what_ + ": timed out; communicator aborted");
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    done_ = true;
  }

 private:
  std::shared_ptr<NcclState> state_;
  cudaEvent_t event_;
  const std::string what_;
  const Clock::time_point deadline_;
  std::atomic<bool> done_{false};
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(const Membership& membership, const NcclOptions& options,
                   runtime::KeyValueStore& store)
      : Communicator(membership, options.default_timeout), state_(std::make_shared<NcclState>()) {
    state_->name = "nccl (generation " + std::to_string(membership.generation) + ", rank " +
                   std::to_string(membership.rank) + "/" + std::to_string(membership.size) + ")";
    const auto deadline = Clock::now() + options.init_timeout;
    std::string why;
    if (!CudaDeviceAvailable(&why)) throw CollectiveError(state_->name + ": " + why);
    int devices = 0;
    CheckCuda(cudaGetDeviceCount(&devices), state_->name);
    device_ = options.device >= 0 ? options.device : membership.rank % devices;
    CheckCuda(cudaSetDevice(device_), state_->name + ": cudaSetDevice");
    const std::string id_bytes =
        ExchangeNcclUniqueId(store, membership, options.tag, options.init_timeout);
    ncclUniqueId id;
    std::memcpy(&id, id_bytes.data(), sizeof(id));
    CheckCuda(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking), state_->name);
    CheckCuda(cudaMalloc(&scratch_, sizeof(float)), state_->name);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // so that a missing member is a timeout, not a hang
    std::lock_guard<std::mutex> lock(state_->mutex);
    const ncclResult_t result =
        ncclCommInitRankConfig(&state_->comm, membership.size, id, membership.rank, &config);
    try {
      state_->Settle(result, state_->name + ": ncclCommInitRankConfig", deadline);
    } catch (...) {
      Release();
      throw;
    }
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (state_->comm != nullptr) {
        // Flush what was issued, then free; never wait on peers beyond the timeout.
        try {
          state_->Settle(ncclCommFinalize(state_->comm), state_->name + ": finalize",
                         Clock::now() + default_timeout());
          if (state_->comm != nullptr) ncclCommDestroy(state_->comm);
          state_->comm = nullptr;
        } catch (const CollectiveError&) {
        }
      }
      state_->aborted = true;  // Works that outlive us report an abort
    }
    Release();
  }

  std::string backend() const override { return "nccl"; }
  bool reduces_device_memory() const override { return true; }

  void Abort() override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->AbortLocked();
  }

 protected:
  std::shared_ptr<Work> DoAllreduce(void* data, size_t count, DataType type, ReduceOp op,
                                    Timeout timeout) override {
    const std::string what = state_->name + " allreduce " + ReduceOpName(op) + " " +
                             DataTypeName(type) + " x" + std::to_string(count);
    return Launch(what, timeout, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(data, data, count, NcclType(type),
                           op == ReduceOp::kAverage ? ncclAvg : ncclSum, comm, stream);
    });
  }

  std::shared_ptr<Work> DoBroadcast(void* data, size_t count, DataType type, int root,
                                    Timeout timeout) override {
    const std::string what = state_->name + " broadcast from " + std::to_string(root);
    return Launch(what, timeout, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclBroadcast(data, data, count, NcclType(type), root, comm, stream);
    });
  }

  std::shared_ptr<Work> DoAllgather(const void* input, void* output, size_t count, DataType type,
                                    Timeout timeout) override {
    const std::string what = state_->name + " allgather";
    return Launch(what, timeout, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllGather(input, output, count, NcclType(type), comm, stream);
    });
  }

  std::shared_ptr<Work> DoBarrier(Timeout timeout) override {
    // NCCL has no barrier; a one-element allreduce that everyone waits for is one.
    return Launch(state_->name + " barrier", timeout, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm, stream);
    });
  }

 private:
  template <typename Enqueue>
  std::shared_ptr<Work> Launch(const std::string& what, Timeout timeout, Enqueue enqueue) {
    const auto deadline = Clock::now() + timeout;
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->aborted || state_->comm == nullptr) {
      throw CollectiveAborted(what + ": communicator aborted");
    }
    CheckCuda(cudaSetDevice(device_), what);
    // The buffer was written by work queued on the legacy default stream (where
    // LibTorch runs unless told otherwise), which a non-blocking stream does not
    // wait for: order the collective after it.
    cudaEvent_t ready;
    CheckCuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), what);
    CheckCuda(cudaEventRecord(ready, cudaStreamLegacy), what);
    CheckCuda(cudaStreamWaitEvent(state_->stream, ready, 0), what);
    cudaEventDestroy(ready);
    state_->Settle(enqueue(state_->comm, state_->stream), what, deadline);
    cudaEvent_t event;
    CheckCuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), what);
    CheckCuda(cudaEventRecord(event, state_->stream), what);
    return std::make_shared<NcclWork>(state_, event, what, deadline);
  }

  void Release() {
    if (scratch_ != nullptr) cudaFree(scratch_);
    scratch_ = nullptr;
    if (state_->stream != nullptr) cudaStreamDestroy(state_->stream);
    state_->stream = nullptr;
  }

  std::shared_ptr<NcclState> state_;
  int device_ = 0;
  void* scratch_ = nullptr;
};

}  // namespace

std::string NcclUniqueIdKey(uint64_t generation, const std::string& tag) {
  return runtime::GenerationKey(generation, "nccl/" + tag + "/unique_id");
}

std::string ExchangeNcclUniqueId(runtime::KeyValueStore& store, const Membership& membership,
                                 const std::string& tag, Timeout timeout) {
  const std::string key = NcclUniqueIdKey(membership.generation, tag);
  if (membership.rank == 0) {
    ncclUniqueId id;
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) {
      throw CollectiveError(std::string("ncclGetUniqueId: ") + ncclGetErrorString(result));
    }
    std::string bytes(reinterpret_cast<const char*>(&id), sizeof(id));
    store.Put(key, bytes);
    return bytes;
  }
  std::string bytes;
  try {
    bytes = store.Wait(key, timeout);
  } catch (const runtime::TimeoutError&) {
    throw CollectiveTimeout("nccl rendezvous: rank 0 did not publish " + key + " within " +
                            std::to_string(timeout.count()) + " ms");
  }
  if (bytes.size() != sizeof(ncclUniqueId)) {
    throw CollectiveError("nccl rendezvous: " + key + " holds " + std::to_string(bytes.size()) +
                          " bytes, not an ncclUniqueId (" + std::to_string(sizeof(ncclUniqueId)) +
                          ")");
  }
  return bytes;
}

bool CudaDeviceAvailable(std::string* why) {
  int devices = 0;
  const cudaError_t code = cudaGetDeviceCount(&devices);
  if (code != cudaSuccess) {
    if (why) *why = std::string("no usable CUDA device: ") + cudaGetErrorString(code);
    return false;
  }
  if (devices == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

NcclCommunicatorFactory::NcclCommunicatorFactory(runtime::KeyValueStore& store, NcclOptions options)
    : store_(store), options_(std::move(options)) {}

std::unique_ptr<Communicator> NcclCommunicatorFactory::Create(const Membership& membership) {
  return std::make_unique<NcclCommunicator>(membership, options_, store_);
}

}  // namespace elastic::collectives
