// A flood of idle TCP connections against a head whose process may open only
// a few descriptors (RLIMIT_NOFILE): the head must neither spin nor fill its
// log (accept errors back off, refusals and failed handshakes are logged at a
// bounded rate), a registered member keeps heartbeating and is never declared
// failed, and new clients still register, during the flood once handshake
// slots free up and after it.
//
// Three processes over real sockets: the head (its limit set with setrlimit
// before it starts, its stderr in a file), the flood (its own raised limit,
// non-blocking connects from many loopback source addresses that it then
// holds open without a byte), and the test (member, observer, new clients).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/auth.h"
#include "runtime/head.h"
#include "runtime/head_client.h"
#include "runtime/test_util.h"

namespace elastic::runtime {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Subprocess;
using testing::WaitUntil;

constexpr seconds kPatience{60};
constexpr int kFloodConnections = 5000;
// The head drops a peer that has not authenticated after this long, so
// handshake slots taken by the flood free up within the test.
constexpr milliseconds kConnectTimeout{2000};
// Roomy for a busy machine, and still far shorter than the flood lasts.
constexpr milliseconds kHeartbeatTimeout{2000};
constexpr size_t kMaxHeadLogLines = 100;

void SetDescriptorLimit(rlim_t limit) {
  rlimit current{};
  if (getrlimit(RLIMIT_NOFILE, &current) != 0) throw std::runtime_error("getrlimit failed");
  rlimit wanted{limit, limit};
  if (current.rlim_max != RLIM_INFINITY && limit > current.rlim_max) {
    wanted = rlimit{current.rlim_max, current.rlim_max};
  }
  if (setrlimit(RLIMIT_NOFILE, &wanted) != 0) {
    throw std::runtime_error("setrlimit(RLIMIT_NOFILE, " + std::to_string(limit) + ") failed");
  }
}

TransportOptions FloodTestTransport() {
  TransportOptions transport;
  transport.connect_timeout = kConnectTimeout;
  transport.heartbeat_timeout = kHeartbeatTimeout;
  return transport;
}

// --role=head PORT LOG_PATH NOFILE: a head on PORT (token from the
// environment) under RLIMIT_NOFILE = NOFILE, logging to LOG_PATH; runs until
// killed.
int HeadMain(const std::vector<std::string>& args) {
  const int log = open(args.at(1).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log < 0 || dup2(log, STDERR_FILENO) < 0) return 2;
  close(log);
  SetDescriptorLimit(static_cast<rlim_t>(std::stoul(args.at(2))));
  HeadOptions options;
  options.port = static_cast<uint16_t>(std::stoi(args.at(0)));
  options.token = std::getenv(kTokenEnvironmentVariable);
  options.transport = FloodTestTransport();
  Head head(options);
  while (true) std::this_thread::sleep_for(seconds(1));
}

// Connects without waiting (the head's backlog may be full; the kernel keeps
// retrying) from source address 127.0.0.SOURCE. Returns the descriptor, -1
// when this process is out of descriptors.
int StartConnect(uint16_t port, int source) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl((127u << 24) | static_cast<uint32_t>(source));
  // Any loopback address works on Linux; without it, connect from 127.0.0.1.
  (void)bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local));
  sockaddr_in head{};
  head.sin_family = AF_INET;
  head.sin_port = htons(port);
  head.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  (void)connect(fd, reinterpret_cast<sockaddr*>(&head), sizeof(head));  // EINPROGRESS
  return fd;
}

// --role=flood PORT COUNT READY_PATH: opens COUNT idle connections to the
// head (as many as it can), the first quarter from one address and the rest
// spread over a hundred, writes how many to READY_PATH and holds them until
// killed.
int FloodMain(const std::vector<std::string>& args) {
  const auto port = static_cast<uint16_t>(std::stoi(args.at(0)));
  const int count = std::stoi(args.at(1));
  SetDescriptorLimit(static_cast<rlim_t>(count) + 64);
  std::vector<int> held;
  for (int i = 0; i < count; ++i) {
    const int source = i < count / 4 ? 2 : 3 + i % 100;
    const int fd = StartConnect(port, source);
    if (fd < 0) break;
    held.push_back(fd);
  }
  {
    std::ofstream ready(args.at(2) + ".tmp");
    ready << held.size() << "\n";
  }
  std::rename((args.at(2) + ".tmp").c_str(), args.at(2).c_str());
  while (true) std::this_thread::sleep_for(seconds(1));
}

const bool kRoles =
    testing::RegisterRole("head", HeadMain) && testing::RegisterRole("flood", FloodMain);

bool FileExists(const std::string& path) { return std::ifstream(path).good(); }

std::vector<std::string> ReadLines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

struct FloodCase {
  int descriptor_limit;  // the head's RLIMIT_NOFILE
  // Whether a new client can get in while the flood still holds its sockets:
  // when the head is out of descriptors, new connections wait in the listen
  // backlog behind the flood's until it ends.
  bool joins_during_flood;
};

class PreAuthFloodTest : public ::testing::TestWithParam<FloodCase> {
 protected:
  void SetUp() override {
    token_ = GenerateToken();
    port_ = testing::FreeLocalPort();
    const std::string name = "nofile" + std::to_string(GetParam().descriptor_limit);
    // Kept with the test's outputs under Bazel (outputs.zip), for a look at what the head said.
    const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
    log_path_ = (outputs != nullptr ? std::string(outputs) : ::testing::TempDir()) + "/" + name +
                "_head.log";
    ready_path_ = ::testing::TempDir() + "/" + name + "_flood.ready";
    std::remove(ready_path_.c_str());
    head_ = std::make_unique<Subprocess>(Subprocess::SpawnRole(
        "head", {std::to_string(port_), log_path_, std::to_string(GetParam().descriptor_limit)},
        {{kTokenEnvironmentVariable, token_}}));
  }

  HeadClientOptions ClientOptions(const std::string& name) const {
    HeadClientOptions options;
    options.port = port_;
    options.token = token_;
    options.name = name;
    options.transport = FloodTestTransport();
    return options;
  }

  // A new client, retried while the head refuses or drops it (not started
  // yet, or every handshake slot taken), until it registers as a member.
  std::unique_ptr<HeadClient> RegisterNewMember(const std::string& name) {
    std::unique_ptr<HeadClient> client;
    std::string last_error = "never tried";
    const bool registered = WaitUntil(
        [&] {
          try {
            client = std::make_unique<HeadClient>(ClientOptions(name));
            client->RegisterMember(name, 0, Endpoint{"127.0.0.1", 0});
            return true;
          } catch (const std::exception& e) {
            last_error = e.what();
            client.reset();
            std::this_thread::sleep_for(milliseconds(50));  // each try starts a client thread
            return false;
          }
        },
        kPatience);
    if (!registered) ADD_FAILURE() << name << " could not register: " << last_error;
    return client;
  }

  std::string token_;
  uint16_t port_ = 0;
  std::string log_path_;
  std::string ready_path_;
  std::unique_ptr<Subprocess> head_;
};

TEST_P(PreAuthFloodTest, IdleFloodNeitherFailsMembersNorFloodsTheLog) {
  // Before the flood: an observer of membership and a registered member.
  auto observer = RegisterNewMember("observer");
  ASSERT_NE(observer, nullptr);
  auto member = RegisterNewMember("member");
  ASSERT_NE(member, nullptr);
  const uint64_t member_id = member->member_id();
  std::atomic<int> failures{0};
  observer->Subscribe([&](const MembershipUpdate& update) {
    if (update.kind == MembershipEventKind::kFailed && update.member_id == member_id) ++failures;
  });

  auto flood = std::make_unique<Subprocess>(Subprocess::SpawnRole(
      "flood", {std::to_string(port_), std::to_string(kFloodConnections), ready_path_}));
  ASSERT_TRUE(WaitUntil([&] { return FileExists(ready_path_); }, kPatience));
  std::ifstream ready(ready_path_);
  int opened = 0;
  ready >> opened;
  // The flood's own descriptors bound what it can open; most must get through.
  EXPECT_GT(opened, kFloodConnections / 2);

  // Let the flood sit through a few heartbeat timeouts and at least one
  // handshake timeout of the connections it holds.
  std::this_thread::sleep_for(2 * kHeartbeatTimeout + kConnectTimeout);
  EXPECT_TRUE(member->connected());
  std::unique_ptr<HeadClient> during;
  if (GetParam().joins_during_flood) {
    // While the flood still holds its sockets, a new client gets in once the
    // handshake timeout has freed slots.
    during = RegisterNewMember("during-flood");
    EXPECT_NE(during, nullptr);
  }

  flood.reset();  // SIGKILL: its connections close
  auto after = RegisterNewMember("after-flood");
  EXPECT_NE(after, nullptr);

  EXPECT_TRUE(member->connected());
  EXPECT_EQ(member->member_id(), member_id);
  EXPECT_EQ(failures.load(), 0) << "the member was declared failed during the flood";
  const auto view = observer->GetMembership().view;
  bool member_in_view = false;
  for (const auto& info : view.members) member_in_view |= info.id == member_id;
  EXPECT_TRUE(member_in_view);

  head_.reset();
  const std::vector<std::string> lines = ReadLines(log_path_);
  std::string sample;
  for (size_t i = 0; i < lines.size() && i < 20; ++i) sample += lines[i] + "\n";
  EXPECT_LT(lines.size(), kMaxHeadLogLines) << "the head's log starts with:\n" << sample;
}

// 1024: the limit of a default shell, above the handshake-slot cap: the cap
// keeps the head's descriptors in hand. 64: below the cap: accept fails with
// EMFILE and backs off until handshake timeouts free descriptors.
INSTANTIATE_TEST_SUITE_P(DescriptorLimits, PreAuthFloodTest,
                         ::testing::Values(FloodCase{1024, true}, FloodCase{64, false}),
                         [](const ::testing::TestParamInfo<FloodCase>& info) {
                           return "nofile" + std::to_string(info.param.descriptor_limit);
                         });

}  // namespace
}  // namespace elastic::runtime

int main(int argc, char** argv) { return elastic::runtime::testing::TestMain(argc, argv); }
