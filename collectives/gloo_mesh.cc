#include "collectives/gloo_mesh.h"

#include <arpa/inet.h>
#include <gloo/transport/context.h>
#include <gloo/transport/tcp/address.h>
#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "collectives/types.h"

namespace elastic::collectives {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint8_t kFormat = 1;
constexpr size_t kPortBytes = sizeof(uint16_t);
constexpr uint8_t kFamilyV4 = 4;
constexpr uint8_t kFamilyV6 = 6;

// Where an address's IP and port lie in a sockaddr_storage of its family.
struct Fields {
  void* ip = nullptr;
  size_t ip_bytes = 0;
  uint16_t* port = nullptr;
};

Fields FieldsOf(sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&address);
    return {&in->sin_addr, sizeof(in->sin_addr), &in->sin_port};
  }
  if (address.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&address);
    return {&in6->sin6_addr, sizeof(in6->sin6_addr), &in6->sin6_port};
  }
  return {};
}

// Whether this end of a pair dials: Gloo's own rule (tcp::Pair::connect
// compares the IPs, then the ports as stored, in network byte order).
bool Dials(sockaddr_storage self, sockaddr_storage peer) {
  const Fields mine = FieldsOf(self), theirs = FieldsOf(peer);
  const int by_ip = std::memcmp(mine.ip, theirs.ip, mine.ip_bytes);
  if (by_ip != 0) return by_ip > 0;
  return static_cast<int>(*mine.port) - static_cast<int>(*theirs.port) > 0;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  if (ranks.size() > 16) out += " and " + std::to_string(ranks.size() - 16) + " more";
  return out;
}

// Closes the pair being connected once the deadline passes: Gloo waits up to
// five times a pair's timeout for a connection (tcp::Pair::waitUntil), and
// the rendezvous has one deadline, not one per pair. A closed pair ends
// Gloo's wait; Connect then reports the timeout.
// Closes the pair being connected when the deadline passes or the
// rendezvous is abandoned, so that a blocking Pair::connect returns (with an
// error) instead of waiting for a peer that will never dial.
class ConnectWatchdog {
 public:
  ConnectWatchdog(gloo::transport::Context& context, Clock::time_point deadline,
                  std::function<bool()> abandoned)
      : context_(context),
        abandoned_(std::move(abandoned)),
        thread_([this, deadline] { Watch(deadline); }) {}
  ~ConnectWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  // Call before connecting the pair with `peer`; true when the watchdog has
  // fired (then do not connect).
  bool Begin(int peer) {
    current_.store(peer);
    return fired_.load();
  }
  bool fired() const { return fired_.load(); }
  // Fired because the rendezvous was abandoned, not at the deadline.
  bool abandoned() const { return was_abandoned_.load(); }

 private:
  // How often `abandoned_` is asked: far below the heartbeat timeout that
  // bounds how long a member may stay in a superseded generation.
  static constexpr std::chrono::milliseconds kPoll{20};

  void Watch(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      const Clock::time_point until =
          abandoned_ ? std::min(deadline, Clock::now() + kPoll) : deadline;
      if (wake_.wait_until(lock, until, [this] { return done_; })) return;
      if (abandoned_ && abandoned_()) {
        was_abandoned_.store(true);
        break;
      }
      if (Clock::now() >= deadline) break;
    }
    // Set first: a Begin that follows sees it; one that came before left its
    // peer in current_.
    fired_.store(true);
    const int peer = current_.load();
    if (peer >= 0) context_.getPair(peer)->close();
  }

  gloo::transport::Context& context_;
  const std::function<bool()> abandoned_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::atomic<bool> fired_{false};
  std::atomic<bool> was_abandoned_{false};
  std::atomic<int> current_{-1};
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace

std::string EncodeMeshAddress(const MeshAddress& address) {
  sockaddr_storage host = address.host;
  const Fields fields = FieldsOf(host);
  std::string out(kMeshAddressHeadBytes + kPortBytes * address.ports.size(), '\0');
  out[0] = static_cast<char>(kFormat);
  out[1] = static_cast<char>(host.ss_family == AF_INET6 ? kFamilyV6 : kFamilyV4);
  if (fields.ip != nullptr) std::memcpy(&out[2], fields.ip, fields.ip_bytes);
  for (size_t i = 0; i < address.ports.size(); ++i) {
    std::memcpy(&out[kMeshAddressHeadBytes + kPortBytes * i], &address.ports[i], kPortBytes);
  }
  return out;
}

bool DecodeMeshSlice(const std::string& slice, sockaddr_storage* peer) {
  if (slice.size() != kMeshAddressHeadBytes + kPortBytes) return false;
  if (static_cast<uint8_t>(slice[0]) != kFormat) return false;
  const uint8_t family = static_cast<uint8_t>(slice[1]);
  if (family != kFamilyV4 && family != kFamilyV6) return false;
  *peer = sockaddr_storage{};
  peer->ss_family = family == kFamilyV4 ? AF_INET : AF_INET6;
  const Fields fields = FieldsOf(*peer);
  std::memcpy(fields.ip, &slice[2], fields.ip_bytes);
  std::memcpy(fields.port, &slice[kMeshAddressHeadBytes], kPortBytes);
  return *fields.port != 0;
}

std::vector<runtime::ByteRange> MeshSliceRanges(int rank) {
  return {{0, kMeshAddressHeadBytes},
          {kMeshAddressHeadBytes + kPortBytes * static_cast<size_t>(rank), kPortBytes}};
}

std::string FormatSockaddr(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "an address of family " + std::to_string(address.ss_family);
}

GlooMeshContext::GlooMeshContext(int rank, int size)
    : gloo::Context(rank, size), peers_(static_cast<size_t>(size)) {}

std::string GlooMeshContext::DescribePeer(int peer) const {
  std::string where = "unknown address";
  if (peer >= 0 && peer < size && peers_[static_cast<size_t>(peer)].ss_family != 0) {
    where = "gloo address " + FormatSockaddr(peers_[static_cast<size_t>(peer)]);
  }
  return "rank " + std::to_string(peer) + " (" + where + ")";
}

void GlooMeshContext::Connect(runtime::KeyValueStore& store, const std::string& key_prefix,
                              const std::shared_ptr<gloo::transport::Device>& device,
                              std::chrono::milliseconds timeout, const std::string& what,
                              const std::function<bool()>& abandoned) {
  const auto deadline = Clock::now() + timeout;
  auto transport = device->createContext(rank, size);
  transport->setTimeout(timeout);

  // Every pair listens from its creation: a peer may dial it as soon as it
  // reads the address below.
  MeshAddress mine;
  mine.ports.assign(static_cast<size_t>(size), 0);
  sockaddr_storage self{};
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const gloo::transport::tcp::Address address(transport->createPair(peer)->address().bytes());
    sockaddr_storage listening = address.getSockaddr();
    self = listening;
    mine.ports[static_cast<size_t>(peer)] = *FieldsOf(listening).port;
  }
  if (size > 1) mine.host = self;
  const auto key_of = [&](int peer) { return runtime::IndexedKey(key_prefix, peer); };
  std::vector<std::string> slices;
  try {
    const auto left =
        std::max(std::chrono::milliseconds(1),
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    slices = store.AllGather(key_prefix, static_cast<size_t>(rank), static_cast<size_t>(size),
                             EncodeMeshAddress(mine), left, MeshSliceRanges(rank));
  } catch (const runtime::MissingKeysError& e) {
    std::vector<int> missing;
    for (size_t index : e.missing()) missing.push_back(static_cast<int>(index));
    throw CollectiveTimeout(what + ": rank(s) " + RankList(missing) + " did not appear within " +
                            std::to_string(timeout.count()) + " ms (no address under " +
                            key_of(missing.at(0)) + "; a member is missing?)");
  } catch (const runtime::TimeoutError& e) {
    throw CollectiveTimeout(what + ": the addresses did not appear within " +
                            std::to_string(timeout.count()) + " ms: " + e.what());
  }
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    if (!DecodeMeshSlice(slices[static_cast<size_t>(peer)], &peers_[static_cast<size_t>(peer)]) ||
        peers_[static_cast<size_t>(peer)].ss_family != self.ss_family) {
      peers_[static_cast<size_t>(peer)] = sockaddr_storage{};
      throw CollectiveError(what + ": rank " + std::to_string(peer) +
                            " published a malformed gloo address under " + key_of(peer) + " (" +
                            std::to_string(slices[static_cast<size_t>(peer)].size()) +
                            " bytes for this rank)");
    }
  }

  // Dialling ends first: they finish without the peer's loop; then the
  // accepting ends, whose peers have all dialled by then or will. Each pair
  // compares its own listening address (my port for that peer) with the
  // peer's, as Gloo does.
  std::vector<int> dialling, accepting;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    sockaddr_storage own = self;
    *FieldsOf(own).port = mine.ports[static_cast<size_t>(peer)];
    (Dials(own, peers_[static_cast<size_t>(peer)]) ? dialling : accepting).push_back(peer);
  }
  std::vector<int> order = dialling;
  order.insert(order.end(), accepting.begin(), accepting.end());
  {
    ConnectWatchdog watchdog(*transport, deadline, abandoned);
    for (size_t i = 0; i < order.size(); ++i) {
      const int peer = order[i];
      if (!watchdog.Begin(peer)) {
        try {
          gloo::transport::tcp::Address address(peers_[static_cast<size_t>(peer)]);
          transport->getPair(peer)->connect(address.bytes());
        } catch (const std::exception& e) {
          if (!watchdog.fired()) {
            throw CollectiveError(what + ": connecting to " + DescribePeer(peer) +
                                  " failed (it left?): " + e.what());
          }
        }
      }
      if (watchdog.fired()) {
        std::vector<int> unconnected(order.begin() + static_cast<std::ptrdiff_t>(i), order.end());
        std::sort(unconnected.begin(), unconnected.end());
        if (watchdog.abandoned()) {
          throw CollectiveAborted(what +
                                  ": abandoned for a newer generation while the pairs with " +
                                  "rank(s) " + RankList(unconnected) + " were connecting (first " +
                                  "waiting on " + DescribePeer(peer) + ")");
        }
        throw CollectiveTimeout(what + ": the pairs with rank(s) " + RankList(unconnected) +
                                " did not connect within " + std::to_string(timeout.count()) +
                                " ms (first waiting on " + DescribePeer(peer) + ")");
      }
    }
  }
  device_ = device;
  transportContext_ = std::move(transport);
}

}  // namespace elastic::collectives
