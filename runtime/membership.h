// Plain C++ views of the head's cluster state, as clients see it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/protocol.capnp.h"

namespace elastic::runtime {

struct Endpoint {
  std::string host;
  uint16_t port = 0;
  std::string ToString() const { return host + ":" + std::to_string(port); }
};

// A registered process of the job. id is stable for the life of the process.
struct MemberInfo {
  uint64_t id = 0;
  std::string name;
  uint64_t node_id = 0;  // 0 when not started by a node agent
  Endpoint endpoint;     // its ActorSystem
  int32_t pid = 0;
  bool draining = false;  // its node was asked to stop (preemption)
};

// The ordered list of members of one generation. Ranks are positions in
// members; every change of the list gets a new, larger generation.
struct MembershipView {
  uint64_t generation = 0;
  std::vector<MemberInfo> members;

  // Position of member_id in the view, or -1.
  int RankOf(uint64_t member_id) const;
};

enum class MembershipEventKind {
  kJoined,       // a member registered (in the view at once when the head admits joins)
  kLeft,         // a member said goodbye
  kFailed,       // its connection dropped or its heartbeats stopped
  kDraining,     // its node is being preempted (SIGTERM to the node agent)
  kExited,       // a node agent saw a worker process exit
  kViewChanged,  // someone published a new view
  kSnapshot,     // the state at subscription time
};

const char* ToString(MembershipEventKind kind);

// What a subscriber is told: one event and the state right after it.
struct MembershipUpdate {
  MembershipEventKind kind = MembershipEventKind::kSnapshot;
  uint64_t member_id = 0;  // the member concerned, 0 when none
  uint64_t node_id = 0;    // the node concerned, 0 when none
  std::string detail;      // human-readable: reason of a failure, exit status...
  MembershipView view;
  std::vector<MemberInfo> pending;  // live members not (yet) in the view
};

// The live members (in the view or pending) of `before` that are neither in
// `after`: gone between the two, whether or not an update said so (one that
// came while nobody listened). In before's order.
std::vector<uint64_t> MembersGoneBetween(const MembershipUpdate& before,
                                         const MembershipUpdate& after);

// An update as bytes (a Cap'n Proto frame), e.g. as the payload of an actor
// message, and back. Decode throws std::runtime_error on bytes that are not one.
std::string EncodeMembershipUpdate(const MembershipUpdate& update);
MembershipUpdate DecodeMembershipUpdate(const std::string& bytes);

// Conversions to and from the wire.
Endpoint FromProto(proto::Endpoint::Reader endpoint);
void ToProto(const Endpoint& endpoint, proto::Endpoint::Builder builder);
MemberInfo FromProto(proto::Member::Reader member);
void ToProto(const MemberInfo& member, proto::Member::Builder builder);
// A whole update (every record in it). FromProto throws std::runtime_error
// for a delta, which only a MemberRecords can read.
MembershipUpdate FromProto(proto::MembershipUpdate::Reader update);
void ToProto(const MembershipUpdate& update, proto::MembershipUpdate::Builder builder);
// update as a MembershipDelta: view and pending members as ids, and the
// records of those for which changed(record) is true, i.e. those a receiver
// that holds the previous update's records may lack.
void ToProtoDelta(const MembershipUpdate& update,
                  const std::function<bool(const MemberInfo&)>& changed,
                  proto::MembershipUpdate::Builder builder);

// The member records a subscriber was sent, to read the updates that follow
// its snapshot (deltas). Not thread-safe: a client reads its connection's
// updates in order on one thread.
class MemberRecords {
 public:
  // A whole update replaces what is held. A delta's records are added, then
  // its ids named with what is held. Either way only the records of the
  // update's members are kept. Throws std::runtime_error naming an id the
  // delta names without a record held (the head and this stream disagree).
  MembershipUpdate Read(proto::MembershipUpdate::Reader update);
  size_t size() const { return records_.size(); }

 private:
  void KeepOnly(const MembershipUpdate& update);

  std::unordered_map<uint64_t, MemberInfo> records_;
};

}  // namespace elastic::runtime
