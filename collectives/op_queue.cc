#include "collectives/op_queue.h"

#include <utility>

namespace elastic::collectives {

bool CompletionWork::IsCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void CompletionWork::Wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

void CompletionWork::Complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

OpQueue::OpQueue(FailureHook on_failure)
    : on_failure_(std::move(on_failure)), thread_([this] { Loop(); }) {}

OpQueue::~OpQueue() {
  Fail(std::make_exception_ptr(CollectiveAborted("communicator destroyed")));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Work> OpQueue::Submit(std::string description, Op op) {
  auto work = std::make_shared<CompletionWork>();
  std::unique_lock<std::mutex> lock(mutex_);
  if (failure_) {
    lock.unlock();
    work->Complete(failure_);
    return work;
  }
  queue_.push_back(Entry{std::move(description), std::move(op), work});
  lock.unlock();
  wake_cv_.notify_all();
  return work;
}

void OpQueue::Fail(std::exception_ptr error) {
  std::deque<Entry> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_) return;
    failure_ = error;
    dropped.swap(queue_);
  }
  for (auto& entry : dropped) entry.work->Complete(error);
}

bool OpQueue::busy() {
  std::lock_guard<std::mutex> lock(mutex_);
  return busy_;
}

std::exception_ptr OpQueue::failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

void OpQueue::Loop() {
  for (;;) {
    Entry entry;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and nothing left
      entry = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    std::exception_ptr error;
    try {
      entry.op();
    } catch (const CollectiveError&) {
      error = std::current_exception();
    } catch (const std::exception& e) {
      error = std::make_exception_ptr(CollectiveError(entry.description + ": " + e.what()));
    } catch (...) {
      error = std::make_exception_ptr(CollectiveError(entry.description + ": unknown error"));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;
    }
    if (error) {
      // Break the queue first so that nothing queued behind runs on a torn-down transport.
      Fail(error);
      if (on_failure_) on_failure_(error);
      // If the queue was already broken (Abort), report that error, not the
      // transport error it caused.
      entry.work->Complete(failure());
    } else {
      entry.work->Complete(nullptr);
    }
  }
}

}  // namespace elastic::collectives
