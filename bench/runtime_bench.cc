// Actor runtime over loopback: ask round-trip latency (p50/p99) and
// throughput for 1 and 8 concurrent callers, and tell throughput, for
// payloads of 64 B, 4 KB and 1 MB. The actors live in a second process
// (forked before any thread exists), so every message crosses a real TCP
// connection with framing, authentication and heartbeats on.
//
//   bazel run //bench:runtime_bench [-- --seconds=1.5]
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/actor.h"
#include "runtime/auth.h"
#include "runtime/log.h"

namespace {

using elastic::runtime::Actor;
using elastic::runtime::ActorRef;
using elastic::runtime::ActorSystem;
using elastic::runtime::ActorSystemOptions;
using elastic::runtime::Endpoint;
using Clock = std::chrono::steady_clock;

constexpr auto kTimeout = std::chrono::seconds(60);

// Answers "echo" with its payload; counts "sink" messages and answers
// "count" with how many it has seen (after all earlier tells of the caller).
class BenchActor : public Actor {
 public:
  std::string Receive(const std::string& method, const std::string& payload) override {
    if (method == "echo") return payload;
    if (method == "sink") {
      ++count_;
      return "";
    }
    if (method == "count") return std::to_string(count_);
    return "";
  }

 private:
  long long count_ = 0;
};

// The server process: serves the actor and writes its port to fd; exits when
// the parent closes the pipe or dies.
[[noreturn]] void Serve(const std::string& token, int port_fd, int stop_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  ActorSystemOptions options;
  options.token = token;
  options.threads = 2;
  options.name = "bench-server";
  ActorSystem system(options);
  system.Spawn("bench", std::make_shared<BenchActor>());
  const uint16_t port = system.endpoint().port;
  if (write(port_fd, &port, sizeof(port)) != sizeof(port)) _exit(1);
  char byte;
  while (read(stop_fd, &byte, 1) > 0) {
  }
  _exit(0);
}

struct AskResult {
  double p50_us;
  double p99_us;
  double per_second;
};

AskResult MeasureAsk(const ActorRef& actor, size_t payload_bytes, int callers, double seconds) {
  const std::string payload(payload_bytes, 'x');
  for (int i = 0; i < 20; ++i) actor.Ask("echo", payload, kTimeout).get();  // warm up
  std::vector<std::vector<double>> latencies(static_cast<size_t>(callers));
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int c = 0; c < callers; ++c) {
    threads.emplace_back([&, c] {
      auto& mine = latencies[static_cast<size_t>(c)];
      while (Clock::now() < end) {
        const auto sent = Clock::now();
        const std::string reply = actor.Ask("echo", payload, kTimeout).get();
        mine.push_back(std::chrono::duration<double, std::micro>(Clock::now() - sent).count());
        if (reply.size() != payload_bytes) std::abort();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (const auto& mine : latencies) all.insert(all.end(), mine.begin(), mine.end());
  std::sort(all.begin(), all.end());
  auto percentile = [&](double p) {
    return all[std::min(all.size() - 1, static_cast<size_t>(p * static_cast<double>(all.size())))];
  };
  return AskResult{percentile(0.50), percentile(0.99), static_cast<double>(all.size()) / elapsed};
}

// One sender tells `count` messages, then an ask (ordered after them) waits
// until the actor has handled them all.
double MeasureTell(const ActorRef& actor, size_t payload_bytes, double seconds) {
  const std::string payload(payload_bytes, 't');
  const long long before = std::stoll(actor.Ask("count", "", kTimeout).get());
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  long long sent = 0;
  while (Clock::now() < end) {
    for (int i = 0; i < 64; ++i) actor.Tell("sink", payload);
    sent += 64;
  }
  const long long handled = std::stoll(actor.Ask("count", "", kTimeout).get()) - before;
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  if (handled != sent) {
    std::fprintf(stderr, "tell lost messages: sent %lld handled %lld\n", sent, handled);
    std::exit(1);
  }
  return static_cast<double>(handled) / elapsed;
}

std::string Size(size_t bytes) {
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + " MB";
  if (bytes >= 1024) return std::to_string(bytes >> 10) + " KB";
  return std::to_string(bytes) + " B";
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.5;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--seconds=", 10) == 0) seconds = std::atof(argv[i] + 10);
  }
  elastic::runtime::SetMinLogLevel(elastic::runtime::LogLevel::kWarning);
  const std::string token = elastic::runtime::GenerateToken();

  int port_pipe[2], stop_pipe[2];
  if (pipe(port_pipe) != 0 || pipe(stop_pipe) != 0) return 1;
  const pid_t server = fork();  // before any thread exists in this process
  if (server == 0) {
    close(port_pipe[0]);
    close(stop_pipe[1]);
    Serve(token, port_pipe[1], stop_pipe[0]);
  }
  close(port_pipe[1]);
  close(stop_pipe[0]);
  uint16_t port = 0;
  if (read(port_pipe[0], &port, sizeof(port)) != sizeof(port)) {
    std::fprintf(stderr, "server process failed to start\n");
    return 1;
  }

  {
    ActorSystemOptions options;
    options.token = token;
    options.name = "bench-client";
    ActorSystem system(options);
    const ActorRef actor = system.Remote("bench", Endpoint{"127.0.0.1", port});

    std::printf(
        "runtime_bench: actor ask/tell over loopback TCP between two processes, %.1f s "
        "per cell, %u cores\n\n",
        seconds, std::thread::hardware_concurrency());
    std::printf("| payload | callers | ask p50 (us) | ask p99 (us) | asks/s | ask MB/s |\n");
    std::printf("| --- | --- | --- | --- | --- | --- |\n");
    double ask_64_1 = 0, ask_64_8 = 0;
    for (size_t payload : {size_t{64}, size_t{4096}, size_t{1} << 20}) {
      for (int callers : {1, 8}) {
        const AskResult r = MeasureAsk(actor, payload, callers, seconds);
        std::printf("| %s | %d | %.0f | %.0f | %.0f | %.1f |\n", Size(payload).c_str(), callers,
                    r.p50_us, r.p99_us, r.per_second,
                    r.per_second * 2.0 * static_cast<double>(payload) / 1e6);
        std::fflush(stdout);
        if (payload == 64) (callers == 1 ? ask_64_1 : ask_64_8) = r.per_second;
      }
    }
    std::printf("\n| payload | tell msgs/s (1 sender) | tell MB/s |\n| --- | --- | --- |\n");
    for (size_t payload : {size_t{64}, size_t{4096}, size_t{1} << 20}) {
      const double rate = MeasureTell(actor, payload, seconds);
      std::printf("| %s | %.0f | %.1f |\n", Size(payload).c_str(), rate,
                  rate * static_cast<double>(payload) / 1e6);
      std::fflush(stdout);
    }
    std::printf("\nheadline: 64 B asks/s with 8 callers vs 1 caller = %.2fx (%.0f vs %.0f)\n",
                ask_64_8 / ask_64_1, ask_64_8, ask_64_1);
  }
  close(stop_pipe[1]);
  int status = 0;
  waitpid(server, &status, 0);
  return 0;
}
