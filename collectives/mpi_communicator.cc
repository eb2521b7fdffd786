#include "collectives/mpi_communicator.h"

#include <mpi.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "collectives/half.h"
#include "collectives/op_queue.h"

namespace elastic::collectives {
namespace {

std::atomic<bool> g_communicator_created{false};

void CheckMpi(int code, const std::string& what) {
  if (code == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, message, &length);
  throw CollectiveError(what + ": " + std::string(message, static_cast<size_t>(length)));
}

void EnsureInitialised() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (finalised) {
    throw UnsupportedOperation(
        "MPI backend: MPI was already finalised in this process and cannot be initialised "
        "again; the MPI backend serves one fixed world per process");
  }
  if (initialised) return;
  // Only the communicator's queue thread calls MPI after this, one call at a
  // time, which is what MPI_THREAD_SERIALIZED allows.
  int provided = 0;
  CheckMpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_SERIALIZED) {
    throw CollectiveError("MPI backend: the MPI library does not provide MPI_THREAD_SERIALIZED");
  }
}

MPI_Datatype MpiType(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return MPI_UINT16_T;  // moved as bytes; reduced through float32
  }
  return MPI_BYTE;
}

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(const Membership& membership, const MpiOptions& options)
      : Communicator(membership, options.default_timeout),
        queue_(std::make_unique<OpQueue>(nullptr)) {}

  ~MpiCommunicator() override {
    const bool healthy = queue_->failure() == nullptr;
    aborted_ = true;  // a running poll loop gives up
    queue_.reset();
    // MPI_Finalize waits for every member; after a failure some never come, so
    // a broken communicator leaves MPI for the process exit to clean up.
    if (healthy) MPI_Finalize();
  }

  std::string backend() const override { return "mpi"; }

  void Abort() override {
    aborted_ = true;
    // MPI cannot cancel a collective; the queue stops waiting for it (the poll
    // loop below sees the failure) and every later operation fails.
    queue_->Fail(std::make_exception_ptr(CollectiveAborted(Describe("aborted"))));
  }

 protected:
  std::shared_ptr<Work> DoAllreduce(void* data, size_t count, DataType type, ReduceOp op,
                                    Timeout timeout) override {
    const std::string what = Describe(std::string("allreduce ") + ReduceOpName(op) + " " +
                                      DataTypeName(type) + " x" + std::to_string(count));
    return queue_->Submit(what, [=] {
      if (count == 0) return;
      const bool narrow = type == DataType::kFloat16 || type == DataType::kBFloat16;
      std::vector<float> wide;
      void* buffer = data;
      MPI_Datatype mpi_type = MpiType(type);
      if (narrow) {  // MPI has no 16-bit float: reduce in float32
        wide.resize(count);
        WidenToFloat(type, data, wide.data(), count);
        buffer = wide.data();
        mpi_type = MPI_FLOAT;
      }
      MPI_Request request;
      CheckMpi(MPI_Iallreduce(MPI_IN_PLACE, buffer, static_cast<int>(count), mpi_type, MPI_SUM,
                              MPI_COMM_WORLD, &request),
               what);
      Complete(&request, what, timeout);
      if (narrow) {
        if (op == ReduceOp::kAverage) DivideInPlace(DataType::kFloat32, buffer, count, size());
        NarrowFromFloat(type, wide.data(), data, count);
      } else if (op == ReduceOp::kAverage) {
        DivideInPlace(type, data, count, size());
      }
    });
  }

  std::shared_ptr<Work> DoBroadcast(void* data, size_t count, DataType type, int root,
                                    Timeout timeout) override {
    const std::string what = Describe("broadcast from " + std::to_string(root) + " " +
                                      DataTypeName(type) + " x" + std::to_string(count));
    return queue_->Submit(what, [=] {
      if (count == 0) return;
      MPI_Request request;
      CheckMpi(
          MPI_Ibcast(data, static_cast<int>(count), MpiType(type), root, MPI_COMM_WORLD, &request),
          what);
      Complete(&request, what, timeout);
    });
  }

  std::shared_ptr<Work> DoAllgather(const void* input, void* output, size_t count, DataType type,
                                    Timeout timeout) override {
    const std::string what =
        Describe(std::string("allgather ") + DataTypeName(type) + " x" + std::to_string(count));
    return queue_->Submit(what, [=] {
      if (count == 0) return;
      MPI_Request request;
      CheckMpi(MPI_Iallgather(input, static_cast<int>(count), MpiType(type), output,
                              static_cast<int>(count), MpiType(type), MPI_COMM_WORLD, &request),
               what);
      Complete(&request, what, timeout);
    });
  }

  std::shared_ptr<Work> DoBarrier(Timeout timeout) override {
    const std::string what = Describe("barrier");
    return queue_->Submit(what, [=] {
      MPI_Request request;
      CheckMpi(MPI_Ibarrier(MPI_COMM_WORLD, &request), what);
      Complete(&request, what, timeout);
    });
  }

 private:
  std::string Describe(const std::string& what) const {
    return "mpi " + what + " (rank " + std::to_string(rank()) + "/" + std::to_string(size()) + ")";
  }

  // Polls the request so that the timeout and Abort are honoured (a blocking
  // MPI_Wait would hang forever on a dead peer).
  void Complete(MPI_Request* request, const std::string& what, Timeout timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int spins = 0;
    for (;;) {
      int done = 0;
      CheckMpi(MPI_Test(request, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      // (Never touch queue_ here: the destructor resets it while this runs.)
      if (aborted_) throw CollectiveAborted(what + ": aborted");
      if (std::chrono::steady_clock::now() >= deadline) {
        throw CollectiveTimeout(what + ": timed out after " + std::to_string(timeout.count()) +
                                " ms");
      }
      // Spin briefly for latency, then yield the core: ranks share few cores.
      if (++spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  std::atomic<bool> aborted_{false};  // Abort() or destruction began
  std::unique_ptr<OpQueue> queue_;
};

}  // namespace

MpiCommunicatorFactory::MpiCommunicatorFactory(MpiOptions options) : options_(options) {}

Membership MpiCommunicatorFactory::WorldMembership() {
  EnsureInitialised();
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return Membership{0, rank, size};
}

std::unique_ptr<Communicator> MpiCommunicatorFactory::Create(const Membership& membership) {
  const Membership world = WorldMembership();
  if (membership.generation != world.generation || membership.rank != world.rank ||
      membership.size != world.size) {
    throw UnsupportedOperation(
        "MPI backend cannot rebuild: it serves the fixed world mpirun started (rank " +
        std::to_string(world.rank) + " of " + std::to_string(world.size) +
        ", generation 0), but generation " + std::to_string(membership.generation) +
        " asks for rank " + std::to_string(membership.rank) + " of " +
        std::to_string(membership.size) + "; use the Gloo or NCCL backend for elastic jobs");
  }
  if (g_communicator_created.exchange(true)) {
    throw UnsupportedOperation(
        "MPI backend cannot rebuild: one communicator per process (MPI cannot be "
        "re-initialised after MPI_Finalize); use the Gloo or NCCL backend for elastic jobs");
  }
  return std::make_unique<MpiCommunicator>(membership, options_);
}

}  // namespace elastic::collectives
