// The one interface every backend (Gloo, NCCL, MPI) implements. It speaks raw
// buffers and a DataType so that it needs no tensor library; tensor_ops.h adapts
// LibTorch tensors onto it.
//
// Ordering: like every collective library, all members must issue the same
// collectives in the same order. Async operations of one communicator run in
// submission order.
//
// Failure model: an operation that fails (timeout, lost peer, Abort) breaks the
// communicator; every pending and later operation fails with a CollectiveError.
// A broken communicator is destroyed and a new one is created for the next
// membership generation (see CommunicatorFactory).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "collectives/types.h"

namespace elastic::collectives {

// Handle of an asynchronous operation.
class Work {
 public:
  virtual ~Work() = default;

  // True once the operation finished, successfully or not. Never blocks.
  virtual bool IsCompleted() = 0;

  // Blocks until the operation finished; throws its CollectiveError if it failed.
  // Bounded by the operation's timeout (plus the backend's abort latency).
  virtual void Wait() = 0;
};

// Who takes part in one communicator: member `rank` of `size`, in membership
// generation `generation` (which scopes the rendezvous keys).
struct Membership {
  uint64_t generation = 0;
  int rank = 0;
  int size = 1;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return membership_.rank; }
  int size() const { return membership_.size; }
  uint64_t generation() const { return membership_.generation; }
  Timeout default_timeout() const { return default_timeout_; }
  virtual std::string backend() const = 0;
  // True when buffers are GPU device memory (NCCL); otherwise host memory.
  virtual bool reduces_device_memory() const { return false; }

  // In place: data[0..count) of every member becomes the reduction over members.
  std::shared_ptr<Work> AllreduceAsync(void* data, size_t count, DataType type, ReduceOp op,
                                       Timeout timeout = kDefaultTimeout);
  // In place: data[0..count) of every member becomes that of member `root`.
  std::shared_ptr<Work> BroadcastAsync(void* data, size_t count, DataType type, int root,
                                       Timeout timeout = kDefaultTimeout);
  // output[r*count .. (r+1)*count) becomes input[0..count) of member r; output
  // holds size()*count elements and must not overlap input.
  std::shared_ptr<Work> AllgatherAsync(const void* input, void* output, size_t count, DataType type,
                                       Timeout timeout = kDefaultTimeout);
  std::shared_ptr<Work> BarrierAsync(Timeout timeout = kDefaultTimeout);

  // Synchronous forms: the async form followed by Wait().
  void Allreduce(void* data, size_t count, DataType type, ReduceOp op,
                 Timeout timeout = kDefaultTimeout);
  void Broadcast(void* data, size_t count, DataType type, int root,
                 Timeout timeout = kDefaultTimeout);
  void Allgather(const void* input, void* output, size_t count, DataType type,
                 Timeout timeout = kDefaultTimeout);
  void Barrier(Timeout timeout = kDefaultTimeout);

  // Makes every pending and future operation fail with CollectiveAborted
  // promptly, and makes peers that are blocked in an operation with this member
  // fail too. Thread-safe, idempotent, callable from any thread (e.g. the one
  // that learns from the runtime that a peer died). The communicator must still
  // be destroyed afterwards.
  virtual void Abort() = 0;

 protected:
  Communicator(const Membership& membership, Timeout default_timeout);

  // Arguments are validated and the timeout resolved (never zero) before these run.
  virtual std::shared_ptr<Work> DoAllreduce(void* data, size_t count, DataType type, ReduceOp op,
                                            Timeout timeout) = 0;
  virtual std::shared_ptr<Work> DoBroadcast(void* data, size_t count, DataType type, int root,
                                            Timeout timeout) = 0;
  virtual std::shared_ptr<Work> DoAllgather(const void* input, void* output, size_t count,
                                            DataType type, Timeout timeout) = 0;
  virtual std::shared_ptr<Work> DoBarrier(Timeout timeout) = 0;

 private:
  Timeout Resolve(Timeout timeout) const;

  const Membership membership_;
  const Timeout default_timeout_;
};

// Creates the communicator of one membership generation. Rebuilding after a
// membership change is: destroy the old communicator (Abort() first if a peer
// may be stuck), then Create() with the new Membership. No process restarts.
class CommunicatorFactory {
 public:
  virtual ~CommunicatorFactory() = default;
  virtual std::unique_ptr<Communicator> Create(const Membership& membership) = 0;
};

}  // namespace elastic::collectives
