#include "collectives/gloo_abortable_buffers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace elastic::collectives {
namespace {

// Counts the pokes; the data path is never used.
class CountingBuffer : public gloo::transport::UnboundBuffer {
 public:
  CountingBuffer() : gloo::transport::UnboundBuffer(nullptr, 0) {}
  bool waitRecv(int*, std::chrono::milliseconds) override { return true; }
  bool waitSend(int*, std::chrono::milliseconds) override { return true; }
  void abortWaitRecv() override { ++recv_pokes; }
  void abortWaitSend() override { ++send_pokes; }
  void send(int, uint64_t, size_t, size_t) override {}
  void recv(int, uint64_t, size_t, size_t) override {}
  void recv(std::vector<int>, uint64_t, size_t, size_t) override {}

  std::atomic<int> recv_pokes{0};
  std::atomic<int> send_pokes{0};
};

TEST(LiveBuffersTest, OnlyTheBuffersOfALiveScopeArePoked) {
  LiveBuffers live;
  CountingBuffer a, b;
  {
    const LiveBuffers::Scope scope(live, {&a, &b, nullptr});
    live.Poke();
  }
  live.Poke();  // the scope ended: nothing is poked
  EXPECT_EQ(a.send_pokes, 1);
  EXPECT_EQ(a.recv_pokes, 1);
  EXPECT_EQ(b.send_pokes, 1);
}

// The aborter pokes until the operation in flight ends, then stops by itself;
// Finish() waits for that.
TEST(CollectiveAborterTest, PokesWhileBusyAndFinishWaitsForTheOperationToEnd) {
  LiveBuffers live;
  CountingBuffer buffer;
  const LiveBuffers::Scope scope(live, {&buffer});
  std::atomic<int> busy_answers{0};
  CollectiveAborter aborter(live, [&] { return ++busy_answers < 4; });
  aborter.Start();
  aborter.Start();  // idempotent
  aborter.Finish();
  EXPECT_EQ(busy_answers, 4);
  EXPECT_EQ(buffer.send_pokes, 4);
  aborter.Start();  // after Finish: nothing
  EXPECT_EQ(buffer.send_pokes, 4);
}

TEST(CollectiveAborterTest, WithNothingRunningOnePokeAndDone) {
  LiveBuffers live;
  CountingBuffer buffer;
  const LiveBuffers::Scope scope(live, {&buffer});
  CollectiveAborter aborter(live, [] { return false; });
  aborter.Start();
  aborter.Finish();
  EXPECT_EQ(buffer.recv_pokes, 1);
}

TEST(CollectiveAborterTest, DestroyingStopsAnOperationThatNeverEnds) {
  LiveBuffers live;
  CountingBuffer buffer;
  const LiveBuffers::Scope scope(live, {&buffer});
  {
    CollectiveAborter aborter(live, [] { return true; });
    aborter.Start();
    while (buffer.send_pokes < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }  // joins without waiting for the (endless) operation
  SUCCEED();
}

}  // namespace
}  // namespace elastic::collectives
