#include "collectives/op_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace elastic::collectives {
namespace {

TEST(OpQueueTest, RunsOperationsInSubmissionOrderOnOneThread) {
  OpQueue queue(nullptr);
  std::vector<int> order;
  std::vector<std::shared_ptr<Work>> works;
  std::thread::id first_thread;
  for (int i = 0; i < 20; ++i) {
    works.push_back(queue.Submit("op", [&, i] {
      if (i == 0) first_thread = std::this_thread::get_id();
      EXPECT_EQ(std::this_thread::get_id(), first_thread);
      order.push_back(i);
    }));
  }
  for (auto& work : works) work->Wait();
  ASSERT_EQ(order.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(order[i], i);
  EXPECT_NE(first_thread, std::this_thread::get_id());
}

TEST(OpQueueTest, AFailureBreaksTheQueueAndCallsTheHookOnce) {
  std::atomic<int> hook_calls{0};
  OpQueue queue([&](const std::exception_ptr&) { ++hook_calls; });
  std::promise<void> release;
  auto gate = release.get_future().share();
  auto blocked = queue.Submit("gate", [gate] { gate.wait(); });
  auto failing = queue.Submit("allreduce x3", [] { throw std::runtime_error("peer reset"); });
  std::atomic<bool> ran{false};
  auto behind = queue.Submit("behind", [&] { ran = true; });
  release.set_value();
  blocked->Wait();
  try {
    failing->Wait();
    FAIL() << "no error";
  } catch (const CollectiveError& e) {
    // Non-collective exceptions are wrapped with the operation's description.
    EXPECT_STREQ(e.what(), "allreduce x3: peer reset");
  }
  EXPECT_THROW(behind->Wait(), CollectiveError);
  EXPECT_FALSE(ran);
  EXPECT_THROW(queue.Submit("later", [] {})->Wait(), CollectiveError);
  EXPECT_EQ(hook_calls.load(), 1);
}

TEST(OpQueueTest, FailCompletesQueuedWorkWithThatErrorWithoutRunningIt) {
  OpQueue queue(nullptr);
  std::promise<void> release, started;
  auto gate = release.get_future().share();
  auto running = queue.Submit("gate", [gate, &started] {
    started.set_value();
    gate.wait();
  });
  started.get_future().wait();  // the gate is running, not merely queued
  std::atomic<bool> ran{false};
  auto queued = queue.Submit("queued", [&] { ran = true; });
  EXPECT_FALSE(queued->IsCompleted());
  queue.Fail(std::make_exception_ptr(CollectiveAborted("aborted")));
  EXPECT_TRUE(queued->IsCompleted());
  EXPECT_THROW(queued->Wait(), CollectiveAborted);
  EXPECT_TRUE(queue.busy());
  release.set_value();
  running->Wait();  // it had started before Fail and succeeded
  EXPECT_FALSE(ran);
  EXPECT_THROW(queue.Submit("later", [] {})->Wait(), CollectiveAborted);
}

TEST(OpQueueTest, DestructionFailsWhatIsQueued) {
  std::shared_ptr<Work> queued;
  {
    OpQueue queue(nullptr);
    // Holds the queue's thread until the destructor has broken the queue (the
    // queue object is alive until the destructor has joined the thread).
    queue.Submit("gate", [&queue] {
      while (!queue.failure()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    queued = queue.Submit("queued", [] {});
  }
  EXPECT_THROW(queued->Wait(), CollectiveAborted);
}

}  // namespace
}  // namespace elastic::collectives
