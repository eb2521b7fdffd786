// The head's key-value store over real sockets and real processes: a process
// waiting on a key wakes when another process puts it; waits time out with
// TimeoutError; a client with a wrong token is refused.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "runtime/auth.h"
#include "runtime/head.h"
#include "runtime/head_client.h"
#include "runtime/test_util.h"

namespace elastic::runtime {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Subprocess;

// --role=waiter PORT KEY EXPECTED: waits for KEY, exits 0 when it reads EXPECTED.
int WaiterMain(const std::vector<std::string>& args) {
  HeadClientOptions options;
  options.port = static_cast<uint16_t>(std::stoi(args.at(0)));
  options.token = std::getenv(kTokenEnvironmentVariable);
  options.name = "waiter";
  HeadClient client(options);
  client.Put("waiter/ready", "1");
  const std::string value = client.Wait(args.at(1), seconds(60));
  return value == args.at(2) ? 0 : 1;
}

// --role=putter PORT KEY VALUE
int PutterMain(const std::vector<std::string>& args) {
  HeadClientOptions options;
  options.port = static_cast<uint16_t>(std::stoi(args.at(0)));
  options.token = std::getenv(kTokenEnvironmentVariable);
  options.name = "putter";
  HeadClient client(options);
  client.Put(args.at(1), args.at(2));
  return 0;
}

const bool kRoles =
    testing::RegisterRole("waiter", WaiterMain) && testing::RegisterRole("putter", PutterMain);

HeadClientOptions ClientOf(const Head& head) {
  HeadClientOptions options;
  options.port = head.port();
  options.token = head.token();
  return options;
}

TEST(HeadKvTest, WaiterProcessWakesWhenAnotherProcessPuts) {
  Head head(HeadOptions{});
  const std::map<std::string, std::string> env = {{kTokenEnvironmentVariable, head.token()}};
  const std::string key = GenerationKey(5, "rank0/address");
  auto waiter =
      Subprocess::SpawnRole("waiter", {std::to_string(head.port()), key, "10.0.0.7:1234"}, env);

  HeadClient observer(ClientOf(head));
  // The waiter is connected and about to wait; the key is still unset.
  observer.Wait("waiter/ready", seconds(60));
  EXPECT_FALSE(observer.Get(key).has_value());

  auto putter =
      Subprocess::SpawnRole("putter", {std::to_string(head.port()), key, "10.0.0.7:1234"}, env);
  EXPECT_EQ(putter.WaitExitCode(seconds(60)), 0);
  EXPECT_EQ(waiter.WaitExitCode(seconds(60)), 0);
  EXPECT_EQ(observer.Get(key).value(), "10.0.0.7:1234");
}

TEST(HeadKvTest, PutGetWaitSemanticsInOneProcess) {
  Head head(HeadOptions{});
  HeadClient client(ClientOf(head));
  EXPECT_FALSE(client.Get("missing").has_value());
  client.Put("k", std::string("\0binary\xff", 8));
  EXPECT_EQ(client.Get("k").value(), std::string("\0binary\xff", 8));
  client.Put("k", "replaced");
  EXPECT_EQ(client.Wait("k", seconds(10)), "replaced");
  // Another thread's waiter on the same client wakes on a put.
  std::thread waiter([&] { EXPECT_EQ(client.Wait("later", seconds(60)), "now"); });
  HeadClient other(ClientOf(head));
  other.Put("later", "now");
  waiter.join();
}

TEST(HeadKvTest, WaitOnAbsentKeyThrowsTimeoutErrorNamingTheKey) {
  Head head(HeadOptions{});
  HeadClient client(ClientOf(head));
  try {
    client.Wait("never-set", milliseconds(200));
    FAIL() << "Wait returned for a key nobody set";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("never-set"), std::string::npos) << e.what();
  }
  // The connection is still good after a timeout.
  client.Put("after", "ok");
  EXPECT_EQ(client.Get("after").value(), "ok");
}

TEST(HeadKvTest, WrongTokenIsRefused) {
  Head head(HeadOptions{});
  HeadClientOptions options = ClientOf(head);
  options.token = "not-the-token";
  try {
    HeadClient client(options);
    FAIL() << "connected with a wrong token";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("wrong or missing cluster token"), std::string::npos)
        << e.what();
  }
  HeadClient good(ClientOf(head));
  good.Put("still", "serving");
  EXPECT_EQ(good.Get("still").value(), "serving");
}

TEST(HeadKvTest, WaitFailsWhenTheHeadGoesAway) {
  auto head = std::make_unique<Head>(HeadOptions{});
  HeadClient client(ClientOf(*head));
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(300));
    head.reset();
  });
  EXPECT_THROW(client.Wait("never", seconds(60)), std::runtime_error);
  stopper.join();
  EXPECT_FALSE(client.connected());
  EXPECT_THROW(client.Put("x", "y"), std::runtime_error);
}

TEST(HeadKvTest, NonLoopbackListenRequiresTokenFile) {
  HeadOptions options;
  options.listen_host = "0.0.0.0";
  EXPECT_THROW(Head head(options), std::invalid_argument);
}

}  // namespace
}  // namespace elastic::runtime

int main(int argc, char** argv) { return elastic::runtime::testing::TestMain(argc, argv); }
