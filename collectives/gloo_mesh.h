// A Gloo context whose full mesh is connected through the key-value store at
// a cost linear in the number of members.
//
// Gloo's own rendezvous (gloo::rendezvous::Context::connectFullMesh) costs a
// membership change of n members about 2.5 n^2 store requests and 272 n^3
// bytes of replies: every rank puts its n-1 pair addresses as one key of
// 136 (n-1) bytes (a whole sockaddr_storage + sequence number per pair), then
// waits for and reads every other rank's key twice, whole, one request each,
// after a local-rank discovery round of n(n-1)/2 more waits.
//
// Here each rank makes one AllGather (KeyValueStore::AllGather: one request
// to the head, carrying both):
//   put      <prefix><my rank> = my compact address: 18 bytes (format, family,
//            IP) + 2 bytes per rank (the port of my pair for that rank)
//   wait     <prefix>0 .. <prefix>n-1, each cut to the 18-byte head and the
//            2 bytes of its port for me: 20 bytes per peer
// so n requests per change in all, each of O(1) bytes, and each rank reading
// O(n) bytes.
//
// Why ports per rank and not one listener address: Debian's Gloo
// (0.0~git20220518) gives every pair its own listening socket on an
// ephemeral port (tcp::Pair::listen); the single listener per device came to
// Gloo a year later. A peer's address for me is therefore its IP plus one
// port that only it knows, which is exactly the slice it publishes for me.
//
// Connecting: Gloo's tcp::Pair::connect makes the end with the larger
// (address, port) connect and the other accept, whoever calls first. Every
// rank first connects the pairs on which it is the connecting end (these
// finish without waiting for the peer's loop: the peer's socket listens from
// the moment it published), then waits for its accepting pairs. No rank
// waits on a peer that waits on it. Gloo's local-rank discovery (rank_<r>
// keys, n(n-1)/2 waits) is skipped: the TCP transport never uses it.
#pragma once

#include <gloo/context.h>
#include <gloo/transport/device.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/kv_store.h"

namespace elastic::collectives {

// The compact address a rank publishes: the IP its pairs listen on and, for
// each rank, the port (network byte order) of its pair with that rank (0 for
// itself).
struct MeshAddress {
  sockaddr_storage host{};  // family and IP; the port is not used
  std::vector<uint16_t> ports;
};

// Bytes before the ports: format, family, 16 bytes of IP (IPv4 in the first 4).
inline constexpr size_t kMeshAddressHeadBytes = 18;

std::string EncodeMeshAddress(const MeshAddress& address);

// What WaitAll returns of a peer's MeshAddress for `rank`: its head and its
// one port for rank. Parses `slice`; false when it is not one (wrong size,
// format or family, port 0).
bool DecodeMeshSlice(const std::string& slice, sockaddr_storage* peer);

// The ranges of a MeshAddress that rank `rank` reads of every peer's.
std::vector<runtime::ByteRange> MeshSliceRanges(int rank);

// "127.0.0.1:41234", "[::1]:41234".
std::string FormatSockaddr(const sockaddr_storage& address);

class GlooMeshContext : public gloo::Context {
 public:
  GlooMeshContext(int rank, int size);

  // Publishes this rank's address under key_prefix + rank, reads every rank's,
  // connects every pair. Throws CollectiveTimeout naming the ranks that
  // published nothing, or whose pair did not connect, within `timeout` (one
  // deadline for the whole rendezvous), and CollectiveError naming the rank
  // whose address is malformed or whose pair failed to connect. `what`
  // prefixes every error ("gloo rendezvous of generation 7").
  //
  // `abandoned` (when given) is asked every few milliseconds while pairs
  // connect: once it returns true (a newer generation exists, so a peer that
  // has not connected yet may never come) the connecting stops and Connect
  // throws CollectiveAborted, instead of waiting out `timeout` for a member
  // that died after it published its address. (Waits on the store are the
  // store's to cut short: elastic's SupersededStore.)
  void Connect(runtime::KeyValueStore& store, const std::string& key_prefix,
               const std::shared_ptr<gloo::transport::Device>& device,
               std::chrono::milliseconds timeout, const std::string& what,
               const std::function<bool()>& abandoned = {});

  // "rank 2 (gloo address 10.0.0.7:41234)": the address rank `peer`
  // published for its pair with this rank, once Connect has read it.
  std::string DescribePeer(int peer) const;

 private:
  // Connects the pair with `peer` (Gloo decides which end dials).
  void ConnectPair(int peer, const std::string& what);

  std::vector<sockaddr_storage> peers_;  // by rank; family 0 until read
};

}  // namespace elastic::collectives
