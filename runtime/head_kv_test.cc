// The head's key-value store over real sockets and real processes: a process
// waiting on a key wakes when another process puts it; waits time out with
// TimeoutError; a client with a wrong token is refused; requests beyond the
// head's limits are refused by name while the head goes on serving; keys of
// finished generations are deleted.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/auth.h"
#include "runtime/head.h"
#include "runtime/head_client.h"
#include "runtime/test_util.h"

namespace elastic::runtime {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ClientOf;
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

// The message of the exception f throws ("" if none): the refusals below are
// checked by what they say.
template <typename F>
std::string ErrorOf(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A connection to the head that sends requests as built, without HeadClient's
// own handling of timeouts, and keeps every answer by request id.
class RawSession {
 public:
  struct Answer {
    bool error = false;
    std::string text;  // the error message or the value
  };

  explicit RawSession(const Head& head) : loop_("raw-session") {
    ConnectionCallbacks callbacks;
    callbacks.on_message = [this](const ConnectionPtr&, proto::Envelope::Reader envelope,
                                  const std::shared_ptr<IncomingFrame>&) {
      Answer answer;
      answer.error = envelope.which() == proto::Envelope::ERROR;
      if (answer.error) answer.text = envelope.getError().getMessage().cStr();
      if (envelope.which() == proto::Envelope::KV_VALUE)
        answer.text = ToBytes(envelope.getKvValue().getValue());
      std::lock_guard<std::mutex> lock(mutex_);
      answers_[envelope.getRequestId()] = answer;
      answered_.notify_all();
    };
    connection_ = Connection::Dial(loop_, "127.0.0.1", head.port(), TransportOptions{},
                                   head.token(), "raw-session", callbacks)
                      .get();
  }
  ~RawSession() {
    connection_->Close("test done");
    loop_.Stop();
  }

  void SendWait(uint64_t request_id, const std::string& key, uint64_t timeout_millis) {
    capnp::MallocMessageBuilder message;
    auto envelope = message.initRoot<proto::Envelope>();
    envelope.setRequestId(request_id);
    auto wait = envelope.initKvWait();
    wait.setKey(key);
    wait.setTimeoutMillis(timeout_millis);
    ASSERT_TRUE(connection_->Send(message));
  }

  void SendWaitAll(uint64_t request_id, const std::vector<std::string>& keys) {
    capnp::MallocMessageBuilder message;
    auto envelope = message.initRoot<proto::Envelope>();
    envelope.setRequestId(request_id);
    auto wait = envelope.initKvWaitAll();
    auto list = wait.initKeys(static_cast<unsigned>(keys.size()));
    for (size_t i = 0; i < keys.size(); ++i) list.set(static_cast<unsigned>(i), keys[i]);
    wait.setTimeoutMillis(60000);
    ASSERT_TRUE(connection_->Send(message));
  }

  // The answer to request_id; fails the test when none came within 60 s.
  Answer AnswerTo(uint64_t request_id) {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool came =
        answered_.wait_for(lock, seconds(60), [&] { return answers_.count(request_id) > 0; });
    EXPECT_TRUE(came) << "no answer to request " << request_id;
    return came ? answers_[request_id] : Answer{true, "no answer"};
  }

 private:
  EventLoop loop_;
  ConnectionPtr connection_;
  std::mutex mutex_;
  std::condition_variable answered_;
  std::map<uint64_t, Answer> answers_;
};

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
    // Once the head holds the wait (the only message it gets): a head gone
    // before the request reached it would test a failed send, not a pending wait.
    EXPECT_TRUE(
        testing::WaitUntil([&] { return head->stats().messages_received >= 1; }, seconds(60)));
    head.reset();
  });
  EXPECT_THROW(client.Wait("never", seconds(60)), std::runtime_error);
  stopper.join();
  EXPECT_FALSE(client.connected());
  EXPECT_THROW(client.Put("x", "y"), std::runtime_error);
}

TEST(HeadKvTest, OversizeKeyValueAndNamesAreRefusedByNameAndTheHeadServesOthers) {
  // Receiving the 64 MB value below keeps the head's thread busy for over a
  // second on a loaded 2-core machine, and no heartbeat goes out meanwhile:
  // this test is about limits, so silence is allowed for longer than that.
  HeadOptions options;
  options.transport.heartbeat_timeout = std::chrono::seconds(30);
  Head head(options);
  HeadClientOptions client_options = ClientOf(head);
  client_options.transport.heartbeat_timeout = std::chrono::seconds(30);
  HeadClient client(client_options);
  HeadClient other(client_options);
  const std::string long_key = "long-" + std::string(2000, 'k');

  std::string error = ErrorOf([&] { client.Put(long_key, "v"); });
  EXPECT_NE(error.find("max_key_bytes"), std::string::npos) << error;
  EXPECT_NE(error.find("'long-kkk"), std::string::npos) << error;
  EXPECT_LT(error.size(), 1000u) << "the refusal quotes all of the key";
  error = ErrorOf([&] { client.Get(long_key); });
  EXPECT_NE(error.find("max_key_bytes"), std::string::npos) << error;
  error = ErrorOf([&] { client.Wait(long_key, seconds(60)); });
  EXPECT_NE(error.find("max_key_bytes"), std::string::npos) << error;

  error = ErrorOf([&] { client.Put("huge-value", std::string((size_t{64} << 20) + 1, 'v')); });
  EXPECT_NE(error.find("max_value_bytes"), std::string::npos) << error;
  EXPECT_NE(error.find("'huge-value'"), std::string::npos) << error;
  EXPECT_FALSE(other.Get("huge-value").has_value());

  const std::string long_name = "name-" + std::string(300, 'n');
  error = ErrorOf([&] { client.RegisterMember(long_name, 0, Endpoint{"127.0.0.1", 1}); });
  EXPECT_NE(error.find("max_name_bytes"), std::string::npos) << error;
  EXPECT_NE(error.find("member name 'name-nnn"), std::string::npos) << error;
  error = ErrorOf([&] { client.RegisterMember("m", 0, Endpoint{long_name, 1}); });
  EXPECT_NE(error.find("member endpoint host"), std::string::npos) << error;
  error = ErrorOf([&] { client.RegisterNode(long_name, 1); });
  EXPECT_NE(error.find("node name"), std::string::npos) << error;
  error = ErrorOf([&] { client.RegisterActor(long_name, Endpoint{"127.0.0.1", 1}); });
  EXPECT_NE(error.find("actor name"), std::string::npos) << error;
  error = ErrorOf([&] { client.LookupActor(long_name, seconds(60)); });
  EXPECT_NE(error.find("actor name"), std::string::npos) << error;
  const uint64_t node = client.RegisterNode("node", 1);
  error = ErrorOf([&] { client.ReportDraining(node, std::string(2000, 'r')); });
  EXPECT_NE(error.find("max_reason_bytes"), std::string::npos) << error;
  EXPECT_TRUE(head.Membership().view.members.empty());

  // The refused client and the others go on as before.
  client.Put("after", "ok");
  EXPECT_EQ(other.Get("after").value(), "ok");
  const uint64_t id = client.RegisterMember("member", 0, Endpoint{"127.0.0.1", 1});
  EXPECT_EQ(head.Membership().view.members.at(0).id, id);
  EXPECT_GE(head.stats().requests_refused, 10u);
}

TEST(HeadKvTest, KeyCountAndTotalBytesAreBoundedPerHead) {
  HeadOptions options;
  options.limits.kv.max_keys = 50;
  options.limits.kv.max_total_bytes = 10000;
  Head head(options);
  HeadClient client(ClientOf(head));
  for (int i = 0; i < 50; ++i) client.Put("key" + std::to_string(i), "v");
  std::string error = ErrorOf([&] { client.Put("one-too-many", "v"); });
  EXPECT_NE(error.find("max_keys"), std::string::npos) << error;
  EXPECT_NE(error.find("'one-too-many'"), std::string::npos) << error;
  client.Put("key0", std::string(5000, 'x'));  // replacing is no new key
  error = ErrorOf([&] { client.Put("key1", std::string(5000, 'x')); });
  EXPECT_NE(error.find("max_total_bytes"), std::string::npos) << error;
  EXPECT_NE(error.find("'key1'"), std::string::npos) << error;
  EXPECT_EQ(client.Get("key1").value(), "v");
  EXPECT_EQ(head.stats().kv_keys, 50u);
  EXPECT_LE(head.stats().kv_bytes, 10000u);
}

TEST(HeadKvTest, WaitsPerSessionAreBounded) {
  Head head(HeadOptions{});
  RawSession session(head);
  constexpr uint64_t kLimit = 1024;  // HeadLimits::max_waits_per_session
  for (uint64_t id = 1; id <= kLimit + 1; ++id)
    session.SendWait(id, "w" + std::to_string(id), 60000);
  // Requests on one connection are handled in order: the last one is refused.
  const RawSession::Answer refused = session.AnswerTo(kLimit + 1);
  EXPECT_TRUE(refused.error);
  EXPECT_NE(refused.text.find("max_waits_per_session"), std::string::npos) << refused.text;
  EXPECT_NE(refused.text.find("'w1025'"), std::string::npos) << refused.text;

  // A wait that ends makes room for another; other connections wait freely.
  HeadClient other(ClientOf(head));
  other.Put("w1", "one");
  EXPECT_EQ(session.AnswerTo(1).text, "one");
  session.SendWait(kLimit + 2, "again", 60000);
  other.Put("again", "two");
  const RawSession::Answer again = session.AnswerTo(kLimit + 2);
  EXPECT_FALSE(again.error) << again.text;
  EXPECT_EQ(again.text, "two");
  std::thread waiter([&] { EXPECT_EQ(other.Wait("for-other", seconds(60)), "three"); });
  HeadClient putter(ClientOf(head));
  putter.Put("for-other", "three");
  waiter.join();
}

TEST(HeadKvTest, HugeWaitTimeoutsAreClampedNotOverflowed) {
  Head head(HeadOptions{});
  RawSession session(head);
  session.SendWait(1, "late", UINT64_MAX);
  session.SendWait(2, "late", uint64_t{1} << 63);
  session.SendWait(3, "late", INT64_MAX);
  HeadClient client(ClientOf(head));
  std::thread waiter(
      [&] { EXPECT_EQ(client.Wait("late", std::chrono::milliseconds::max()), "now"); });
  // The waits are pending, not timed out at once: the put answers all of them.
  HeadClient putter(ClientOf(head));
  session.SendWait(4, "barrier", 60000);
  putter.Put("late", "now");
  putter.Put("barrier", "");
  waiter.join();
  for (uint64_t id = 1; id <= 3; ++id) {
    const RawSession::Answer answer = session.AnswerTo(id);
    EXPECT_FALSE(answer.error) << "request " << id << ": " << answer.text;
    EXPECT_EQ(answer.text, "now");
  }
}

TEST(HeadKvTest, WaitsLongerThanMaxWaitEndAtMaxWait) {
  HeadOptions options;
  options.limits.max_wait = milliseconds(200);
  Head head(options);
  HeadClient client(ClientOf(head));
  const std::string error = ErrorOf([&] { client.Wait("never", seconds(3600)); });
  EXPECT_NE(error.find("within 200 ms"), std::string::npos) << error;
}

TEST(HeadKvTest, KeysOfFinishedGenerationsAreDeleted) {
  Head head(HeadOptions{});
  HeadClient client(ClientOf(head));
  client.Put("job/name", "kept");
  client.Put(GenerationKey(100000, "future"), "kept");
  constexpr int kRanks = 4;
  constexpr uint64_t kGenerations = 300;
  uint64_t generation = 0;
  for (uint64_t i = 0; i < kGenerations; ++i) {
    generation = head.PublishView({}).generation;
    for (int rank = 0; rank < kRanks; ++rank) {
      client.Put(GenerationKey(generation, "gloo/t/rank_" + std::to_string(rank)), "address");
    }
    // A member still in the generation before puts late: kept until the next one.
    if (generation > 1) client.Put(GenerationKey(generation - 1, "gloo/t/late"), "address");
  }
  // This generation's keys, the one before's, and the two that are no
  // generation's (or a future one's): bounded whatever the number of generations.
  EXPECT_LE(head.stats().kv_keys, 2u * (kRanks + 1) + 2);
  EXPECT_GT(head.stats().kv_keys, 0u);
  for (uint64_t old = 1; old + 1 < generation; old += 37) {
    EXPECT_FALSE(client.Get(GenerationKey(old, "gloo/t/rank_0")).has_value()) << old;
  }
  EXPECT_EQ(client.Get(GenerationKey(generation, "gloo/t/rank_3")).value(), "address");
  EXPECT_EQ(client.Get(GenerationKey(generation - 1, "gloo/t/rank_0")).value(), "address");
  EXPECT_EQ(client.Get("job/name").value(), "kept");
  EXPECT_EQ(client.Get(GenerationKey(100000, "future")).value(), "kept");
}

TEST(HeadKvTest, WaitAllReturnsEveryValueInOrderAndWaitsForTheMissing) {
  Head head(HeadOptions{});
  HeadClient client(ClientOf(head));
  HeadClient other(ClientOf(head));
  std::vector<std::string> keys;
  for (int i = 0; i < 20; ++i) keys.push_back(GenerationKey(3, "addr/" + std::to_string(i)));
  for (int i = 0; i < 10; ++i)
    client.Put(keys[static_cast<size_t>(i)], "value" + std::to_string(i));
  const uint64_t before = head.stats().messages_received;
  std::vector<std::string> values;
  std::thread waiter([&] { values = client.WaitAll(keys, seconds(60), {}); });
  // The waiter holds half of the keys; the rest come from another client.
  for (int i = 10; i < 20; ++i)
    other.Put(keys[static_cast<size_t>(i)], "value" + std::to_string(i));
  waiter.join();
  ASSERT_EQ(values.size(), keys.size());
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(values[static_cast<size_t>(i)], "value" + std::to_string(i));
  // One request for twenty keys (and the ten puts).
  EXPECT_EQ(head.stats().messages_received - before, 11u);
  // Ranges: the first byte and the digits after "value" of each.
  values = client.WaitAll({keys[1], keys[12]}, seconds(60), {{0, 1}, {5, 10}});
  EXPECT_EQ(values, (std::vector<std::string>{"v1", "v12"}));
}

TEST(HeadKvTest, WaitAllTimesOutNamingTheMissingKeys) {
  Head head(HeadOptions{});
  HeadClient client(ClientOf(head));
  client.Put("here/0", "x");
  client.Put("here/2", "x");
  try {
    client.WaitAll({"here/0", "gone/1", "here/2", "gone/3"}, milliseconds(200), {});
    FAIL() << "WaitAll returned without two of its keys";
  } catch (const MissingKeysError& e) {
    EXPECT_EQ(e.missing(), (std::vector<size_t>{1, 3}));
    const std::string what = e.what();
    EXPECT_NE(what.find("2 of 4 keys ('gone/1', 'gone/3')"), std::string::npos) << what;
    EXPECT_NE(what.find("within 200 ms"), std::string::npos) << what;
  }
  // A MissingKeysError is a TimeoutError; the connection goes on.
  EXPECT_THROW(client.WaitAll({"gone/1"}, milliseconds(50), {}), TimeoutError);
  EXPECT_EQ(client.WaitAll({"here/2"}, milliseconds(50), {}).at(0), "x");
}

TEST(HeadKvTest, WaitAllBeyondTheLimitsIsRefusedByNameAndTheHeadServesOthers) {
  HeadOptions options;
  options.limits.kv.max_keys_per_wait = 100;
  options.limits.max_ranges_per_wait = 2;
  options.transport.max_frame_bytes = 64 << 10;
  Head head(options);
  HeadClient client(ClientOf(head));
  HeadClient other(ClientOf(head));
  std::vector<std::string> keys;
  for (int i = 0; i < 101; ++i) keys.push_back("k" + std::to_string(i));
  std::string error = ErrorOf([&] { client.WaitAll(keys, seconds(60), {}); });
  EXPECT_NE(error.find("101 keys"), std::string::npos) << error;
  EXPECT_NE(error.find("max_keys_per_wait"), std::string::npos) << error;
  keys.pop_back();
  error = ErrorOf([&] { client.WaitAll(keys, seconds(60), {{0, 1}, {1, 1}, {2, 1}}); });
  EXPECT_NE(error.find("max_ranges_per_wait"), std::string::npos) << error;
  error = ErrorOf([&] { client.WaitAll({"short", std::string(2000, 'k')}, seconds(60), {}); });
  EXPECT_NE(error.find("max_key_bytes"), std::string::npos) << error;
  // Values that would not fit one reply: refused, not sent.
  for (int i = 0; i < 4; ++i) client.Put("big" + std::to_string(i), std::string(20 << 10, 'b'));
  error = ErrorOf([&] { client.WaitAll({"big0", "big1", "big2", "big3"}, seconds(60), {}); });
  EXPECT_NE(error.find("max_frame_bytes"), std::string::npos) << error;
  EXPECT_EQ(client.WaitAll({"big0", "big1", "big2", "big3"}, seconds(60), {{0, 4}}).at(3), "bbbb");
  EXPECT_GE(head.stats().requests_refused, 4u);
  other.Put("after", "ok");
  EXPECT_EQ(client.WaitAll({"after"}, seconds(60), {}).at(0), "ok");
}

// A rendezvous of n members through AllGather: each member one request (its
// put and its wait together), every member gets every value in rank order.
TEST(HeadKvTest, AllGatherIsOneRequestPerMemberAndReturnsEveryValueInRankOrder) {
  Head head(HeadOptions{});
  constexpr size_t kMembers = 12;
  std::vector<std::unique_ptr<HeadClient>> clients;
  for (size_t i = 0; i < kMembers; ++i)
    clients.push_back(std::make_unique<HeadClient>(ClientOf(head)));
  const std::string prefix = GenerationKey(4, "mesh/");
  const uint64_t before = head.stats().messages_received;
  std::vector<std::vector<std::string>> gathered(kMembers);
  std::vector<std::thread> members;
  // In reverse rank order: the first ones wait for all the others' puts.
  for (size_t rank = kMembers; rank-- > 0;) {
    members.emplace_back([&, rank] {
      gathered[rank] =
          clients[rank]->AllGather(prefix, rank, kMembers, "member" + std::to_string(rank) + "!",
                                   seconds(60), {{0, 6}, {6 + rank / 10, 1}});
    });
  }
  for (std::thread& member : members) member.join();
  EXPECT_EQ(head.stats().messages_received - before, kMembers);
  for (size_t rank = 0; rank < kMembers; ++rank) {
    ASSERT_EQ(gathered[rank].size(), kMembers) << rank;
    for (size_t peer = 0; peer < kMembers; ++peer) {
      // "member" and the digit of peer's number at rank's slot (1 or 2 digits).
      const std::string number = std::to_string(peer) + "!";
      EXPECT_EQ(gathered[rank][peer], "member" + number.substr(rank / 10, 1))
          << "rank " << rank << ", peer " << peer;
    }
  }
  // The keys are ordinary keys: prefix and decimal rank.
  EXPECT_EQ(clients[0]->Get(prefix + "11").value_or(""), "member11!");
}

TEST(HeadKvTest, AllGatherTimesOutNamingTheMembersThatDidNotPut) {
  Head head(HeadOptions{});
  HeadClient client(ClientOf(head));
  HeadClient other(ClientOf(head));
  other.Put("g2/mesh/1", "one");
  try {
    client.AllGather("g2/mesh/", 0, 4, "zero", milliseconds(200), {});
    FAIL() << "AllGather returned without members 2 and 3";
  } catch (const MissingKeysError& e) {
    EXPECT_EQ(e.missing(), (std::vector<size_t>{2, 3}));
    const std::string what = e.what();
    EXPECT_NE(what.find("2 of 4 keys ('g2/mesh/2', 'g2/mesh/3')"), std::string::npos) << what;
  }
  // Its own put stays, as a KvPut's would.
  EXPECT_EQ(other.Get("g2/mesh/0").value_or(""), "zero");
  EXPECT_THROW(client.AllGather("g2/mesh/", 4, 4, "x", milliseconds(50), {}),
               std::invalid_argument);
}

// A refused AllGather sets nothing: neither too many keys, nor a value over
// the limit, nor a key name over it.
TEST(HeadKvTest, ARefusedAllGatherSetsNothingAndTheHeadServesOthers) {
  HeadOptions options;
  options.limits.kv.max_keys_per_wait = 100;
  options.limits.kv.max_value_bytes = 1000;
  Head head(options);
  HeadClient client(ClientOf(head));
  std::string error = ErrorOf([&] { client.AllGather("many/", 0, 101, "x", seconds(60), {}); });
  EXPECT_NE(error.find("101 keys"), std::string::npos) << error;
  EXPECT_NE(error.find("max_keys_per_wait"), std::string::npos) << error;
  EXPECT_FALSE(client.Get("many/0").has_value());
  error = ErrorOf([&] { client.AllGather("big/", 0, 2, std::string(1001, 'v'), seconds(60), {}); });
  EXPECT_NE(error.find("max_value_bytes"), std::string::npos) << error;
  EXPECT_FALSE(client.Get("big/0").has_value());
  const std::string long_prefix(1030, 'p');
  error = ErrorOf([&] { client.AllGather(long_prefix, 0, 2, "x", seconds(60), {}); });
  EXPECT_NE(error.find("max_key_bytes"), std::string::npos) << error;
  EXPECT_EQ(head.stats().kv_keys, 0u);
  EXPECT_EQ(client.AllGather("ok/", 0, 1, "fine", seconds(60), {}),
            (std::vector<std::string>{"fine"}));
}

TEST(HeadKvTest, AWaitAllOfAConnectionThatClosedIsForgotten) {
  Head head(HeadOptions{});
  HeadClient client(ClientOf(head));
  {
    RawSession session(head);
    session.SendWaitAll(1, {"late/0", "late/1"});
    session.SendWait(2, "barrier", 60000);
    client.Put("barrier", "");
    // Requests of one connection are handled in order: the WaitAll is pending.
    EXPECT_FALSE(session.AnswerTo(2).error);
  }
  // Its waiter must not answer a closed connection (nor crash the head).
  client.Put("late/0", "a");
  client.Put("late/1", "b");
  EXPECT_EQ(client.WaitAll({"late/0", "late/1"}, seconds(60), {}),
            (std::vector<std::string>{"a", "b"}));
}

TEST(HeadKvTest, NonLoopbackListenRequiresTokenFile) {
  HeadOptions options;
  options.listen_host = "0.0.0.0";
  EXPECT_THROW(Head head(options), std::invalid_argument);
}

}  // namespace
}  // namespace elastic::runtime

int main(int argc, char** argv) { return elastic::runtime::testing::TestMain(argc, argv); }
