#include "trainer/elastic/worker/metered_communicator.h"

#include <atomic>
#include <chrono>

namespace elastic::trainer {
namespace {

using Clock = std::chrono::steady_clock;
using collectives::Work;

collectives::Membership MembershipOf(const collectives::Communicator& comm) {
  return {comm.generation(), comm.rank(), comm.size()};
}

// Records the operation into the stats the first time a Wait() succeeds.
class MeteredWork : public Work {
 public:
  MeteredWork(std::shared_ptr<Work> inner, Clock::time_point started, uint64_t bytes,
              WorkerStats& stats)
      : inner_(std::move(inner)), started_(started), bytes_(bytes), stats_(stats) {}

  bool IsCompleted() override { return inner_->IsCompleted(); }

  void Wait() override {
    inner_->Wait();  // throws the operation's CollectiveError: nothing recorded
    if (recorded_.exchange(true)) return;
    stats_.ObserveAllreduce(std::chrono::duration<double>(Clock::now() - started_).count(), bytes_);
  }

 private:
  const std::shared_ptr<Work> inner_;
  const Clock::time_point started_;
  const uint64_t bytes_;
  WorkerStats& stats_;
  std::atomic<bool> recorded_{false};
};

}  // namespace

MeteredCommunicator::MeteredCommunicator(std::unique_ptr<collectives::Communicator> inner,
                                         WorkerStats& stats)
    : Communicator(MembershipOf(*inner), inner->default_timeout()),
      inner_(std::move(inner)),
      stats_(stats) {}

std::shared_ptr<Work> MeteredCommunicator::DoAllreduce(void* data, size_t count,
                                                       collectives::DataType type,
                                                       collectives::ReduceOp op,
                                                       collectives::Timeout timeout) {
  const Clock::time_point started = Clock::now();
  return std::make_shared<MeteredWork>(inner_->AllreduceAsync(data, count, type, op, timeout),
                                       started, count * collectives::ElementSize(type), stats_);
}

std::shared_ptr<Work> MeteredCommunicator::DoBroadcast(void* data, size_t count,
                                                       collectives::DataType type, int root,
                                                       collectives::Timeout timeout) {
  return inner_->BroadcastAsync(data, count, type, root, timeout);
}

std::shared_ptr<Work> MeteredCommunicator::DoAllgather(const void* input, void* output,
                                                       size_t count, collectives::DataType type,
                                                       collectives::Timeout timeout) {
  return inner_->AllgatherAsync(input, output, count, type, timeout);
}

std::shared_ptr<Work> MeteredCommunicator::DoBarrier(collectives::Timeout timeout) {
  return inner_->BarrierAsync(timeout);
}

}  // namespace elastic::trainer
