// A loopback HTTP server that answers as GCE's or AWS's metadata server does
// about spot preemption, before and after a notice (for tests of
// --preemption-notice). Requests without the header the real server demands
// are refused as it refuses them.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

namespace elastic::trainer::testing {

class FakeMetadataServer {
 public:
  enum class Cloud { kGce, kAws };
  explicit FakeMetadataServer(Cloud cloud);
  ~FakeMetadataServer();
  FakeMetadataServer(const FakeMetadataServer&) = delete;
  FakeMetadataServer& operator=(const FakeMetadataServer&) = delete;

  // "http://127.0.0.1:PORT"
  std::string url() const;
  // From now on the server says the instance is being taken back.
  void Notify() { noticed_ = true; }
  // Notice queries answered so far (with the right headers).
  int64_t queries() const { return queries_.load(); }

 private:
  void Serve();
  std::string Answer(const std::string& request);

  const Cloud cloud_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> noticed_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> queries_{0};
  std::thread thread_;
};

}  // namespace elastic::trainer::testing
