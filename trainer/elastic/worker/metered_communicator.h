// A Communicator that forwards every operation to another one and times its
// allreduces into WorkerStats: the worker wraps each generation's
// communicator in one, so the gradient allreduce, the control vector of the
// commit points and the evaluation sums are all measured without touching the
// code that issues them.
//
// What is measured: from the call to the return of the Work's Wait(), and the
// payload (count x element size). For the synchronous forms that is the
// operation's wall time. For an asynchronous allreduce waited on later (the
// gradient reducer's buckets) it is submission to observed completion, which
// includes any time the caller spent elsewhere before waiting. A failed
// operation is not counted: its time says nothing about the network. No extra
// synchronisation: one steady_clock read at each end.
#pragma once

#include <memory>
#include <string>

#include "collectives/communicator.h"
#include "trainer/elastic/protocol/worker_stats.h"

namespace elastic::trainer {

class MeteredCommunicator : public collectives::Communicator {
 public:
  // `stats` must outlive this communicator and every Work it returned.
  MeteredCommunicator(std::unique_ptr<collectives::Communicator> inner, WorkerStats& stats);

  std::string backend() const override { return inner_->backend(); }
  bool reduces_device_memory() const override { return inner_->reduces_device_memory(); }
  void Abort() override { inner_->Abort(); }

 protected:
  std::shared_ptr<collectives::Work> DoAllreduce(void* data, size_t count,
                                                 collectives::DataType type,
                                                 collectives::ReduceOp op,
                                                 collectives::Timeout timeout) override;
  std::shared_ptr<collectives::Work> DoBroadcast(void* data, size_t count,
                                                 collectives::DataType type, int root,
                                                 collectives::Timeout timeout) override;
  std::shared_ptr<collectives::Work> DoAllgather(const void* input, void* output, size_t count,
                                                 collectives::DataType type,
                                                 collectives::Timeout timeout) override;
  std::shared_ptr<collectives::Work> DoBarrier(collectives::Timeout timeout) override;

 private:
  const std::unique_ptr<collectives::Communicator> inner_;
  WorkerStats& stats_;
};

}  // namespace elastic::trainer
