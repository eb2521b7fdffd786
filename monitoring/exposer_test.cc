// The endpoint as Prometheus sees it: real HTTP on an OS-chosen port, the
// exposition text parsed back, counters checked across scrapes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "monitoring/metrics_exposer.h"
#include "monitoring/testing/exposition.h"
#include "monitoring/testing/http_get.h"
#include "monitoring/training_metrics.h"

namespace elastic::monitoring {
namespace {

using testing::Exposition;
using testing::HttpGet;
using testing::ParseExposition;

MetricsOptions AnyFreePort() {
  MetricsOptions options;
  options.port = 0;
  return options;
}

Exposition ScrapeOverHttp(const MetricsExposer& exposer) {
  const testing::HttpResponse response = HttpGet(exposer.url());
  EXPECT_EQ(response.status, 200) << response.error;
  return ParseExposition(response.body);
}

// Every series of a counter or a histogram, keyed by name and labels: values
// Prometheus assumes only grow (a drop reads as a process restart).
std::map<std::string, double> MonotonicSeries(const Exposition& e) {
  std::map<std::string, double> series;
  for (const auto& sample : e.samples) {
    std::string family = sample.name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (family.size() > s.size() && family.compare(family.size() - s.size(), s.size(), s) == 0 &&
          e.types.count(family.substr(0, family.size() - s.size())) > 0) {
        family = family.substr(0, family.size() - s.size());
      }
    }
    const std::string type = e.types.count(family) ? e.types.at(family) : "";
    if (type != "counter" && type != "histogram") continue;
    std::string key = sample.name;
    for (const auto& [k, v] : sample.labels) key += "," + k + "=" + v;
    series[key] = sample.value;
  }
  return series;
}

// Clients that never finish their request: each connects over real TCP, then
// sends one byte of an endless header every second, as a slowloris attack does.
class SlowClients {
 public:
  // Connects `count` clients one after another, in that order; stops at the
  // first that cannot connect within 5 s (see connected()).
  SlowClients(int port, int count) {
    for (int i = 0; i < count; ++i) {
      const int fd = Connect(port);
      if (fd < 0) break;
      fds_.push_back(fd);
    }
    sender_ = std::thread([this] { Dribble(); });
  }
  ~SlowClients() { Stop(); }

  int connected() const { return static_cast<int>(fds_.size()); }

  // Returns once every client has sent `bytes` bytes.
  void AwaitBytesSent(int bytes) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return rounds_ >= bytes; });
  }

  // Whether the server closed client `i` (end of stream or reset), waiting at
  // most `within` for it; what the server sent before closing goes to `received`.
  bool ServerClosed(int i, std::chrono::milliseconds within, std::string* received = nullptr) {
    const auto give_up = std::chrono::steady_clock::now() + within;
    for (;;) {
      char buffer[1024];
      const ssize_t n = ::recv(fds_[i], buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n > 0 && received != nullptr) received->append(buffer, static_cast<std::size_t>(n));
      if (n > 0) continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return true;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          give_up - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd readable{fds_[i], POLLIN, 0};
      ::poll(&readable, 1, static_cast<int>(left.count()));
    }
  }

  // Stops sending and closes every client.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    if (sender_.joinable()) sender_.join();
    for (int fd : fds_) ::close(fd);
    fds_.clear();
  }

 private:
  static int Connect(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    const timeval timeout{5, 0};  // a connect to a full accept queue would retry for minutes
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }

  void Dribble() {
    const std::string start = "GET /metrics HTTP/1.1\r\nX-Slow: ";
    std::unique_lock<std::mutex> lock(mutex_);
    for (std::size_t sent = 0; !stop_; ++sent) {
      const char byte = sent < start.size() ? start[sent] : 'a';  // the header never ends
      for (int fd : fds_) ::send(fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);  // closed: ignored
      ++rounds_;
      changed_.notify_all();
      changed_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_; });
    }
  }

  std::vector<int> fds_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stop_ = false;
  int rounds_ = 0;
  std::thread sender_;
};

// One step of a pretend-but-plausible training loop, driven through the API
// the trainer calls.
void TrainStep(TrainingMetrics& metrics, int step) {
  metrics.SetStep(step);
  metrics.AddSamplesProcessed(256);
  metrics.ObserveAllreduce(0.0005 * (step % 7 + 1), 1 << 20);
  metrics.SetRankStepTime(0, 0.12);
  metrics.SetRankStepTime(1, 0.14);
  metrics.AddRuntimeMessages(4);
  metrics.SetTrainLoss(2.3 / (1 + step));
  metrics.SetTrainAccuracy(std::min(1.0, 0.1 + 0.01 * step));
  metrics.SetImagesPerSecond(1800 + step);
}

TEST(MetricsExposerTest, PortZeroBindsAFreePortAndReportsIt) {
  MetricsExposer exposer(AnyFreePort());
  EXPECT_GT(exposer.port(), 0);
  EXPECT_EQ(exposer.address(), "127.0.0.1");
  EXPECT_EQ(exposer.url(), "http://127.0.0.1:" + std::to_string(exposer.port()) + "/metrics");
}

TEST(MetricsExposerTest, ScrapesShowTheValuesSetAndCountersNeverDecrease) {
  TrainingMetrics metrics;
  MetricsExposer exposer(AnyFreePort());
  exposer.Serve(metrics.registry());

  metrics.SetWorldSize(2);
  metrics.SetGeneration(1);
  metrics.SetEpoch(0);
  metrics.SetLearningRate(0.2);
  metrics.RecordMembershipChange(MembershipChangeReason::kJoin, 2);
  for (int step = 1; step <= 10; ++step) TrainStep(metrics, step);
  metrics.SetTestAccuracy(0.31);

  const Exposition first = ScrapeOverHttp(exposer);
  EXPECT_EQ(first.types.at("elastic_world_size"), "gauge");
  EXPECT_EQ(first.types.at("elastic_samples_processed_total"), "counter");
  EXPECT_EQ(first.types.at("elastic_allreduce_duration_seconds"), "histogram");
  EXPECT_EQ(first.Value("elastic_world_size"), 2);
  EXPECT_EQ(first.Value("elastic_step"), 10);
  EXPECT_EQ(first.Value("elastic_samples_processed_total"), 2560);
  EXPECT_EQ(first.Value("elastic_allreduce_duration_seconds_count"), 10);
  EXPECT_EQ(first.Value("elastic_allreduce_bytes_total"), 10.0 * (1 << 20));
  EXPECT_EQ(first.Value("elastic_membership_changes_total", {{"reason", "join"}}), 2);
  EXPECT_EQ(first.Find("elastic_rank_step_duration_seconds").size(), 2u);
  for (const char* ratio : {"elastic_train_accuracy_ratio", "elastic_test_accuracy_ratio"}) {
    const double value = *first.Value(ratio);
    EXPECT_GE(value, 0.0) << ratio;
    EXPECT_LE(value, 1.0) << ratio;
  }
  EXPECT_DOUBLE_EQ(*first.Value("elastic_test_accuracy_ratio"), 0.31);

  // A failure: rank 1 leaves, the step rewinds to the last commit, training goes on.
  metrics.RecordMembershipChange(MembershipChangeReason::kFailure);
  metrics.AddHeartbeatMisses(3);
  metrics.SetWorldSize(1);
  metrics.SetGeneration(2);
  metrics.RetainRanks(1);
  metrics.ObserveRescaleDuration(2.5);
  for (int step = 8; step <= 20; ++step) TrainStep(metrics, step);
  metrics.RetainRanks(1);  // TrainStep wrote rank 1 again; the trainer would not

  const Exposition second = ScrapeOverHttp(exposer);
  EXPECT_EQ(second.Value("elastic_world_size"), 1);
  EXPECT_EQ(second.Value("elastic_generation"), 2);
  EXPECT_EQ(second.Value("elastic_membership_changes_total", {{"reason", "failure"}}), 1);
  EXPECT_EQ(second.Value("elastic_heartbeat_misses_total"), 3);
  EXPECT_EQ(second.Find("elastic_rank_step_duration_seconds").size(), 1u);

  const auto before = MonotonicSeries(first);
  const auto after = MonotonicSeries(second);
  ASSERT_GT(before.size(), 20u);  // counters, reasons, histogram buckets
  for (const auto& [key, value] : before) {
    ASSERT_TRUE(after.count(key)) << key << " disappeared";
    EXPECT_GE(after.at(key), value) << key << " decreased";
  }
  EXPECT_GT(after.at("elastic_samples_processed_total"),
            before.at("elastic_samples_processed_total"));
}

TEST(MetricsExposerTest, OnlyMetricsIsServed) {
  TrainingMetrics metrics;
  MetricsExposer exposer(AnyFreePort());
  exposer.Serve(metrics.registry());
  const auto response = HttpGet("http://127.0.0.1:" + std::to_string(exposer.port()) + "/admin");
  EXPECT_EQ(response.status, 404) << response.error;
}

TEST(MetricsExposerTest, APortInUseIsAClearError) {
  MetricsExposer first(AnyFreePort());
  MetricsOptions same;
  same.port = first.port();
  try {
    MetricsExposer second(same);
    FAIL() << "bound a port already in use";
  } catch (const MetricsError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(first.port())),
              std::string::npos)
        << e.what();
  }
}

TEST(MetricsExposerTest, ImpossibleOptionsNameTheFlag) {
  MetricsOptions host_name;
  host_name.address = "localhost";
  host_name.port = 0;
  EXPECT_THROW(
      {
        try {
          MetricsExposer exposer(host_name);
        } catch (const MetricsError& e) {
          EXPECT_NE(std::string(e.what()).find("--metrics-address"), std::string::npos);
          throw;
        }
      },
      MetricsError);
  for (int64_t port : {-1L, 65536L}) {
    MetricsOptions bad_port;
    bad_port.port = port;
    try {
      ValidateMetricsOptions(bad_port);
      ADD_FAILURE() << "accepted port " << port;
    } catch (const MetricsError& e) {
      EXPECT_NE(std::string(e.what()).find("--metrics-port"), std::string::npos) << e.what();
    }
  }
  MetricsOptions not_local;
  not_local.address = "192.0.2.1";  // TEST-NET-1: valid, but no interface has it
  not_local.port = 0;
  try {
    MetricsExposer exposer(not_local);
    ADD_FAILURE() << "bound an address this machine does not have";
  } catch (const MetricsError& e) {
    EXPECT_NE(std::string(e.what()).find("192.0.2.1:0"), std::string::npos) << e.what();
  }
  MetricsOptions any_interface;
  any_interface.address = "0.0.0.0";
  EXPECT_NO_THROW(ValidateMetricsOptions(any_interface));
}

// The driver's last values reach Prometheus only if it scrapes once more
// before the process exits; AwaitNextScrape waits for that scrape, and only
// when something is scraping.
TEST(MetricsExposerTest, AwaitNextScrapeWaitsOnlyForAScraperThatIsThere) {
  TrainingMetrics metrics;
  MetricsExposer exposer(AnyFreePort());
  exposer.Serve(metrics.registry());
  EXPECT_FALSE(exposer.AwaitNextScrape(std::chrono::seconds(60))) << "nothing scraped yet";

  std::atomic<bool> scraping{true};
  std::atomic<int> scrapes{0};
  std::thread scraper([&] {
    while (scraping) {
      if (HttpGet(exposer.url(), 30).status == 200) ++scrapes;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  while (scrapes < 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  metrics.SetWorldSize(7);
  const int before = scrapes;
  EXPECT_TRUE(exposer.AwaitNextScrape(std::chrono::seconds(60)));
  scraping = false;
  scraper.join();
  EXPECT_GT(scrapes, before);
  EXPECT_EQ(ScrapeOverHttp(exposer).Value("elastic_world_size"), 7.0);

  // The scraper is gone: the wait ends after twice its interval, with false.
  EXPECT_FALSE(exposer.AwaitNextScrape(std::chrono::seconds(60)));
}

// Generous bounds for "it did not hang", not for speed.
constexpr double kScrapeTimeoutSeconds = 5;
constexpr auto kCloseWithin = std::chrono::seconds(5);

// One thread serves every connection, so a slow client must hold only its own:
// with 50 of them connected and dribbling, a scrape is answered, and the
// destructor returns without waiting for them.
TEST(MetricsExposerTest, SlowClientsHoldNeitherAScrapeNorTheDestructor) {
  TrainingMetrics metrics;
  metrics.SetWorldSize(3);
  ExposerLimits patient;
  patient.request_timeout = std::chrono::minutes(10);  // the slow clients stay connected
  auto exposer = std::make_unique<MetricsExposer>(AnyFreePort(), patient);
  exposer->Serve(metrics.registry());

  SlowClients slow(exposer->port(), 50);
  EXPECT_EQ(slow.connected(), 50) << "the endpoint did not take the connections";
  slow.AwaitBytesSent(2);

  const testing::HttpResponse response = HttpGet(exposer->url(), kScrapeTimeoutSeconds);
  EXPECT_EQ(response.status, 200) << "a scrape behind slow clients: " << response.error;
  if (response.status == 200) {
    EXPECT_EQ(ParseExposition(response.body).Value("elastic_world_size"), 3.0);
  }
  for (int i = 0; i < slow.connected(); ++i) {
    EXPECT_FALSE(slow.ServerClosed(i, std::chrono::milliseconds(0))) << "slow client " << i;
  }
  EXPECT_EQ(exposer->connections_shed(), 0u);
  EXPECT_EQ(exposer->connections_timed_out(), 0u);

  auto destroyed = std::async(std::launch::async, [&] { exposer.reset(); });
  const bool returned = destroyed.wait_for(kCloseWithin) == std::future_status::ready;
  EXPECT_TRUE(returned) << "the destructor waited for the slow clients";
  if (returned) {
    for (int i = 0; i < slow.connected(); ++i) {
      EXPECT_TRUE(slow.ServerClosed(i, kCloseWithin)) << "slow client " << i << " left open";
    }
  }
  slow.Stop();  // on failure, lets the serving thread go so the test ends
  destroyed.wait();
}

// The whole request must arrive within the request timeout counted from
// accept, however steadily it trickles in.
TEST(MetricsExposerTest, ARequestTricklingInIsCutOffAtItsDeadline) {
  TrainingMetrics metrics;
  metrics.SetWorldSize(2);
  MetricsExposer exposer(AnyFreePort());  // the default limits
  exposer.Serve(metrics.registry());

  SlowClients slow(exposer.port(), 1);
  ASSERT_EQ(slow.connected(), 1);
  std::string received;
  // Far beyond the 2 s request timeout, but a byte a second never trips a
  // timeout per receive.
  EXPECT_TRUE(slow.ServerClosed(0, std::chrono::seconds(30), &received))
      << "a request trickling in held its connection";
  EXPECT_NE(received.find("408"), std::string::npos) << received;
  EXPECT_EQ(exposer.connections_timed_out(), 1u);

  const testing::HttpResponse response = HttpGet(exposer.url(), kScrapeTimeoutSeconds);
  ASSERT_EQ(response.status, 200) << response.error;
  EXPECT_EQ(ParseExposition(response.body).Value("elastic_world_size"), 2.0);
}

// At most max_connections are open. Beyond that the connection that has waited
// longest for its request is closed, so stalled clients cannot lock a scrape
// out by holding every slot.
TEST(MetricsExposerTest, BeyondTheConnectionLimitTheOldestStalledClientsAreClosed) {
  TrainingMetrics metrics;
  metrics.SetWorldSize(5);
  ExposerLimits limits;
  limits.max_connections = 8;
  limits.request_timeout = std::chrono::minutes(10);  // only the limit closes them
  MetricsExposer exposer(AnyFreePort(), limits);
  exposer.Serve(metrics.registry());

  SlowClients slow(exposer.port(), 12);
  ASSERT_EQ(slow.connected(), 12);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(slow.ServerClosed(i, kCloseWithin)) << "client " << i << " beyond the limit";
  }

  const testing::HttpResponse response = HttpGet(exposer.url(), kScrapeTimeoutSeconds);
  ASSERT_EQ(response.status, 200) << "a scrape at the connection limit: " << response.error;
  EXPECT_EQ(ParseExposition(response.body).Value("elastic_world_size"), 5.0);
  EXPECT_TRUE(slow.ServerClosed(4, kCloseWithin)) << "no room was made for the scrape";
  for (int i = 5; i < 12; ++i) {
    EXPECT_FALSE(slow.ServerClosed(i, std::chrono::milliseconds(0))) << "client " << i;
  }
  EXPECT_EQ(exposer.connections_shed(), 5u);
  EXPECT_EQ(exposer.connections_timed_out(), 0u);
}

TEST(MetricsExposerTest, ImpossibleLimitsAreAClearError) {
  ExposerLimits none;
  none.max_connections = 0;
  EXPECT_THROW(MetricsExposer(AnyFreePort(), none), MetricsError);
  ExposerLimits instant;
  instant.request_timeout = std::chrono::milliseconds(0);
  EXPECT_THROW(MetricsExposer(AnyFreePort(), instant), MetricsError);
}

}  // namespace
}  // namespace elastic::monitoring
