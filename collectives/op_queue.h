// Runs the operations of one communicator, in submission order, on one thread of
// its own, so that async operations overlap the caller's work (e.g. backward)
// while the order of collectives stays the same on every member.
//
// Once an operation fails, or Fail() is called (Abort), the queue is broken:
// queued and later operations fail at once with that first error, without running.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "collectives/communicator.h"

namespace elastic::collectives {

// A Work completed by whoever runs the operation.
class CompletionWork : public Work {
 public:
  bool IsCompleted() override;
  void Wait() override;

  void Complete(std::exception_ptr error);  // null error: success

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

class OpQueue {
 public:
  // Runs the operation; throws on failure (a CollectiveError or anything else,
  // which is wrapped into a CollectiveError naming the operation).
  using Op = std::function<void()>;
  // Called on the queue's thread after an operation failed, before any later
  // operation is failed; backends use it to tear down their transport so that
  // peers blocked on this member fail too instead of waiting for their timeout.
  using FailureHook = std::function<void(const std::exception_ptr&)>;

  explicit OpQueue(FailureHook on_failure);
  ~OpQueue();  // fails what is queued with CollectiveAborted, joins the thread
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  std::shared_ptr<Work> Submit(std::string description, Op op);

  // Breaks the queue with `error` (if not broken yet): queued and future
  // operations fail with it. The running operation is not interrupted here; the
  // backend does that through its transport.
  void Fail(std::exception_ptr error);

  // The error that broke the queue, or null.
  std::exception_ptr failure();

  // True while an operation is running (taken off the queue, not yet completed).
  // After Fail() returns, no operation starts any more, so a false here is final.
  bool busy();

 private:
  struct Entry {
    std::string description;
    Op op;
    std::shared_ptr<CompletionWork> work;
  };

  void Loop();

  const FailureHook on_failure_;
  std::mutex mutex_;
  std::condition_variable wake_cv_;
  std::deque<Entry> queue_;
  std::exception_ptr failure_;
  bool stopping_ = false;
  bool busy_ = false;
  std::thread thread_;
};

}  // namespace elastic::collectives
