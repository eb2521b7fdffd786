// The buffers of a Gloo communicator's operation in flight, so that Abort()
// can wake whatever the operation waits on.
//
// Shutting a communicator's sockets down (socket_tripwire.h) fails the
// operations Gloo's TCP pair still lists as pending on that pair, but not one
// whose bytes are already in the pair's transmit queue: a send to a peer that
// stopped reading half-way through (a stopped or dying process) waits in
// UnboundBuffer::waitSend for the operation's whole timeout (60 s in elastic
// jobs), however the generation ended. Seen in a broadcast whose receiver was
// stopped mid-transfer (GlooCommunicatorTest.AbortEndsTheOperationWhatever...).
//
// Debian's Gloo ships no header to make or fail a tcp::UnboundBuffer
// (gloo/common/memory.h is missing), but every UnboundBuffer has
// abortWaitSend()/abortWaitRecv(): each makes the current (or next) wait
// return early, once. So the communicator registers the buffers it hands an
// operation (LiveBuffers::Scope), and after Abort() pokes them until the
// operation has unwound (CollectiveAborter): a poked wait returns, the
// algorithm's next step on a shut-down pair throws, and an operation that
// returns after Abort() counts as aborted, never as a result.
#pragma once

#include <gloo/transport/unbound_buffer.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace elastic::collectives {

class LiveBuffers {
 public:
  // Registers buffers for as long as it lives. Declare it after the Gloo
  // options that own the buffers, so that it ends first.
  class Scope {
   public:
    Scope(LiveBuffers& live, std::initializer_list<gloo::transport::UnboundBuffer*> buffers);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    LiveBuffers& live_;
    std::vector<gloo::transport::UnboundBuffer*> buffers_;
  };

  // Makes every registered buffer's current or next wait, send and receive,
  // return early (once).
  void Poke();

 private:
  std::mutex mutex_;
  std::multiset<gloo::transport::UnboundBuffer*> live_;  // guarded by mutex_
};

// After Start(), pokes `live` every few milliseconds while `busy()` says an
// operation is still running; stops when it is not, or when destroyed.
class CollectiveAborter {
 public:
  CollectiveAborter(LiveBuffers& live, std::function<bool()> busy);
  ~CollectiveAborter();

  // Idempotent; returns at once.
  void Start();
  // After Start(): returns once the operation in flight has ended (the pokes
  // go on until then). Without Start(): returns at once.
  void Finish();

 private:
  static constexpr std::chrono::milliseconds kPoll{5};
  void Run();

  LiveBuffers& live_;
  const std::function<bool()> busy_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;    // guarded by mutex_: the destructor runs
  bool closed_ = false;  // guarded by mutex_: Finish() ran; no Start() after it
  std::thread thread_;
};

}  // namespace elastic::collectives
