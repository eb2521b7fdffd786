// The head: the one process that owns cluster state (like Ray's GCS).
//
// It holds the node and actor registries, the membership view (an ordered
// list of live members with a generation number), the key-value store used for
// rendezvous, and detects failures: a member whose connection drops is failed
// at once, one that goes silent after the heartbeat timeout.
//
// Usage (in-process, e.g. a driver or a test):
//
//   elastic::runtime::HeadOptions options;        // 127.0.0.1, port 0, random token
//   elastic::runtime::Head head(options);         // listening when this returns
//   uint16_t port = head.port();                  // give port + head.token() to others
//   ... other processes: HeadClient client({"127.0.0.1", port, token});
//
// Everything the head does runs on its own loop thread; the methods below are
// safe from any other thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/connection.h"
#include "runtime/event_loop.h"
#include "runtime/kv_table.h"
#include "runtime/listener.h"
#include "runtime/log.h"
#include "runtime/membership.h"
#include "runtime/options.h"

namespace elastic::runtime {

// What one authenticated peer may ask of the head, so that none can grow it
// without bound (names are re-sent to every subscriber on every membership
// event; waits hold a timer each). A request beyond a limit is refused with an
// error naming the limit and the key or name (LimitExceededError in
// HeadClient); the head and the peer's connection go on.
struct HeadLimits {
  // The key-value store (rendezvous). The actor directory has the same
  // limits, its names bounded by max_name_bytes.
  KvLimits kv;
  // Names of nodes, members and actors, and endpoint hosts.
  size_t max_name_bytes = 256;
  // Free text broadcast to subscribers (a draining reason).
  size_t max_reason_bytes = 1024;
  // Key waits and actor lookups pending on one connection (a KvWaitAll is one).
  size_t max_waits_per_session = 1024;
  // Byte ranges one KvWaitAll may cut each value to.
  size_t max_ranges_per_wait = 16;
  // Longer waits are cut to this (the request says how long, as a UInt64).
  std::chrono::milliseconds max_wait{std::chrono::hours(1)};
};

struct HeadOptions {
  // Loopback by default. Any other address requires token_file.
  std::string listen_host = "127.0.0.1";
  uint16_t port = 0;  // 0: the OS picks one; read it back with port()
  // The cluster token. Empty: read token_file if set, else generate one.
  std::string token;
  std::string token_file;
  TransportOptions transport;
  // Connections still in their handshake (idle floods); see listener.h.
  PreAuthLimits pre_auth;
  // true: every join publishes a new view with the newcomer appended. false:
  // newcomers wait in `pending` until someone publishes a view with them.
  bool admit_joins = true;
  // Where the numbering starts, so that a head restarted in place of another
  // (a job controller recovered from its journal) never reuses a generation
  // number, member id or node id of the one before. first_generation is the
  // generation of the empty view at start (the first change publishes
  // first_generation + 1); ids must be >= 1 (0 means "none" on the wire).
  // The constructor throws std::invalid_argument naming a field that is not.
  uint64_t first_generation = 0;
  uint64_t first_member_id = 1;
  uint64_t first_node_id = 1;
  HeadLimits limits;
};

// What the head handled since it started: cumulative counts, so a reader that
// polls them (the driver's metrics) folds in differences and never loses or
// double-counts one.
struct HeadStats {
  uint64_t messages_received = 0;  // envelopes from clients; heartbeats excluded
  uint64_t messages_sent = 0;      // replies and membership updates; heartbeats excluded
  // Heartbeats that members (not node agents or other clients) failed to send
  // in time, as ConnectionCallbacks::on_heartbeats_missed counts them.
  uint64_t heartbeats_missed = 0;
  // Node agents connected now (the driver waits for remote ones to go before
  // it shuts the head down, so that late joiners learn the job is done).
  uint64_t nodes_connected = 0;
  // The ids the next registrations get: where a head restarted in its place
  // starts numbering (HeadOptions::first_member_id, first_node_id).
  uint64_t next_member_id = 1;
  uint64_t next_node_id = 1;
  // What the key-value store holds now. Keys of a generation two or more
  // below the current one are deleted whenever the generation advances.
  uint64_t kv_keys = 0;
  uint64_t kv_bytes = 0;
  // Requests refused for a limit (HeadLimits) since the head started.
  uint64_t requests_refused = 0;
};

class Head {
 public:
  // Binds and starts serving. Throws std::invalid_argument for a non-loopback
  // address without a token file or an id numbering that starts at 0,
  // std::runtime_error when it cannot bind.
  explicit Head(HeadOptions options);
  ~Head();
  Head(const Head&) = delete;
  Head& operator=(const Head&) = delete;

  uint16_t port() const { return port_; }
  const std::string& host() const { return options_.listen_host; }
  const std::string& token() const { return token_; }

  // Current view plus the live members not in it.
  MembershipUpdate Membership();
  // Replaces the view by member_ids in this order, generation + 1. Throws
  // std::invalid_argument when an id is not a live member or repeats.
  MembershipView PublishView(const std::vector<uint64_t>& member_ids);

  // Any thread, without waiting for the loop.
  HeadStats stats() const;

 private:
  struct Session;
  struct Member;

  ConnectionCallbacks SessionCallbacks();
  void OnOpen(const ConnectionPtr& connection);
  void OnMessage(const ConnectionPtr& connection, proto::Envelope::Reader envelope);
  void OnClosed(const ConnectionPtr& connection, const std::string& reason);

  // One per kind of request OnMessage dispatches; each answers request_id on
  // the session's connection.
  void HandleKvPut(Session& session, uint64_t request_id, proto::KvPut::Reader put);
  void HandleKvGet(Session& session, uint64_t request_id, proto::KvGet::Reader get);
  void HandleKvWait(Session& session, uint64_t request_id, proto::KvWait::Reader wait);
  void HandleKvWaitAll(Session& session, uint64_t request_id, proto::KvWaitAll::Reader wait);
  // The keys a KvWaitAll names. Those of an all-gather (prefix and count
  // only) are one list for all the requests that name them while any waits.
  KvTable::KeyList KeysOf(proto::KvWaitAll::Reader wait);
  // kv_.Find of each of keys, found again only when the table or the list
  // changed: the n replies a rendezvous releases at once share one lookup.
  const std::vector<const std::string*>& Resolve(const KvTable::KeyList& keys);
  // Answers a KvWaitAll with the values of keys cut to ranges, naming those
  // not set now; refuses an answer that would not fit a frame.
  void ReplyValues(const ConnectionPtr& connection, uint64_t request_id,
                   const KvTable::KeyList& keys, const std::vector<ByteRange>& ranges);
  void HandleRegisterNode(Session& session, uint64_t request_id,
                          proto::RegisterNode::Reader request);
  void HandleLeave(Session& session, uint64_t request_id);
  // SUBSCRIBE (subscribe: updates follow) and GET_VIEW: the membership now.
  void HandleView(Session& session, uint64_t request_id, bool subscribe);
  void HandlePublishView(Session& session, uint64_t request_id, proto::PublishView::Reader publish);
  void HandleDraining(Session& session, uint64_t request_id, proto::Draining::Reader draining);
  // A kind the head does not handle: an INVALID_ARGUMENT error naming it.
  void HandleUnknown(Session& session, uint64_t request_id, proto::Envelope::Which which);
  void HandleLookupActor(Session& session, uint64_t request_id, proto::LookupActor::Reader lookup);
  // The id a registering node or member gets: the one it claims (`previous`,
  // from before a head restart) when that one is free, else `next++`.
  static uint64_t ClaimId(uint64_t previous, uint64_t first,
                          const std::function<bool(uint64_t)>& in_use, std::atomic<uint64_t>& next);
  void HandleRegisterMember(Session& session, uint64_t request_id,
                            proto::RegisterMember::Reader request);
  void HandleRegisterActor(Session& session, uint64_t request_id,
                           proto::RegisterActor::Reader request);
  void HandleProcessExited(Session& session, uint64_t request_id,
                           proto::ProcessExited::Reader exited);

  // Refusals of requests beyond HeadLimits: "" when `text` (named `what`) is
  // within `limit` bytes, else the reason to refuse.
  static std::string OverLimit(const std::string& what, const std::string& text, size_t limit,
                               const char* limit_name);
  // Why a new wait of session would pass max_waits_per_session, or "".
  std::string TooManyWaits(const Session& session, const std::string& key) const;
  std::chrono::milliseconds ClampedWait(uint64_t millis) const;
  // Answers request_id with RESOURCE_EXHAUSTED and `why`; logs rate-limited.
  void Refuse(const ConnectionPtr& connection, uint64_t request_id, const std::string& why);

  // ++generation_, then deletes the keys of generations before the previous
  // one: no member rendezvouses in them any more.
  void AdvanceGeneration();
  void NoteKvSize();

  void RemoveMember(uint64_t member_id, MembershipEventKind kind, const std::string& detail);
  void PublishOnLoop(const std::vector<uint64_t>& member_ids);
  MembershipUpdate Snapshot(MembershipEventKind kind, uint64_t member_id, uint64_t node_id,
                            const std::string& detail) const;
  void Broadcast(const MembershipUpdate& update);

  // Every envelope the head sends goes through here, to be counted.
  void Send(const ConnectionPtr& connection, capnp::MessageBuilder& message);
  void ReplyOk(const ConnectionPtr& connection, uint64_t request_id);
  void ReplyError(const ConnectionPtr& connection, uint64_t request_id, proto::ErrorCode code,
                  const std::string& message);

  template <typename F>
  auto RunOnLoop(F f) -> decltype(f());

  HeadOptions options_;
  std::string token_;
  EventLoop loop_;
  asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::unique_ptr<Listener> listener_;  // after loop_: used on the loop until it stops

  // Loop thread only from here on.
  bool stopping_ = false;  // the destructor began: no more broadcasts
  std::unordered_map<Connection*, std::unique_ptr<Session>> sessions_;
  std::map<uint64_t, Member> members_;  // live, registered members
  std::map<uint64_t, std::string> nodes_;
  // (node id, pid) -> member id of every member ever registered, so an exit
  // reported after the member's connection dropped still names the member.
  std::map<std::pair<uint64_t, int32_t>, uint64_t> member_by_pid_;
  std::vector<uint64_t> view_;
  uint64_t generation_ = 0;
  std::map<std::pair<std::string, uint32_t>, std::weak_ptr<const std::vector<std::string>>>
      indexed_keys_;  // KeysOf's lists of all-gathers under way, by (prefix, count)
  struct Resolved {
    KvTable::KeyList keys;
    uint64_t version = 0;
    std::vector<const std::string*> found;
  } resolved_;  // Resolve's last answer
  // Changes to member records so far, and how many the last broadcast
  // update included (see Member::changed_at).
  uint64_t record_changes_ = 0;
  uint64_t broadcast_changes_ = 0;
  std::atomic<uint64_t> next_member_id_{1};  // written on the loop, read by stats()
  std::atomic<uint64_t> next_node_id_{1};
  KvTable kv_;
  KvTable actors_;  // name -> "host:port"
  RateLimitedLog refusals_log_;

  // Written on the loop thread, read by stats() from any thread.
  std::atomic<uint64_t> messages_received_{0};
  std::atomic<uint64_t> messages_sent_{0};
  std::atomic<uint64_t> heartbeats_missed_{0};
  std::atomic<uint64_t> nodes_connected_{0};  // nodes_.size(), readable off the loop
  std::atomic<uint64_t> kv_keys_{0};
  std::atomic<uint64_t> kv_bytes_{0};
  std::atomic<uint64_t> requests_refused_{0};
};

}  // namespace elastic::runtime
