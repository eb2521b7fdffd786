// The linear rendezvous of the Gloo backend with simulated members: each a
// thread with its own connection to a real head hosted in this process and
// its own Gloo device, over real loopback sockets. Worlds of several sizes
// connect and allreduce; the head serves exactly one request per member per
// change; a member that dies halfway fails the others with an error,
// never a hang, and the next generation without it works.
#include "collectives/gloo_mesh.h"

#include <gloo/transport/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/gloo_communicator.h"
#include "collectives/testing/file_kv_store.h"
#include "collectives/testing/subprocess.h"
#include "runtime/head.h"
#include "runtime/head_client.h"
#include "runtime/kv_store.h"

namespace elastic::collectives {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kToken[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

std::unique_ptr<runtime::HeadClient> ClientOf(const runtime::Head& head, const std::string& name) {
  runtime::HeadClientOptions options;
  options.port = head.port();
  options.token = head.token();
  options.name = name;
  return std::make_unique<runtime::HeadClient>(options);
}

std::string KeyOf(uint64_t generation, int rank) {
  return runtime::GenerationKey(generation, "gloo/world/" + std::to_string(rank));
}

// What each member of one generation did: the sum its allreduce produced, or
// the error its creation or allreduce threw.
struct Outcome {
  std::optional<float> sum;
  std::string error;
  bool timeout = false;
};

// Members `ranks` (of a world of `size`) create their communicators at once,
// each over its own client, and allreduce rank + 1. A rank outside `ranks` is
// simulated by the caller (or missing).
std::vector<Outcome> RunGeneration(std::vector<std::unique_ptr<runtime::HeadClient>>& clients,
                                   uint64_t generation, int size, const std::vector<int>& ranks,
                                   const GlooOptions& options) {
  std::vector<Outcome> outcomes(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int rank : ranks) {
    threads.emplace_back([&, rank] {
      Outcome& outcome = outcomes[static_cast<size_t>(rank)];
      try {
        GlooCommunicatorFactory factory(*clients[static_cast<size_t>(rank)], options);
        auto comm = factory.Create({generation, rank, size});
        float value = static_cast<float>(rank + 1);
        comm->Allreduce(&value, 1, DataType::kFloat32, ReduceOp::kSum);
        outcome.sum = value;
      } catch (const CollectiveTimeout& e) {
        outcome.error = e.what();
        outcome.timeout = true;
      } catch (const std::exception& e) {
        outcome.error = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return outcomes;
}

std::vector<std::unique_ptr<runtime::HeadClient>> Clients(const runtime::Head& head, int count) {
  std::vector<std::unique_ptr<runtime::HeadClient>> clients;
  for (int i = 0; i < count; ++i) clients.push_back(ClientOf(head, "member-" + std::to_string(i)));
  return clients;
}

GlooOptions WithToken(milliseconds rendezvous_timeout) {
  GlooOptions options;
  options.token = kToken;
  options.rendezvous_timeout = rendezvous_timeout;
  options.default_timeout = seconds(60);
  return options;
}

// A member that goes as far as publishing a real address (its pairs listen),
// then dies: its sockets close, and it never dials nor accepts.
class DyingMember {
 public:
  DyingMember(runtime::KeyValueStore& store, uint64_t generation, int rank, int size) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    device_ = gloo::transport::tcp::CreateDevice(attr);
    transport_ = device_->createContext(rank, size);
    MeshAddress address;
    address.ports.assign(static_cast<size_t>(size), 0);
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      const gloo::transport::tcp::Address pair(transport_->createPair(peer)->address().bytes());
      address.host = pair.getSockaddr();
      const auto* in = reinterpret_cast<const sockaddr_in*>(&address.host);
      address.ports[static_cast<size_t>(peer)] = in->sin_port;
    }
    store.Put(KeyOf(generation, rank), EncodeMeshAddress(address));
  }
  // Death: every socket of the member closes.
  void Die() {
    transport_.reset();
    device_.reset();
  }

 private:
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::transport::Context> transport_;
};

TEST(MeshAddressTest, EachRankReadsTheHeadAndOnlyItsOwnPort) {
  MeshAddress address;
  auto* in = reinterpret_cast<sockaddr_in*>(&address.host);
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(0x0a000007);  // 10.0.0.7
  address.ports = {htons(1000), 0, htons(1002), htons(65535)};
  const std::string encoded = EncodeMeshAddress(address);
  EXPECT_EQ(encoded.size(), kMeshAddressHeadBytes + 2 * 4);
  for (int rank : {0, 2, 3}) {
    const std::string slice = runtime::SliceValue(encoded, MeshSliceRanges(rank));
    EXPECT_EQ(slice.size(), kMeshAddressHeadBytes + 2);
    sockaddr_storage peer{};
    ASSERT_TRUE(DecodeMeshSlice(slice, &peer)) << rank;
    EXPECT_EQ(FormatSockaddr(peer), "10.0.0.7:" + std::to_string(rank == 3 ? 65535 : 1000 + rank));
  }
  sockaddr_storage peer{};
  // The slot of the owner itself (port 0), a cut slice, another format.
  EXPECT_FALSE(DecodeMeshSlice(runtime::SliceValue(encoded, MeshSliceRanges(1)), &peer));
  EXPECT_FALSE(DecodeMeshSlice(encoded.substr(0, 19), &peer));
  std::string other_format = runtime::SliceValue(encoded, MeshSliceRanges(0));
  other_format[0] = 9;
  EXPECT_FALSE(DecodeMeshSlice(other_format, &peer));
  // Out of range: a rank beyond the world reads the head only.
  EXPECT_FALSE(DecodeMeshSlice(runtime::SliceValue(encoded, MeshSliceRanges(4)), &peer));
}

// A store that cannot wait for many keys at once (here one file per key)
// still answers WaitAll, key after key, with the same values and errors.
TEST(KeyValueStoreTest, TheDefaultWaitAllReadsKeyByKeyWithTheSameResults) {
  testing::FileKeyValueStore store(testing::MakeTempDir("wait_all_"));
  store.Put("a", "0123456789");
  store.Put("c", "abcdefghij");
  try {
    store.WaitAll({"a", "b", "c", "d"}, milliseconds(200), {{0, 2}});
    FAIL() << "WaitAll returned without b and d";
  } catch (const runtime::MissingKeysError& e) {
    EXPECT_EQ(e.missing(), (std::vector<size_t>{1, 3}));
    EXPECT_NE(std::string(e.what()).find("2 of 4 keys ('b', 'd')"), std::string::npos) << e.what();
  }
  store.Put("b", "xy");
  EXPECT_EQ(store.WaitAll({"a", "b", "c"}, seconds(10), {{0, 2}, {9, 5}}),
            (std::vector<std::string>{"019", "xy", "abj"}));
}

// Its AllGather likewise: a put, then the same WaitAll.
TEST(KeyValueStoreTest, TheDefaultAllGatherPutsThenWaitsForEveryRank) {
  testing::FileKeyValueStore store(testing::MakeTempDir("all_gather_"));
  store.Put("g1/x/0", "zero");
  try {
    store.AllGather("g1/x/", 1, 3, "one", milliseconds(200), {});
    FAIL() << "AllGather returned without rank 2";
  } catch (const runtime::MissingKeysError& e) {
    EXPECT_EQ(e.missing(), (std::vector<size_t>{2}));
    EXPECT_NE(std::string(e.what()).find("'g1/x/2'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(store.Get("g1/x/1").value_or(""), "one");
  EXPECT_EQ(store.AllGather("g1/x/", 2, 3, "two", seconds(10), {{0, 2}}),
            (std::vector<std::string>{"ze", "on", "tw"}));
}

TEST(GlooMeshTest, WorldsOfSeveralSizesConnectAndAllreduceWithOneHeadRequestPerMember) {
  runtime::Head head(runtime::HeadOptions{});
  uint64_t generation = 10;
  for (int size : {1, 2, 3, 8, 24}) {
    auto clients = Clients(head, size);
    std::vector<int> ranks;
    for (int rank = 0; rank < size; ++rank) ranks.push_back(rank);
    const uint64_t before = head.stats().messages_received;
    const auto outcomes = RunGeneration(clients, ++generation, size, ranks, WithToken(seconds(60)));
    // Per member: one AllGather (its put and its wait); nothing grows with the
    // number of peers.
    EXPECT_EQ(head.stats().messages_received - before, static_cast<uint64_t>(size))
        << "world of " << size;
    for (int rank = 0; rank < size; ++rank) {
      const Outcome& outcome = outcomes[static_cast<size_t>(rank)];
      EXPECT_EQ(outcome.sum.value_or(-1), static_cast<float>(size * (size + 1) / 2))
          << "world of " << size << ", rank " << rank << ": " << outcome.error;
    }
  }
}

TEST(GlooMeshTest, AMemberThatNeverPublishesTimesOutTheOthersNamingItsRank) {
  runtime::Head head(runtime::HeadOptions{});
  auto clients = Clients(head, 4);
  const auto outcomes = RunGeneration(clients, 3, 4, {0, 1, 3}, WithToken(milliseconds(500)));
  for (int rank : {0, 1, 3}) {
    const Outcome& outcome = outcomes[static_cast<size_t>(rank)];
    EXPECT_TRUE(outcome.timeout) << rank << ": " << outcome.error;
    EXPECT_NE(outcome.error.find("rank(s) 2 did not appear"), std::string::npos) << outcome.error;
  }
}

TEST(GlooMeshTest, AMalformedAddressIsRefusedNamingItsRank) {
  runtime::Head head(runtime::HeadOptions{});
  auto clients = Clients(head, 2);
  clients[1]->Put(KeyOf(4, 1), "not an address");
  const auto outcomes = RunGeneration(clients, 4, 2, {0}, WithToken(seconds(60)));
  EXPECT_FALSE(outcomes[0].timeout);
  EXPECT_NE(outcomes[0].error.find("rank 1 published a malformed gloo address"), std::string::npos)
      << outcomes[0].error;
}

// Rank 3 of 4 publishes a real address and dies before anyone connects to it:
// a member that waits for it to dial would wait out the rendezvous timeout
// (here 120 s). A newer generation exists 300 ms in (the head saw the death),
// and every survivor gives the rendezvous up within a few polls of that,
// CollectiveAborted naming the abandoned pairs, instead of waiting.
TEST(GlooMeshTest, ARendezvousWaitingForADeadMemberIsAbandonedForANewerGeneration) {
  runtime::Head head(runtime::HeadOptions{});
  auto clients = Clients(head, 4);
  // Which end of a pair dials depends on the ports the kernel hands out: a
  // survivor that dials the dead member fails at once (refused), one that
  // waits for it to dial is the case under test. Generations are tried until
  // one has such a survivor.
  int abandoned = 0;
  for (uint64_t generation = 40; generation < 56 && abandoned == 0; ++generation) {
    DyingMember victim(*clients[3], generation, 3, 4);
    victim.Die();
    std::atomic<bool> superseded{false};
    GlooOptions options = WithToken(seconds(120));
    options.abandoned = [&] { return superseded.load(); };
    std::thread newer([&] {
      std::this_thread::sleep_for(milliseconds(300));
      superseded = true;
    });
    const auto start = std::chrono::steady_clock::now();
    const auto outcomes = RunGeneration(clients, generation, 4, {0, 1, 2}, options);
    const auto took = std::chrono::steady_clock::now() - start;
    newer.join();
    for (int rank : {0, 1, 2}) {
      const Outcome& outcome = outcomes[static_cast<size_t>(rank)];
      EXPECT_FALSE(outcome.sum.has_value())
          << "rank " << rank << " formed a world with a dead peer";
      EXPECT_FALSE(outcome.timeout)
          << "rank " << rank << " waited out the rendezvous: " << outcome.error;
      if (outcome.error.find("abandoned for a newer generation") != std::string::npos) ++abandoned;
      std::printf("generation %llu rank %d: %s\n", static_cast<unsigned long long>(generation),
                  rank, outcome.error.c_str());
    }
    // 120 s is the timeout the abandonment replaces; 30 s leaves a loaded
    // 2-core machine ample room for the 300 ms and the polls.
    EXPECT_LT(took, seconds(30));
  }
  EXPECT_GT(abandoned, 0) << "no survivor ever waited for the dead member to dial";
}

// Rank 3 of 6 publishes a real address and dies: before anyone dials it, or
// after the dialling ends have connected to its listening sockets. Every
// other member fails its creation (or, had it formed, its allreduce) with a
// CollectiveError within the rendezvous timeout rather than hanging; the
// next generation, without rank 3, allreduces.
TEST(GlooMeshTest, AMemberThatDiesHalfwayFailsTheOthersAndTheNextGenerationWorks) {
  runtime::Head head(runtime::HeadOptions{});
  auto clients = Clients(head, 6);
  uint64_t generation = 20;
  for (const bool dies_at_once : {true, false}) {
    ++generation;
    SCOPED_TRACE(dies_at_once ? "dies right after publishing" : "dies while the others connect");
    DyingMember victim(*clients[3], generation, 3, 6);
    if (dies_at_once) victim.Die();
    std::thread killer([&] {
      if (dies_at_once) return;
      // Long enough for the dialling ends to reach its sockets, on most runs;
      // the outcome asserted below is the same either way.
      std::this_thread::sleep_for(milliseconds(300));
      victim.Die();
    });
    const auto outcomes =
        RunGeneration(clients, generation, 6, {0, 1, 2, 4, 5}, WithToken(milliseconds(2000)));
    killer.join();
    bool named = false;
    for (int rank : {0, 1, 2, 4, 5}) {
      const Outcome& outcome = outcomes[static_cast<size_t>(rank)];
      EXPECT_FALSE(outcome.sum.has_value())
          << "rank " << rank << " formed a world with a dead peer";
      EXPECT_FALSE(outcome.error.empty()) << rank;
      named = named || outcome.error.find("rank 3 ") != std::string::npos ||
              outcome.error.find("rank(s) 3") != std::string::npos;
      std::printf("rank %d: %s\n", rank, outcome.error.c_str());
    }
    EXPECT_TRUE(named) << "no survivor named the dead rank 3";

    // The next generation: the five survivors, renumbered 0..4.
    std::vector<std::unique_ptr<runtime::HeadClient>> survivors;
    for (int rank : {0, 1, 2, 4, 5})
      survivors.push_back(std::move(clients[static_cast<size_t>(rank)]));
    const auto next =
        RunGeneration(survivors, ++generation, 5, {0, 1, 2, 3, 4}, WithToken(seconds(60)));
    for (int rank = 0; rank < 5; ++rank) {
      ASSERT_TRUE(next[static_cast<size_t>(rank)].sum.has_value())
          << rank << ": " << next[static_cast<size_t>(rank)].error;
      EXPECT_EQ(*next[static_cast<size_t>(rank)].sum, 15.0f);
    }
    // Back to six clients for the next variant.
    clients = std::move(survivors);
    clients.insert(clients.begin() + 3, ClientOf(head, "member-3"));
  }
}

}  // namespace
}  // namespace elastic::collectives
