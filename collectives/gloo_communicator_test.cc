// The Gloo backend with real processes over real TCP sockets on loopback,
// rendezvousing through a shared key-value store. Child processes are this
// binary re-executed with "--child <role> key=value...".
#include "collectives/gloo_communicator.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

#include "collectives/gloo_pair_proof.h"
#include "collectives/testing/collective_checks.h"
#include "collectives/testing/subprocess.h"
#include "collectives/testing/test_store.h"

namespace elastic::collectives {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ChildProcess;
using Clock = std::chrono::steady_clock;

using Args = std::map<std::string, std::string>;

std::unique_ptr<runtime::KeyValueStore> OpenStore(const Args& args) {
  return testing::OpenStore(args.at("store"), "rank-" + args.at("rank"));
}

// The options of a child: with the cluster token when the parent passed one.
GlooOptions ChildOptions(const Args& args) {
  GlooOptions options;
  if (args.count("token") != 0) options.token = args.at("token");
  return options;
}

constexpr char kToken[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

// ---- child roles -----------------------------------------------------------

// Runs every op, dtype and size, including 64 MiB.
int RunCorrectness(const Args& args) {
  auto store = OpenStore(args);
  GlooCommunicatorFactory factory(*store, ChildOptions(args));
  const Membership m{1, std::stoi(args.at("rank")), std::stoi(args.at("world"))};
  auto comm = factory.Create(m);
  testing::CheckAllOps(*comm, testing::AllDataTypes(), {1, 2, 3, 5, 7, 1000, 65537, 1000003});
  testing::CheckAsyncOverlap(*comm);
  // Every type at 64 MiB with 3 processes (not a divisor of the element
  // counts); float32 only for 2 and 4, to keep the test short.
  testing::CheckLarge(*comm, /*every_type=*/m.size == 3);
  return 0;
}

// Process `id` of 3 takes part in 50 generations; in odd ones process 1 sits out,
// so the world alternates between {0,1,2} and {0,2}. Descriptor and thread
// counts must not grow.
int RunRebuild(const Args& args) {
  auto store = OpenStore(args);
  GlooCommunicatorFactory factory(*store, ChildOptions(args));
  const int id = std::stoi(args.at("id"));
  constexpr int kCycles = 50;
  int fds_at_start = -1, threads_at_start = -1;
  for (int g = 0; g < kCycles; ++g) {
    const bool odd = g % 2 == 1;
    std::vector<int> members = odd ? std::vector<int>{0, 2} : std::vector<int>{0, 1, 2};
    auto it = std::find(members.begin(), members.end(), id);
    if (g == 2) {
      fds_at_start = testing::CountOpenFds();
      threads_at_start = testing::CountThreads();
    }
    if (it == members.end()) continue;
    const Membership m{static_cast<uint64_t>(g), static_cast<int>(it - members.begin()),
                       static_cast<int>(members.size())};
    auto comm = factory.Create(m);
    std::vector<float> data(1000, static_cast<float>(id + 1));
    comm->Allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    float expected = 0;
    for (int member : members) expected += member + 1;
    if (data[999] != expected) {
      std::fprintf(stderr, "generation %d: got %f expected %f\n", g, data[999], expected);
      return 1;
    }
  }
  const int fds = testing::CountOpenFds(), threads = testing::CountThreads();
  std::printf("process %d: fds %d -> %d, threads %d -> %d over %d generations\n", id, fds_at_start,
              fds, threads_at_start, threads, kCycles);
  return fds == fds_at_start && threads == threads_at_start ? 0 : 2;
}

// Allreduces 64 MiB over and over until it fails; reports how long after the
// kill (the parent writes the kill time to a file) the failure came.
int RunUntilPeerDies(const Args& args) {
  auto store = OpenStore(args);
  GlooOptions options;
  options.default_timeout = seconds(300);  // far above the bound the test asserts
  GlooCommunicatorFactory factory(*store, options);
  const int rank = std::stoi(args.at("rank"));
  auto comm = factory.Create({7, rank, std::stoi(args.at("world"))});
  std::vector<float> data((64u << 20) / 4, 1.0f);
  for (int iteration = 0;; ++iteration) {
    try {
      comm->Allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kAverage);
    } catch (const CollectiveError& e) {
      std::printf("rank %d: allreduce %d failed: %s\n", rank, iteration, e.what());
      std::fflush(stdout);
      return 0;
    }
    if (iteration == 0) std::ofstream(args.at("ready") + std::to_string(rank)) << "ready";
  }
}

// Allreduces (or broadcasts from rank 0) 64 MiB over and over with a 300 s
// operation timeout; a watcher thread calls Abort() once the parent creates
// the abort file. The operation in flight then ends, aborted or failed by a
// peer that aborted first; the parent checks that it ends promptly, far
// below the timeout. Prints how long after Abort() it ended.
int RunUntilAborted(const Args& args) {
  auto store = OpenStore(args);
  GlooOptions options;
  options.default_timeout = seconds(300);
  GlooCommunicatorFactory factory(*store, options);
  const int rank = std::stoi(args.at("rank"));
  auto comm = factory.Create({8, rank, std::stoi(args.at("world"))});
  std::vector<float> data(std::stoul(args.count("floats") ? args.at("floats") : "16777216"), 1.0f);
  std::atomic<bool> done{false};
  std::atomic<int64_t> aborted_at_us{0};
  std::thread watcher([&] {
    while (!done && access(args.at("abort").c_str(), F_OK) != 0)
      std::this_thread::sleep_for(milliseconds(5));
    if (done) return;
    aborted_at_us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
            .count();
    comm->Abort();
  });
  for (int iteration = 0;; ++iteration) {
    try {
      if (args.count("op") != 0 && args.at("op") == "broadcast") {
        comm->Broadcast(data.data(), data.size(), DataType::kFloat32, 0);
      } else {
        comm->Allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kAverage);
      }
    } catch (const CollectiveAborted& e) {
      const int64_t now =
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
              .count();
      std::printf("rank %d: operation %d aborted %lld ms after Abort(): %s\n", rank, iteration,
                  static_cast<long long>((now - aborted_at_us) / 1000), e.what());
      break;
    } catch (const CollectiveError& e) {
      std::printf("rank %d: operation %d failed (a peer aborted first): %s\n", rank, iteration,
                  e.what());
      break;
    }
    if (iteration == 0) std::ofstream(args.at("ready") + std::to_string(rank)) << "ready";
  }
  std::fflush(stdout);
  done = true;
  watcher.join();
  return 0;
}

// Joins, waits for the go file, then expects its barrier to fail (rank 0 aborted).
int RunIdlePeer(const Args& args) {
  auto store = OpenStore(args);
  GlooOptions options;
  options.default_timeout = seconds(300);
  auto comm = GlooCommunicatorFactory(*store, options).Create({1, 1, 2});
  while (access(args.at("go").c_str(), F_OK) != 0) std::this_thread::sleep_for(milliseconds(10));
  try {
    comm->Barrier();
  } catch (const CollectiveError& e) {
    std::printf("peer: barrier failed as expected: %s\n", e.what());
    return 0;
  }
  std::fprintf(stderr, "peer: barrier succeeded although rank 0 aborted\n");
  return 3;
}

int RunChild(const std::string& role, const Args& args) {
  try {
    if (role == "correctness") return RunCorrectness(args);
    if (role == "rebuild") return RunRebuild(args);
    if (role == "until_peer_dies") return RunUntilPeerDies(args);
    if (role == "idle_peer") return RunIdlePeer(args);
    if (role == "until_aborted") return RunUntilAborted(args);
    std::fprintf(stderr, "unknown child role %s\n", role.c_str());
    return 64;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %s failed: %s\n", role.c_str(), e.what());
    return 1;
  }
}

// ---- helpers for the parent -------------------------------------------------

std::vector<ChildProcess> SpawnRanks(const std::string& role, int world, const Args& common) {
  std::vector<ChildProcess> children;
  for (int rank = 0; rank < world; ++rank) {
    std::vector<std::string> argv = {"--child", role, "rank=" + std::to_string(rank),
                                     "id=" + std::to_string(rank),
                                     "world=" + std::to_string(world)};
    for (const auto& [key, value] : common) argv.push_back(key + "=" + value);
    children.push_back(ChildProcess::SpawnSelf(argv));
  }
  return children;
}

void ExpectAllSucceed(std::vector<ChildProcess>& children, milliseconds timeout) {
  for (size_t i = 0; i < children.size(); ++i) {
    auto status = children[i].WaitFor(timeout);
    ASSERT_TRUE(status.has_value()) << "process " << i << " hung";
    EXPECT_TRUE(testing::ExitedCleanly(*status))
        << "process " << i << " " << testing::DescribeStatus(*status);
  }
}

// Every test rendezvouses through a real runtime head hosted by the test process.
class GlooCommunicatorTest : public ::testing::Test {
 protected:
  testing::TestHead head_;
  std::string store_dir_ = testing::MakeTempDir("gloo_files_");
  std::unique_ptr<runtime::KeyValueStore> store_ = testing::OpenStore(head_.spec(), "test");
};

// ---- multi-process tests ----------------------------------------------------

TEST_F(GlooCommunicatorTest, EveryOpTypeAndSizeWithTwoProcesses) {
  auto children = SpawnRanks("correctness", 2, {{"store", head_.spec()}});
  ExpectAllSucceed(children, seconds(600));
}

// With the token, so every pair of three processes authenticates first.
TEST_F(GlooCommunicatorTest, EveryOpTypeAndSizeWithThreeProcesses) {
  auto children = SpawnRanks("correctness", 3, {{"store", head_.spec()}, {"token", kToken}});
  ExpectAllSucceed(children, seconds(600));
}

TEST_F(GlooCommunicatorTest, EveryOpTypeAndSizeWithFourProcesses) {
  auto children = SpawnRanks("correctness", 4, {{"store", head_.spec()}});
  ExpectAllSucceed(children, seconds(600));
}

// With the token: the pair proof of each generation leaks nothing either.
TEST_F(GlooCommunicatorTest, FiftyRebuildsOverChangingMembersLeakNothing) {
  auto children = SpawnRanks("rebuild", 3, {{"store", head_.spec()}, {"token", kToken}});
  ExpectAllSucceed(children, seconds(600));
}

TEST_F(GlooCommunicatorTest, KillNineDuringLargeAllreduceFailsEverySurvivorPromptly) {
  const std::string ready = store_dir_ + "/ready_";
  auto children = SpawnRanks("until_peer_dies", 3, {{"store", head_.spec()}, {"ready", ready}});
  // Wait until every rank completed one 64 MiB allreduce, so the kill lands
  // while they are in the middle of the next ones.
  const auto deadline = Clock::now() + seconds(300);
  for (int rank = 0; rank < 3; ++rank) {
    while (access((ready + std::to_string(rank)).c_str(), F_OK) != 0) {
      ASSERT_LT(Clock::now(), deadline) << "rank " << rank << " never completed an allreduce";
      std::this_thread::sleep_for(milliseconds(10));
    }
  }
  std::this_thread::sleep_for(milliseconds(100));
  children[2].Kill(SIGKILL);
  const auto killed_at = Clock::now();
  // The operation timeout is 300 s; survivors must fail because the peer is
  // gone, long before that. 30 s is the generous bound for a loaded 2-core box.
  for (int rank = 0; rank < 2; ++rank) {
    auto status = children[rank].WaitFor(seconds(30));
    ASSERT_TRUE(status.has_value()) << "survivor " << rank << " still blocked 30 s after kill -9";
    EXPECT_TRUE(testing::ExitedCleanly(*status))
        << "survivor " << rank << " " << testing::DescribeStatus(*status);
    std::printf("survivor %d failed its allreduce %lld ms after the kill\n", rank,
                static_cast<long long>(
                    std::chrono::duration_cast<milliseconds>(Clock::now() - killed_at).count()));
  }
}

// A peer that is itself stuck (stopped, so it reads nothing) while the others
// are mid-allreduce: their sends to it fill the socket and wait, their
// receives from it wait. When the view changes every survivor aborts, and each
// must leave its operation at once, whatever it waits on, never at the
// operation's (300 s) timeout. Then the stuck peer is killed, as the spot
// trace does, and the survivors' exits are checked.
void ExpectAbortEndsTheOperationWhenAPeerIsStuck(const std::string& op,
                                                 const std::string& store_dir,
                                                 const std::string& store) {
  SCOPED_TRACE(op);
  const std::string ready = store_dir + "/ready_" + op + "_";
  const std::string abort = store_dir + "/abort_" + op;
  constexpr int kWorld = 4;
  auto children = SpawnRanks("until_aborted", kWorld,
                             {{"store", store}, {"ready", ready}, {"abort", abort}, {"op", op}});
  const auto deadline = Clock::now() + seconds(300);
  for (int rank = 0; rank < kWorld; ++rank) {
    while (access((ready + std::to_string(rank)).c_str(), F_OK) != 0) {
      ASSERT_LT(Clock::now(), deadline) << "rank " << rank << " never completed an allreduce";
      std::this_thread::sleep_for(milliseconds(10));
    }
  }
  children[kWorld - 1].Kill(SIGSTOP);
  // Long enough for every survivor's sends to the stopped peer to fill its
  // socket and for the ring to stall behind it.
  std::this_thread::sleep_for(milliseconds(1500));
  std::ofstream(abort) << "abort";
  for (int rank = 0; rank < kWorld - 1; ++rank) {
    auto status = children[rank].WaitFor(seconds(20));
    ASSERT_TRUE(status.has_value())
        << "rank " << rank << " still in its operation 20 s after Abort()";
    EXPECT_TRUE(testing::ExitedCleanly(*status))
        << "rank " << rank << " " << testing::DescribeStatus(*status);
  }
  children[kWorld - 1].Kill(SIGKILL);
}

// The root's sends to a stopped peer that was mid-way through receiving sit
// in Gloo's transmit queue rather than among its pending sends.
TEST_F(GlooCommunicatorTest, AbortEndsTheOperationWhateverItWaitsOnWhenAPeerIsStuck) {
  ExpectAbortEndsTheOperationWhenAPeerIsStuck("allreduce", store_dir_, head_.spec());
  testing::TestHead other;
  ExpectAbortEndsTheOperationWhenAPeerIsStuck("broadcast", store_dir_, other.spec());
}

// ---- in-process tests (two ranks as two threads of this process) -----------

struct Pair {
  std::unique_ptr<Communicator> a, b;
};

Pair MakePair(runtime::KeyValueStore& store, uint64_t generation, GlooOptions options = {}) {
  GlooCommunicatorFactory factory(store, options);
  Pair pair;
  std::thread other([&] { pair.b = factory.Create({generation, 1, 2}); });
  pair.a = factory.Create({generation, 0, 2});
  other.join();
  return pair;
}

// This process is rank 0; rank 1 is a child that joins, then stays out of the
// allreduce until told (by a file) to try a barrier.
TEST_F(GlooCommunicatorTest, AbortFailsPendingAndFutureOperationsPromptly) {
  const std::string go = store_dir_ + "/go";
  auto peer = ChildProcess::SpawnSelf(
      {"--child", "idle_peer", "rank=1", "world=2", "store=" + head_.spec(), "go=" + go});
  GlooOptions options;
  options.default_timeout = seconds(300);
  auto comm = GlooCommunicatorFactory(*store_, options).Create({1, 0, 2});
  std::vector<float> data(1 << 20, 1.0f);
  auto work = comm->AllreduceAsync(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_FALSE(work->IsCompleted());
  const auto aborted_at = Clock::now();
  comm->Abort();
  EXPECT_THROW(work->Wait(), CollectiveAborted);
  const auto latency = Clock::now() - aborted_at;
  EXPECT_LT(latency, seconds(2)) << "the issue's bound on abort latency";
  std::printf("pending allreduce failed %lld us after Abort()\n",
              static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::microseconds>(latency).count()));
  EXPECT_THROW(comm->Barrier(), CollectiveAborted);
  // The peer is not left waiting either: its next operation fails at once
  // rather than after its 300 s timeout.
  std::ofstream(go) << "go";
  auto status = peer.WaitFor(seconds(30));
  ASSERT_TRUE(status.has_value()) << "the peer of an aborted member is still blocked";
  EXPECT_TRUE(testing::ExitedCleanly(*status)) << testing::DescribeStatus(*status);
}

// Destroying a communicator whose operation waits for a peer that never comes
// must not wait for that operation's (300 s) timeout.
TEST_F(GlooCommunicatorTest, DestroyingWithAPendingOperationIsPrompt) {
  const std::string go = store_dir_ + "/go";
  auto peer = ChildProcess::SpawnSelf(
      {"--child", "idle_peer", "rank=1", "world=2", "store=" + head_.spec(), "go=" + go});
  GlooOptions options;
  options.default_timeout = seconds(300);
  auto comm = GlooCommunicatorFactory(*store_, options).Create({1, 0, 2});
  std::vector<float> data(1000, 1.0f);
  auto work = comm->AllreduceAsync(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
  std::this_thread::sleep_for(milliseconds(200));
  const auto start = Clock::now();
  comm.reset();
  EXPECT_LT(Clock::now() - start, seconds(10));
  EXPECT_THROW(work->Wait(), CollectiveAborted);
  std::ofstream(go) << "go";
  auto status = peer.WaitFor(seconds(30));
  ASSERT_TRUE(status.has_value()) << "the peer of a destroyed member is still blocked";
  EXPECT_TRUE(testing::ExitedCleanly(*status)) << testing::DescribeStatus(*status);
}

TEST_F(GlooCommunicatorTest, OperationTimesOutWhenAPeerNeverJoins) {
  runtime::KeyValueStore& store = *store_;
  Pair pair = MakePair(store, 2);
  std::vector<double> data(10, 1.0);
  EXPECT_THROW(pair.a->Allreduce(data.data(), data.size(), DataType::kFloat64, ReduceOp::kSum,
                                 milliseconds(500)),
               CollectiveTimeout);
  // A timed-out communicator is broken: later operations fail too.
  EXPECT_THROW(pair.a->Barrier(), CollectiveError);
}

TEST_F(GlooCommunicatorTest, RendezvousTimesOutWithAClearErrorWhenAMemberIsMissing) {
  runtime::KeyValueStore& store = *store_;
  GlooOptions options;
  options.rendezvous_timeout = milliseconds(500);
  GlooCommunicatorFactory factory(store, options);
  try {
    factory.Create({3, 0, 2});
    FAIL() << "rendezvous with a missing member succeeded";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("did not appear"), std::string::npos) << e.what();
  }
}

TEST_F(GlooCommunicatorTest, InvalidArgumentsAreRejectedWithoutBreakingTheCommunicator) {
  runtime::KeyValueStore& store = *store_;
  Pair pair = MakePair(store, 4);
  std::vector<float> data(4, 1.0f);
  EXPECT_THROW(pair.a->Broadcast(data.data(), 4, DataType::kFloat32, 2), std::invalid_argument);
  EXPECT_THROW(pair.a->Allreduce(nullptr, 4, DataType::kFloat32, ReduceOp::kSum),
               std::invalid_argument);
  std::thread other([&] { pair.b->Allreduce(data.data(), 4, DataType::kFloat32, ReduceOp::kSum); });
  std::vector<float> mine(4, 2.0f);
  pair.a->Allreduce(mine.data(), 4, DataType::kFloat32, ReduceOp::kSum);
  other.join();
  EXPECT_EQ(mine[3], 3.0f);
}

// ---- pair authentication (two ranks as two threads, real sockets) ----------

TEST(PairProofTest, ProofsAreBoundToDirectionGenerationTagAndNonces) {
  const std::string n0(32, 'a'), n1(32, 'b');
  const PairScope scope{7, "train"};
  const std::string proof = PairProof(kToken, scope, 0, 1, n0, n1);
  EXPECT_EQ(proof.size(), 32u);
  EXPECT_EQ(proof, PairProof(kToken, scope, 0, 1, n0, n1));
  EXPECT_NE(proof, PairProof(kToken, scope, 1, 0, n0, n1)) << "a proof could be reflected";
  EXPECT_NE(proof, PairProof(kToken, {8, "train"}, 0, 1, n0, n1));
  EXPECT_NE(proof, PairProof(kToken, {7, "world"}, 0, 1, n0, n1));
  EXPECT_NE(proof, PairProof(kToken, scope, 0, 2, n0, n1));
  EXPECT_NE(proof, PairProof(kToken, scope, 0, 1, n1, n0));
  EXPECT_NE(proof, PairProof("another token", scope, 0, 1, n0, n1));
}

TEST_F(GlooCommunicatorTest, RanksWithTheSameTokenFormTheCommunicatorAndAllreduce) {
  GlooOptions options;
  options.token = kToken;
  Pair pair = MakePair(*store_, 20, options);
  std::vector<float> a(1000, 1.0f), b(1000, 2.0f);
  std::thread other(
      [&] { pair.b->Allreduce(b.data(), b.size(), DataType::kFloat32, ReduceOp::kSum); });
  pair.a->Allreduce(a.data(), a.size(), DataType::kFloat32, ReduceOp::kSum);
  other.join();
  EXPECT_EQ(a[999], 3.0f);
  EXPECT_EQ(b[0], 3.0f);
}

// The impostor speaks Gloo and the proof perfectly (it even reached the
// rendezvous) but holds another token: the honest rank refuses it at once,
// naming it, rather than handing out a communicator it would feed.
TEST_F(GlooCommunicatorTest, AnImpostorWithAnotherTokenIsRefusedNamingItsRankAndAddress) {
  GlooOptions honest;
  honest.token = kToken;
  honest.rendezvous_timeout = seconds(120);  // far above how long the refusal takes
  GlooOptions impostor = honest;
  impostor.token = std::string(kToken).replace(0, 4, "dead");
  std::string impostor_error;
  std::thread other([&] {
    try {
      GlooCommunicatorFactory(*store_, impostor).Create({21, 1, 2});
    } catch (const CollectiveError& e) {
      impostor_error = e.what();
    }
  });
  try {
    GlooCommunicatorFactory(*store_, honest).Create({21, 0, 2});
    ADD_FAILURE() << "the honest rank formed a communicator with an impostor";
  } catch (const CollectiveTimeout& e) {
    ADD_FAILURE() << "the refusal waited for the timeout: " << e.what();
  } catch (const CollectiveError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("rank 1 (gloo address 127.0.0.1:"), std::string::npos) << message;
    EXPECT_NE(message.find("cluster token"), std::string::npos) << message;
    std::printf("honest rank: %s\n", message.c_str());
  }
  other.join();
  // (The impostor cannot tell the honest rank's proof from a wrong one either.)
  EXPECT_NE(impostor_error.find("rank 0"), std::string::npos) << impostor_error;
}

// A peer that connected but never proves anything (what a process that merely
// reached the pair's port does) fails the creation within the rendezvous
// timeout, with an error naming it.
TEST_F(GlooCommunicatorTest, APeerThatNeverProvesTheTokenIsRefusedWithinTheRendezvousTimeout) {
  GlooOptions honest;
  honest.token = kToken;
  honest.rendezvous_timeout = milliseconds(1500);
  GlooOptions silent = honest;
  silent.token.clear();
  std::unique_ptr<Communicator> silent_comm;
  std::thread other([&] {
    try {
      silent_comm = GlooCommunicatorFactory(*store_, silent).Create({22, 1, 2});
    } catch (const CollectiveError&) {
      // Whether the silent side notices depends on timing; only the honest side is under test.
    }
  });
  try {
    GlooCommunicatorFactory(*store_, honest).Create({22, 0, 2});
    ADD_FAILURE() << "the honest rank formed a communicator with a peer that proved nothing";
  } catch (const CollectiveTimeout& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("rank 1 (gloo address 127.0.0.1:"), std::string::npos) << message;
    EXPECT_NE(message.find("sent no nonce"), std::string::npos) << message;
    std::printf("honest rank: %s\n", message.c_str());
  }
  other.join();
}

void AProgramsOwnHandler(int) {}

// Gloo writes to its pairs without MSG_NOSIGNAL: with SIGPIPE's default action
// a survivor that writes to a peer killed a moment before dies of SIGPIPE
// instead of failing the operation (KillNineDuringLargeAllreduce... above
// did, one run in a few, while its children left SIGPIPE at the default).
TEST_F(GlooCommunicatorTest, AFactoryMakesAWriteToADeadPeerAnErrorNotASignal) {
  struct sigaction saved {};
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &saved), 0);
  ::signal(SIGPIPE, SIG_DFL);
  { GlooCommunicatorFactory factory(*store_); }
  struct sigaction now {};
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  ::close(fds[1]);
  const char byte = 1;
  EXPECT_EQ(::write(fds[0], &byte, 1), -1);  // alive to see it: no SIGPIPE
  EXPECT_EQ(errno, EPIPE);
  ::close(fds[0]);

  // A handler the program installed is its own.
  ::signal(SIGPIPE, AProgramsOwnHandler);
  { GlooCommunicatorFactory factory(*store_); }
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, &AProgramsOwnHandler);
  ::sigaction(SIGPIPE, &saved, nullptr);
}

TEST_F(GlooCommunicatorTest, KeysAreScopedByGenerationAndTag) {
  runtime::KeyValueStore& store = *store_;
  GlooOptions options;
  options.rendezvous_timeout = milliseconds(300);
  // A world-of-one communicator needs no peer; its keys land under g5.
  GlooCommunicatorFactory factory(store, options);
  auto comm = factory.Create({5, 0, 1});
  float x = 4;
  comm->Allreduce(&x, 1, DataType::kFloat32, ReduceOp::kAverage);
  EXPECT_EQ(x, 4.0f);
  EXPECT_TRUE(store.Get(runtime::GenerationKey(5, "gloo/world/0")).has_value());
  EXPECT_FALSE(store.Get(runtime::GenerationKey(4, "gloo/world/0")).has_value());
}

}  // namespace
}  // namespace elastic::collectives

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--child") {
    elastic::collectives::Args args;
    for (int i = 3; i < argc; ++i) {
      const std::string arg = argv[i];
      const auto eq = arg.find('=');
      if (eq != std::string::npos) args[arg.substr(0, eq)] = arg.substr(eq + 1);
    }
    return elastic::collectives::RunChild(argv[2], args);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
