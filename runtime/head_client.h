// A process's connection to the head: the key-value store (KeyValueStore),
// membership (register, subscribe, views) and the actor directory.
//
// Rendezvous between processes (what the collectives do):
//
//   // process A (e.g. a test) hosts the head:
//   elastic::runtime::Head head(elastic::runtime::HeadOptions{});
//   // pass "127.0.0.1", head.port() and head.token() to the children
//   // (token through the environment, kTokenEnvironmentVariable).
//
//   // any process, any thread:
//   elastic::runtime::HeadClient kv({"127.0.0.1", port, token, "rank-3"});
//   kv.Put(GenerationKey(g, "rank0/addr"), bytes);
//   std::string addr = kv.Wait(GenerationKey(g, "rank0/addr"), std::chrono::seconds(30));
//   // every rank's address in one request (KvWaitAll), whatever the world's size:
//   std::vector<std::string> all = kv.WaitAll(keys, std::chrono::seconds(30), {});
//
// All methods block until the head answers and may be called from any thread
// except from inside a subscription callback (which runs on the client's own
// loop thread; calling back into the client there throws std::logic_error).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/connection.h"
#include "runtime/event_loop.h"
#include "runtime/kv_store.h"
#include "runtime/membership.h"
#include "runtime/options.h"

namespace elastic::runtime {

struct HeadClientOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string token;
  std::string name = "client";  // shows in the head's logs
  TransportOptions transport;
  // How long to wait for the head's answer to a request that does not wait
  // on purpose (put, get, register...).
  std::chrono::milliseconds request_timeout{30000};
};

class HeadClient : public KeyValueStore {
 public:
  using UpdateCallback = std::function<void(const MembershipUpdate&)>;
  using DisconnectCallback = std::function<void(const std::string& reason)>;

  // Connects and authenticates. Throws std::runtime_error naming the reason
  // (unreachable, refused: wrong token, timeout).
  explicit HeadClient(HeadClientOptions options);
  ~HeadClient() override;
  HeadClient(const HeadClient&) = delete;
  HeadClient& operator=(const HeadClient&) = delete;

  // KeyValueStore. Each throws std::runtime_error once the head is unreachable.
  void Put(const std::string& key, const std::string& value) override;
  std::optional<std::string> Get(const std::string& key) override;
  std::string Wait(const std::string& key, std::chrono::milliseconds timeout) override;
  // One KvWaitAll request and one reply, however many keys.
  std::vector<std::string> WaitAll(const std::vector<std::string>& keys,
                                   std::chrono::milliseconds timeout,
                                   const std::vector<ByteRange>& ranges) override;
  // One KvWaitAll request carrying the put and naming the keys by prefix and
  // count, and one reply.
  std::vector<std::string> AllGather(const std::string& prefix, size_t rank, size_t count,
                                     const std::string& value, std::chrono::milliseconds timeout,
                                     const std::vector<ByteRange>& ranges) override;

  // Registers this connection as a node agent; returns the node id. A node
  // whose head was restarted claims the id it had (`previous_id`): the head
  // grants it when no one else has it.
  uint64_t RegisterNode(const std::string& name, uint32_t workers, uint64_t previous_id = 0);
  // Registers this process as a member; returns its stable member id. With
  // the head admitting joins, the member is in the view that comes back in
  // the "joined" update. `previous_id` as for RegisterNode.
  uint64_t RegisterMember(const std::string& name, uint64_t node_id, const Endpoint& endpoint,
                          uint64_t previous_id = 0);
  // Leaves the membership on purpose (subscribers see "left", not "failed").
  void Leave();
  // 0 before RegisterMember.
  uint64_t member_id() const { return member_id_.load(); }

  // Current view and pending members.
  MembershipUpdate GetMembership();
  // Calls callback (on the client's loop thread) with every membership update
  // from now on; returns the snapshot at subscription time.
  MembershipUpdate Subscribe(UpdateCallback callback);
  // Publishes member_ids (in this order) as the view of the next generation.
  MembershipView PublishView(const std::vector<uint64_t>& member_ids);

  // Node agent reports.
  void ReportDraining(uint64_t node_id, const std::string& reason);
  void ReportExit(uint64_t node_id, uint32_t worker_index, int32_t pid, int32_t exit_code,
                  int32_t signal);

  // Actor directory.
  void RegisterActor(const std::string& name, const Endpoint& endpoint);
  // Where the actor lives; waits up to timeout for it to be registered, then
  // throws TimeoutError.
  Endpoint LookupActor(const std::string& name, std::chrono::milliseconds timeout);

  // Called once, on the loop thread, when the connection to the head is lost.
  void OnDisconnect(DisconnectCallback callback);
  bool connected() const;

 private:
  using Reply = std::shared_ptr<IncomingFrame>;
  // Sends one request built by fill and waits for its answer (up to wait).
  // Throws TimeoutError / std::runtime_error for error answers and lost
  // connections.
  Reply Call(const std::function<void(proto::Envelope::Builder)>& fill,
             std::chrono::milliseconds wait, const std::string& what);
  // Sends the KvWaitAll that fill completes (keys, put) for `key_count` keys,
  // with timeout and ranges, and returns its values; `keys_of` names them
  // for a MissingKeysError.
  std::vector<std::string> CallWaitAll(const std::function<void(proto::KvWaitAll::Builder)>& fill,
                                       size_t key_count,
                                       const std::function<std::vector<std::string>()>& keys_of,
                                       std::chrono::milliseconds timeout,
                                       const std::vector<ByteRange>& ranges);
  void OnMessage(proto::Envelope::Reader envelope, const std::shared_ptr<IncomingFrame>& frame);
  void OnMembershipUpdate(proto::MembershipUpdate::Reader update);
  void OnClosed(const std::string& reason);

  HeadClientOptions options_;
  EventLoop loop_;
  ConnectionPtr connection_;
  std::atomic<uint64_t> member_id_{0};

  std::mutex mutex_;
  std::map<uint64_t, std::promise<Reply>> pending_;
  uint64_t next_request_id_ = 1;
  std::string lost_reason_;  // non-empty once disconnected
  UpdateCallback on_update_;
  MemberRecords records_;  // the loop thread's only
  DisconnectCallback on_disconnect_;
};

// Where a process started by a node agent finds its head (the environment the
// agent sets). Throws std::runtime_error naming the missing or malformed
// variable.
struct WorkerEnvironment {
  std::string head_host;
  uint16_t head_port = 0;
  std::string token;
  uint64_t node_id = 0;
  uint32_t worker_index = 0;
  // The agent's heartbeat interval and timeout (ELASTIC_HEARTBEAT_MS,
  // ELASTIC_HEARTBEAT_TIMEOUT_MS), so that its workers judge silence as it does.
  TransportOptions transport;
  // How long the agent waits for a lost head to come back
  // (ELASTIC_HEAD_RECONNECT_MS): its workers wait as long, then it stops them.
  std::chrono::milliseconds head_reconnect_timeout{60000};

  static WorkerEnvironment FromEnvironment();
  HeadClientOptions ClientOptions(const std::string& name) const;
};

}  // namespace elastic::runtime
