// Control plane at scale, with simulated members (no model, no training).
//
// For each world size M: an in-process head (admit_joins=false, as the
// trainer's driver runs it) and M members, each its own HeadClient (its own
// loop thread and TCP connection over loopback, as a real worker has),
// registered and subscribed to membership updates. The controller (this
// thread, calling head.PublishView as the driver does) publishes the first
// view with all M. Then rounds alternate two changes:
//   failure: one member's HeadClient is destroyed, which closes its
//            connection; the head drops it from the view and publishes the
//            next generation itself (Head::RemoveMember), nobody republishes;
//   join:    a new HeadClient registers (pending, no new generation) and
//            subscribes; once every member has been told of the newcomer, the
//            controller publishes the view with it appended.
// Per round, from the change (just before the client is destroyed / just
// before PublishView):
//   view:       until every member of the new view has seen its generation in
//               its subscription callback (publish + fan-out + decode);
//   rendezvous: until every member of the new view has finished the key-value
//               exchange a Gloo communicator does through the head, started
//               by each member when its callback delivers the view.
// --rendezvous=gloo (default) replays what GlooCommunicator sends through
// the head for rank r of n (collectives/gloo_mesh.h, with its own encoding):
// one AllGather (one KvWaitAll request) that
//   puts     g<g>/gloo/world/<r> = 18 + 2n bytes (IP once, a port per rank)
//   waits    g<g>/gloo/world/<0..n-1> (named by prefix and count), each cut to
//            its 18-byte head and the 2 bytes of its port for r (20 bytes per
//            peer)
// so n requests and about 20 n^2 bytes of values per change (20 n per rank).
// --rendezvous=gloo-fullmesh replays what GlooCommunicator sent before, with
// Debian's Gloo (2022-05-18) connectFullMesh over a store adapter:
//   Get   g<g>/gloo/world/warm                 (GlooCommunicator's warm-up)
//   Put   g<g>/gloo/world/rank_<r> = hostname  (Gloo's local-rank discovery)
//   Wait  g<g>/gloo/world/rank_<i>, i < r
//   Put   g<g>/gloo/world/<r> = (n-1) x 136-byte tcp::Address (one per pair)
//   Wait  g<g>/gloo/world/<i>, twice per peer i != r (store.wait, store.get)
// so 2n keys, about 2.5 n^2 requests and 272 n^3 bytes of replies per change.
// --rendezvous=minimal: one 136-byte key per rank and one Wait per peer (n
// keys, n^2 requests). --rendezvous=none: views only.
//
// Per world size it prints the head's requests and the bytes of values its
// replies carried per change, and at the end the exponents of a least-squares
// fit of log(requests) and log(bytes) against log(M).
//
//   bazel run -c opt //bench:control_plane_bench --
//       --members=8,16,32,64,128,256,512,1024 --rounds=10   (one line)
//
// Every wait has a deadline (--timeout-s per phase of a round); a round that
// misses it is reported as stuck and the remaining rounds of that M are
// skipped. A world size that cannot be set up (threads, file descriptors) is
// reported as such and the larger ones are skipped.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "collectives/gloo_mesh.h"
#include "runtime/head.h"
#include "runtime/head_client.h"
#include "runtime/kv_store.h"
#include "runtime/log.h"
#include "runtime/membership.h"
#include "runtime/options.h"

namespace {

using elastic::runtime::GenerationKey;
using elastic::runtime::Head;
using elastic::runtime::HeadClient;
using elastic::runtime::HeadClientOptions;
using elastic::runtime::HeadOptions;
using elastic::runtime::MembershipUpdate;
using elastic::runtime::MembershipView;
using elastic::runtime::TransportOptions;
using Clock = std::chrono::steady_clock;

// Bytes of one gloo::transport::tcp::Address (sockaddr_storage + sequence number).
constexpr size_t kAddressBytes = sizeof(sockaddr_storage) + sizeof(ssize_t);

enum class RendezvousMode { kGloo, kGlooFullMesh, kMinimal, kNone };

struct Flags {
  std::vector<int> members = {8, 16, 32, 64, 128, 256, 512, 1024};
  int rounds = 20;
  RendezvousMode rendezvous = RendezvousMode::kGloo;
  std::chrono::milliseconds timeout{120000};  // per phase of a round
  uint32_t seed = 1;
  TransportOptions transport;
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

// One simulated member. Slots are allocated before a world starts and never
// move; the subscription callback and the rendezvous thread write their
// arrival times into the atomics, the benchmark thread reads them.
struct Member {
  std::unique_ptr<HeadClient> client;
  std::atomic<uint64_t> id{0};

  // Written by the subscription callback (the client's loop thread).
  std::atomic<uint64_t> updates{0};          // every update seen
  std::atomic<uint64_t> view_generation{0};  // newest generation seen
  std::atomic<int64_t> view_at_ns{0};        // when it was seen
  std::atomic<uint64_t> view_size{0};

  // Hands the newest view's generation and this member's place in it to the
  // rendezvous thread (not the view: copying it would add the benchmark's
  // own O(M) per member to what is measured).
  std::mutex mutex;
  std::condition_variable wake;
  uint64_t generation = 0;  // guarded by mutex, with rank and size
  int rank = -1;
  int size = 0;
  bool stop = false;  // guarded by mutex
  std::string error;  // guarded by mutex: why the last rendezvous failed

  // Written by the rendezvous thread.
  std::atomic<uint64_t> rendezvous_generation{0};  // newest generation handled
  std::atomic<int64_t> rendezvous_at_ns{0};
  std::atomic<bool> rendezvous_failed{false};
  std::atomic<uint64_t> rendezvous_bytes{0};  // bytes of values its replies carried
  std::thread thread;
};

void OnUpdate(Member* member, const MembershipUpdate& update) {
  const int64_t now = NowNs();  // first: the arrival time
  member->updates.fetch_add(1, std::memory_order_relaxed);
  const uint64_t generation = update.view.generation;
  if (generation <= member->view_generation.load(std::memory_order_relaxed)) return;
  {
    std::lock_guard<std::mutex> lock(member->mutex);
    member->generation = generation;
    member->rank = update.view.RankOf(member->id.load());
    member->size = static_cast<int>(update.view.members.size());
  }
  member->view_at_ns.store(now, std::memory_order_relaxed);
  member->view_size.store(update.view.members.size(), std::memory_order_relaxed);
  member->view_generation.store(generation, std::memory_order_release);
  member->wake.notify_one();
}

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// What GlooCommunicator's constructor sent through the head for rank `rank`
// of `size` with Gloo's connectFullMesh (see the comment at the top); returns
// the bytes of values the replies carried.
uint64_t GlooFullMeshRendezvous(HeadClient& kv, uint64_t generation, int rank, int size,
                                const std::string& hostname, Clock::time_point deadline) {
  auto key = [generation](const std::string& name) {
    return GenerationKey(generation, "gloo/world/" + name);
  };
  auto left = [deadline] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  uint64_t received = 0;
  kv.Get(key("warm"));
  kv.Put(key("rank_" + std::to_string(rank)), hostname);
  for (int i = 0; i < rank; ++i)
    received += kv.Wait(key("rank_" + std::to_string(i)), left()).size();
  const size_t bytes = static_cast<size_t>(size - 1) * kAddressBytes;
  kv.Put(key(std::to_string(rank)), std::string(bytes, static_cast<char>('a' + rank % 26)));
  for (int i = 0; i < size; ++i) {
    if (i == rank) continue;
    received += kv.Wait(key(std::to_string(i)), left()).size();             // store.wait
    const std::string addresses = kv.Wait(key(std::to_string(i)), left());  // store.get
    received += addresses.size();
    if (addresses.size() != bytes) {
      throw std::runtime_error("rank " + std::to_string(i) + " published " +
                               std::to_string(addresses.size()) + " address bytes, expected " +
                               std::to_string(bytes));
    }
  }
  return received;
}

// What GlooCommunicator's constructor sends through the head for rank `rank`
// of `size` now (GlooMeshContext::Connect, see the comment at the top);
// returns the bytes of values the replies carried.
uint64_t GlooRendezvous(HeadClient& kv, uint64_t generation, int rank, int size,
                        Clock::time_point deadline) {
  elastic::collectives::MeshAddress address;
  auto* in = reinterpret_cast<sockaddr_in*>(&address.host);
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Ports as a device on loopback would have them: one per peer, never 0.
  for (int i = 0; i < size; ++i)
    address.ports.push_back(i == rank ? 0 : htons(static_cast<uint16_t>(20000 + i)));
  const auto left =
      std::max(std::chrono::milliseconds(1),
               std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  const std::vector<std::string> slices =
      kv.AllGather(GenerationKey(generation, "gloo/world/"), static_cast<size_t>(rank),
                   static_cast<size_t>(size), elastic::collectives::EncodeMeshAddress(address),
                   left, elastic::collectives::MeshSliceRanges(rank));
  uint64_t received = 0;
  for (int i = 0; i < size; ++i) {
    received += slices[static_cast<size_t>(i)].size();
    sockaddr_storage peer{};
    if (i != rank &&
        !elastic::collectives::DecodeMeshSlice(slices[static_cast<size_t>(i)], &peer)) {
      throw std::runtime_error("rank " + std::to_string(i) + " published a malformed address");
    }
  }
  return received;
}

// One address per rank, each rank reads all others once.
uint64_t MinimalRendezvous(HeadClient& kv, uint64_t generation, int rank, int size,
                           Clock::time_point deadline) {
  uint64_t received = 0;
  auto key = [generation](int r) { return GenerationKey(generation, "addr/" + std::to_string(r)); };
  kv.Put(key(rank), std::string(kAddressBytes, 'a'));
  for (int i = 0; i < size; ++i) {
    if (i == rank) continue;
    const auto left =
        std::max(std::chrono::milliseconds(1),
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    received += kv.Wait(key(i), left).size();
  }
  return received;
}

// The member's own thread: rendezvous for every new view it is part of.
void RendezvousLoop(Member* member, const Flags& flags, const std::string& hostname) {
  uint64_t handled = 0;
  for (;;) {
    uint64_t generation = 0;
    int rank = -1, size = 0;
    {
      std::unique_lock<std::mutex> lock(member->mutex);
      member->wake.wait(lock, [&] { return member->stop || member->generation > handled; });
      if (member->stop) return;
      generation = member->generation;
      rank = member->rank;
      size = member->size;
    }
    handled = generation;
    if (rank < 0 || flags.rendezvous == RendezvousMode::kNone) continue;
    const auto deadline = Clock::now() + flags.timeout;
    try {
      uint64_t received = 0;
      switch (flags.rendezvous) {
        case RendezvousMode::kGloo:
          received = GlooRendezvous(*member->client, generation, rank, size, deadline);
          break;
        case RendezvousMode::kGlooFullMesh:
          received =
              GlooFullMeshRendezvous(*member->client, generation, rank, size, hostname, deadline);
          break;
        case RendezvousMode::kMinimal:
          received = MinimalRendezvous(*member->client, generation, rank, size, deadline);
          break;
        case RendezvousMode::kNone:
          break;
      }
      member->rendezvous_at_ns.store(NowNs(), std::memory_order_relaxed);
      member->rendezvous_bytes.store(received, std::memory_order_relaxed);
      member->rendezvous_failed.store(false, std::memory_order_relaxed);
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(member->mutex);
        member->error = e.what();
      }
      member->rendezvous_failed.store(true, std::memory_order_relaxed);
    }
    member->rendezvous_generation.store(generation, std::memory_order_release);
  }
}

// CPU seconds used so far by this process's threads named `name` (the head's
// loop thread is "head"), from /proc/self/task/*/stat; 0 when unreadable.
double ThreadCpuSeconds(const std::string& name) {
  double seconds = 0;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return 0;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  while (const dirent* task = readdir(tasks)) {
    if (task->d_name[0] == '.') continue;
    const std::string dir = std::string("/proc/self/task/") + task->d_name;
    std::ifstream comm_file(dir + "/comm");
    std::string comm;
    if (!std::getline(comm_file, comm) || comm != name) continue;
    std::ifstream stat_file(dir + "/stat");
    std::string stat;
    if (!std::getline(stat_file, stat) || stat.rfind(')') == std::string::npos) continue;
    // After "pid (comm) ": state is field 3; utime and stime are fields 14, 15.
    std::istringstream fields(stat.substr(stat.rfind(')') + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    seconds += (utime + stime) / ticks;
  }
  closedir(tasks);
  return seconds;
}

void StopThread(Member* member) {
  {
    std::lock_guard<std::mutex> lock(member->mutex);
    member->stop = true;
  }
  member->wake.notify_one();
  if (member->thread.joinable()) member->thread.join();
}

// Waits until every member in `who` has reached `generation` in the field
// `generation_of`; returns false at the deadline. *latest_ns: the newest of
// their `at` times; *arrived: how many made it.
bool WaitAll(const std::vector<Member*>& who, uint64_t generation,
             std::atomic<uint64_t> Member::*generation_of, std::atomic<int64_t> Member::*at,
             Clock::time_point deadline, int64_t* latest_ns, size_t* arrived) {
  for (;;) {
    size_t count = 0;
    int64_t latest = 0;
    for (Member* member : who) {
      if ((member->*generation_of).load(std::memory_order_acquire) >= generation) {
        ++count;
        latest = std::max(latest, (member->*at).load(std::memory_order_relaxed));
      }
    }
    *arrived = count;
    *latest_ns = latest;
    if (count == who.size()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

long CountOpenFds() {
  long count = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (readdir(dir) != nullptr) ++count;
    closedir(dir);
    count -= 3;  // ".", ".." and the directory's own fd
  }
  return count;
}

long CountThreads() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atol(line.c_str() + 8);
  }
  return -1;
}

std::string Resources() {
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  rlimit procs{};
  getrlimit(RLIMIT_NPROC, &procs);
  std::ostringstream out;
  out << "open fds " << CountOpenFds() << " of RLIMIT_NOFILE " << files.rlim_cur << ", threads "
      << CountThreads() << " (RLIMIT_NPROC "
      << (procs.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                          : std::to_string(procs.rlim_cur))
      << ")";
  return out.str();
}

struct Round {
  bool join = false;
  bool ok = false;
  double view_ms = 0;
  double rendezvous_ms = 0;
  uint64_t head_messages = 0;  // envelopes the head received during the round
  uint64_t reply_bytes = 0;    // bytes of values the rendezvous replies carried, all members
  double head_cpu_ms = 0;      // CPU time of the head's loop thread during the round
};

struct WorldResult {
  int members = 0;
  std::string problem;  // why it stopped early, empty when all rounds ran
  bool set_up = false;
  double setup_s = 0;
  long threads = 0;
  long fds = 0;
  std::vector<Round> rounds;
};

// The slope of log(y) against log(x), least squares: y ~ x^slope.
double FitExponent(const std::vector<double>& x, const std::vector<double>& y) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (x[i] <= 0 || y[i] <= 0) continue;
    const double lx = std::log(x[i]), ly = std::log(y[i]);
    n += 1;
    sx += lx;
    sy += ly;
    sxx += lx * lx;
    sxy += lx * ly;
  }
  const double denominator = n * sxx - sx * sx;
  return n < 2 || denominator == 0 ? 0 : (n * sxy - sx * sy) / denominator;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  // Nearest rank: with 20 rounds, p99 is the largest.
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(values.size())));
  rank = std::min(std::max<size_t>(rank, 1), values.size());
  return values[rank - 1];
}

class World {
 public:
  World(const Flags& flags, int size, WorldResult* result)
      : flags_(flags), size_(size), result_(result), random_(flags.seed) {
    HeadOptions options;
    options.admit_joins = false;
    options.transport = flags.transport;
    head_ = std::make_unique<Head>(options);
    slots_.reserve(static_cast<size_t>(size + flags.rounds / 2 + 1));
    for (int i = 0; i < size + flags.rounds / 2 + 1; ++i)
      slots_.push_back(std::make_unique<Member>());
  }

  ~World() {
    for (auto& slot : slots_) StopThread(slot.get());
    // The head first: clients closed one by one while it serves would each
    // make it send every other member a view of all (M^3 bytes in all; at
    // 1,024 members more memory than the machine has).
    head_.reset();
    for (auto& slot : slots_) slot->client.reset();
  }

  void Run() {
    const auto setup_start = Clock::now();
    // Register everyone first, then subscribe: otherwise every registration
    // is broadcast to all earlier subscribers (M^2 updates of O(M) each).
    for (int i = 0; i < size_; ++i) {
      if (!Connect(i)) return;
    }
    for (int i = 0; i < size_; ++i) {
      if (!Subscribe(i)) return;
    }
    next_slot_ = size_;
    std::vector<uint64_t> ids;
    for (int i = 0; i < size_; ++i) {
      ids.push_back(slots_[static_cast<size_t>(i)]->id.load());
      view_.push_back(slots_[static_cast<size_t>(i)].get());
    }
    // The first view and its rendezvous: the warm-up, not measured.
    const uint64_t generation = head_->PublishView(ids).generation;
    if (!WaitPhase(generation, "first view")) return;
    result_->set_up = true;
    result_->setup_s = std::chrono::duration<double>(Clock::now() - setup_start).count();
    result_->threads = CountThreads();
    result_->fds = CountOpenFds();
    std::fprintf(stderr, "  M=%d set up in %.1f s: %s\n", size_, result_->setup_s,
                 Resources().c_str());

    for (int round = 1; round <= flags_.rounds; ++round) {
      const bool join = round % 2 == 0;
      Round measured;
      measured.join = join;
      const bool ok = join ? JoinRound(&measured) : FailRound(&measured);
      if (!ok) return;
      measured.ok = true;
      result_->rounds.push_back(measured);
    }
  }

 private:
  bool Fail(const std::string& what) {
    result_->problem = what;
    std::fprintf(stderr, "  M=%d: %s\n", size_, what.c_str());
    return false;
  }

  // Connects and registers slot i; false (with the reason recorded) when it
  // cannot, e.g. out of threads or file descriptors.
  bool Connect(int i) {
    Member* member = slots_[static_cast<size_t>(i)].get();
    try {
      HeadClientOptions options;
      options.port = head_->port();
      options.token = head_->token();
      options.name = "sim-" + std::to_string(i);
      options.transport = flags_.transport;
      member->client = std::make_unique<HeadClient>(options);
      member->id.store(member->client->RegisterMember(options.name, 0, {"127.0.0.1", 0}));
      member->thread = std::thread(RendezvousLoop, member, std::cref(flags_), std::cref(hostname_));
    } catch (const std::system_error& e) {
      return Fail("cannot scale to " + std::to_string(size_) + " members: member " +
                  std::to_string(i) + " could not start a thread or socket (" + e.what() + "); " +
                  Resources());
    } catch (const std::exception& e) {
      return Fail("cannot scale to " + std::to_string(size_) + " members: member " +
                  std::to_string(i) + " could not connect (" + e.what() + "); " + Resources());
    }
    return true;
  }

  bool Subscribe(int i) {
    Member* member = slots_[static_cast<size_t>(i)].get();
    try {
      member->client->Subscribe(
          [member](const MembershipUpdate& update) { OnUpdate(member, update); });
    } catch (const std::exception& e) {
      return Fail("member " + std::to_string(i) + " could not subscribe: " + e.what());
    }
    return true;
  }

  // Waits for the view and rendezvous of `generation` at every member of
  // view_, without measuring (set-up).
  bool WaitPhase(uint64_t generation, const std::string& what) {
    int64_t latest = 0;
    size_t arrived = 0;
    if (!WaitAll(view_, generation, &Member::view_generation, &Member::view_at_ns,
                 Clock::now() + flags_.timeout, &latest, &arrived)) {
      return Fail(what + ": only " + std::to_string(arrived) + " of " +
                  std::to_string(view_.size()) + " members saw generation " +
                  std::to_string(generation) + " within the timeout");
    }
    if (flags_.rendezvous == RendezvousMode::kNone) return true;
    if (!WaitAll(view_, generation, &Member::rendezvous_generation, &Member::rendezvous_at_ns,
                 Clock::now() + flags_.timeout, &latest, &arrived)) {
      return Fail(what + ": rendezvous stuck, " + std::to_string(arrived) + " of " +
                  std::to_string(view_.size()) + " members done within the timeout");
    }
    return CheckRendezvous(what);
  }

  bool CheckRendezvous(const std::string& what) {
    for (Member* member : view_) {
      if (member->rendezvous_failed.load()) {
        std::lock_guard<std::mutex> lock(member->mutex);
        return Fail(what + ": rendezvous of member " + std::to_string(member->id.load()) +
                    " failed: " + member->error);
      }
    }
    return true;
  }

  // From `start_ns`, waits for every member of view_ to see `generation`,
  // then to finish its rendezvous; fills the round's times.
  bool Measure(int64_t start_ns, uint64_t generation, uint64_t messages_before,
               const std::string& what, Round* round) {
    const double head_cpu_before = ThreadCpuSeconds("head");
    int64_t latest = 0;
    size_t arrived = 0;
    if (!WaitAll(view_, generation, &Member::view_generation, &Member::view_at_ns,
                 Clock::now() + flags_.timeout, &latest, &arrived)) {
      return Fail(what + " stuck: " + std::to_string(arrived) + " of " +
                  std::to_string(view_.size()) + " members saw generation " +
                  std::to_string(generation) + " within " + std::to_string(flags_.timeout.count()) +
                  " ms; skipping the remaining rounds");
    }
    round->view_ms = Ms(latest - start_ns);
    for (Member* member : view_) {
      if (member->view_size.load() != view_.size()) {
        return Fail(what + ": member " + std::to_string(member->id.load()) + " saw a view of " +
                    std::to_string(member->view_size.load()) + " members, expected " +
                    std::to_string(view_.size()));
      }
    }
    if (flags_.rendezvous != RendezvousMode::kNone) {
      if (!WaitAll(view_, generation, &Member::rendezvous_generation, &Member::rendezvous_at_ns,
                   Clock::now() + flags_.timeout, &latest, &arrived)) {
        return Fail(what + " rendezvous stuck: " + std::to_string(arrived) + " of " +
                    std::to_string(view_.size()) + " members done within " +
                    std::to_string(flags_.timeout.count()) + " ms; skipping the remaining rounds");
      }
      if (!CheckRendezvous(what)) return false;
      round->rendezvous_ms = Ms(latest - start_ns);
      for (Member* member : view_) round->reply_bytes += member->rendezvous_bytes.load();
    }
    round->head_messages = head_->stats().messages_received - messages_before;
    round->head_cpu_ms = 1000 * (ThreadCpuSeconds("head") - head_cpu_before);
    return true;
  }

  // A member dies: its client is destroyed, its connection closes, the head
  // publishes the next generation without it.
  bool FailRound(Round* round) {
    std::uniform_int_distribution<size_t> pick(0, view_.size() - 1);
    const size_t victim_index = pick(random_);
    Member* victim = view_[victim_index];
    StopThread(victim);  // idle: the previous rendezvous is done
    const uint64_t generation = head_->Membership().view.generation + 1;
    view_.erase(view_.begin() + static_cast<std::ptrdiff_t>(victim_index));
    const uint64_t messages_before = head_->stats().messages_received;

    const int64_t start_ns = NowNs();
    victim->client.reset();
    return Measure(start_ns, generation, messages_before,
                   "failure round " + std::to_string(result_->rounds.size() + 1), round);
  }

  // A member joins: registers as pending and subscribes; once everyone has
  // heard of it, the controller publishes the view with it appended.
  bool JoinRound(Round* round) {
    if (next_slot_ >= static_cast<int>(slots_.size())) return Fail("out of preallocated slots");
    const int index = next_slot_++;
    std::vector<uint64_t> told_before;
    for (Member* member : view_) told_before.push_back(member->updates.load());
    if (!Connect(index) || !Subscribe(index)) return false;
    Member* newcomer = slots_[static_cast<size_t>(index)].get();
    // Let the "joined" broadcast drain so that it is not counted in the publish.
    const auto deadline = Clock::now() + flags_.timeout;
    for (size_t i = 0; i < view_.size(); ++i) {
      while (view_[i]->updates.load() <= told_before[i]) {
        if (Clock::now() >= deadline) return Fail("join announcement did not reach everyone");
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    std::vector<uint64_t> ids;
    for (Member* member : view_) ids.push_back(member->id.load());
    ids.push_back(newcomer->id.load());
    view_.push_back(newcomer);
    const uint64_t messages_before = head_->stats().messages_received;

    const int64_t start_ns = NowNs();
    uint64_t generation = 0;
    try {
      generation = head_->PublishView(ids).generation;
    } catch (const std::exception& e) {
      return Fail(std::string("publish failed: ") + e.what());
    }
    return Measure(start_ns, generation, messages_before,
                   "join round " + std::to_string(result_->rounds.size() + 1), round);
  }

  const Flags& flags_;
  const int size_;
  WorldResult* result_;
  std::mt19937 random_;
  const std::string hostname_ = Hostname();
  std::unique_ptr<Head> head_;
  std::vector<std::unique_ptr<Member>> slots_;
  int next_slot_ = 0;
  std::vector<Member*> view_;  // the current view, in rank order
};

std::vector<int> ParseList(const std::string& text) {
  std::vector<int> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const int value = std::atoi(item.c_str());
    if (value < 2) throw std::invalid_argument("--members: each size must be at least 2");
    values.push_back(value);
  }
  if (values.empty()) throw std::invalid_argument("--members is empty");
  return values;
}

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  // The trainer's default --heartbeat-timeout (3 s), not the runtime's 1 s,
  // and its heartbeat interval, a tenth of it (trainer/elastic/controller/driver.cc).
  flags.transport.heartbeat_timeout = std::chrono::milliseconds(3000);
  flags.transport.heartbeat_interval = std::chrono::milliseconds(300);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (elastic::runtime::ParseTransportFlag(arg, &flags.transport)) continue;
    if (arg.rfind("--members=", 0) == 0) {
      flags.members = ParseList(arg.substr(10));
    } else if (arg.rfind("--rounds=", 0) == 0) {
      flags.rounds = std::atoi(arg.c_str() + 9);
      if (flags.rounds < 1) throw std::invalid_argument("--rounds must be at least 1");
    } else if (arg.rfind("--timeout-s=", 0) == 0) {
      flags.timeout =
          std::chrono::milliseconds(static_cast<int64_t>(std::atof(arg.c_str() + 12) * 1000));
      if (flags.timeout.count() <= 0) throw std::invalid_argument("--timeout-s must be positive");
    } else if (arg.rfind("--seed=", 0) == 0) {
      flags.seed = static_cast<uint32_t>(std::strtoul(arg.c_str() + 7, nullptr, 10));
    } else if (arg == "--rendezvous=gloo") {
      flags.rendezvous = RendezvousMode::kGloo;
    } else if (arg == "--rendezvous=gloo-fullmesh") {
      flags.rendezvous = RendezvousMode::kGlooFullMesh;
    } else if (arg == "--rendezvous=minimal") {
      flags.rendezvous = RendezvousMode::kMinimal;
    } else if (arg == "--rendezvous=none") {
      flags.rendezvous = RendezvousMode::kNone;
    } else if (arg == "--help" || arg == "-h") {
      std::printf(
          "control_plane_bench [flags]\n"
          "  --members=8,16,32,64,128,256,512,1024  world sizes\n"
          "  --rounds=20                   membership changes per size (failure, join, ...)\n"
          "  --rendezvous=gloo|gloo-fullmesh|minimal|none  key-value exchange after each view\n"
          "                                (default gloo: GlooCommunicator's; gloo-fullmesh: the\n"
          "                                one it made with Gloo's connectFullMesh before)\n"
          "  --timeout-s=120               deadline of each phase of a round\n"
          "  --seed=1                      which members fail\n"
          "transport (default --heartbeat-ms=300 --heartbeat-timeout-ms=3000, the trainer's):\n%s",
          elastic::runtime::TransportFlagsHelp().c_str());
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown flag " + arg + " (try --help)");
    }
  }
  return flags;
}

const char* ModeName(RendezvousMode mode) {
  switch (mode) {
    case RendezvousMode::kGloo:
      return "gloo";
    case RendezvousMode::kGlooFullMesh:
      return "gloo-fullmesh";
    case RendezvousMode::kMinimal:
      return "minimal";
    case RendezvousMode::kNone:
      return "none";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  try {
    flags = ParseFlags(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "control_plane_bench: %s\n", e.what());
    return 2;
  }
  elastic::runtime::SetMinLogLevel(elastic::runtime::LogLevel::kError);

  // Each member costs a loop thread, a rendezvous thread, a socket on each
  // side and its loop's epoll descriptors: raise the soft fd limit to the hard.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    const rlim_t before = files.rlim_cur;
    files.rlim_cur = files.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &files) != 0) {
      std::fprintf(stderr, "cannot raise RLIMIT_NOFILE from %llu: %s\n",
                   static_cast<unsigned long long>(before), std::strerror(errno));
    }
  }
  std::printf(
      "control_plane_bench: in-process head (admit_joins=false), simulated members over "
      "loopback TCP, %d rounds per size (failure, join, ...), rendezvous=%s, heartbeat %lld ms / "
      "timeout %lld ms, %u cores; %s\n\n",
      flags.rounds, ModeName(flags.rendezvous),
      static_cast<long long>(flags.transport.heartbeat_interval.count()),
      static_cast<long long>(flags.transport.heartbeat_timeout.count()),
      std::thread::hardware_concurrency(), Resources().c_str());
  std::fflush(stdout);

  std::vector<WorldResult> results;
  for (int members : flags.members) {
    std::fprintf(stderr, "M=%d ...\n", members);
    WorldResult result;
    result.members = members;
    try {
      World world(flags, members, &result);
      world.Run();
    } catch (const std::exception& e) {
      result.problem = std::string("aborted: ") + e.what() + "; " + Resources();
    }
    results.push_back(result);
    if (!result.set_up) {
      std::fprintf(stderr, "M=%d did not get through its set-up; skipping larger sizes\n", members);
      break;
    }
  }

  std::printf(
      "| members | rounds ok | view p50 (ms) | view p99 (ms) | view+rendezvous p50 (ms) | "
      "view+rendezvous p99 (ms) | head requests per change | reply bytes per change | head CPU "
      "per change (ms) | setup (s) | threads | fds |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  const bool with_rendezvous = flags.rendezvous != RendezvousMode::kNone;
  // Per world size that ran rounds: M, requests and bytes per change, for the fits.
  std::vector<double> sizes, requests, bytes;
  for (const WorldResult& result : results) {
    if (result.rounds.empty()) {
      std::printf("| %d | 0/%d | - | - | - | - | - | - | - | - | - | - |\n", result.members,
                  flags.rounds);
      continue;
    }
    std::vector<double> view, rendezvous;
    uint64_t messages = 0, reply_bytes = 0;
    double head_cpu_ms = 0;
    for (const Round& round : result.rounds) {
      head_cpu_ms += round.head_cpu_ms;
      view.push_back(round.view_ms);
      rendezvous.push_back(round.rendezvous_ms);
      messages += round.head_messages;
      reply_bytes += round.reply_bytes;
    }
    const uint64_t rounds = result.rounds.size();
    char rdv50[32] = "-", rdv99[32] = "-";
    if (with_rendezvous) {
      std::snprintf(rdv50, sizeof(rdv50), "%.1f", Percentile(rendezvous, 0.50));
      std::snprintf(rdv99, sizeof(rdv99), "%.1f", Percentile(rendezvous, 0.99));
    }
    std::printf(
        "| %d | %zu/%d | %.2f | %.2f | %s | %s | %llu | %llu | %.0f | %.1f | %ld | %ld |\n",
        result.members, result.rounds.size(), flags.rounds, Percentile(view, 0.50),
        Percentile(view, 0.99), rdv50, rdv99, static_cast<unsigned long long>(messages / rounds),
        static_cast<unsigned long long>(reply_bytes / rounds),
        head_cpu_ms / static_cast<double>(rounds), result.setup_s, result.threads, result.fds);
    sizes.push_back(result.members);
    requests.push_back(static_cast<double>(messages) / static_cast<double>(rounds));
    bytes.push_back(static_cast<double>(reply_bytes) / static_cast<double>(rounds));
  }
  for (const WorldResult& result : results) {
    if (!result.problem.empty())
      std::printf("\nM=%d: %s\n", result.members, result.problem.c_str());
  }
  std::printf(
      "\nview: change -> every member's callback has the new generation; view+rendezvous: change "
      "-> every member has every peer's address; head requests: envelopes the head received from "
      "the change to the end of the rendezvous (heartbeats excluded; a failure round's own close "
      "and a join round's publish are not requests); reply bytes: bytes of values in the "
      "rendezvous replies, all members; head CPU: CPU time of the head's one loop thread from the "
      "change to the end of the rendezvous (heartbeats included), mean over rounds; p99 over %d "
      "rounds is the nearest rank\n",
      flags.rounds);
  if (with_rendezvous && sizes.size() >= 2) {
    std::printf(
        "fitted exponent (least squares on log-log over M = %g..%g): head requests per "
        "change ~ M^%.2f",
        sizes.front(), sizes.back(), FitExponent(sizes, requests));
    std::printf(", reply bytes per change ~ M^%.2f", FitExponent(sizes, bytes));
    std::printf("\n");
  }
  bool all_done = results.size() == flags.members.size();
  for (const WorldResult& result : results) all_done = all_done && result.problem.empty();
  bool any = false;
  for (const WorldResult& result : results) {
    if (!result.problem.empty() || result.rounds.empty()) continue;
    any = true;
    std::vector<double> view, rendezvous;
    for (const Round& round : result.rounds) {
      view.push_back(round.view_ms);
      rendezvous.push_back(round.rendezvous_ms);
    }
    if (result.members == 256 || result.members == 1024) {
      std::printf("at %d members: view p50 %.1f ms", result.members, Percentile(view, 0.50));
      if (with_rendezvous) {
        std::printf(", view+rendezvous (%s) p50 %.1f ms, p99 %.1f ms (target p50 < %s)",
                    ModeName(flags.rendezvous), Percentile(rendezvous, 0.50),
                    Percentile(rendezvous, 0.99), result.members == 256 ? "250 ms" : "1 s");
      }
      std::printf("\n");
    }
  }
  if (!any) {
    std::printf("no world size completed all rounds\n");
    return 1;
  }
  return all_done ? 0 : 1;
}
