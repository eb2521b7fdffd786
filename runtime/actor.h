// Actors: objects that handle one message at a time, addressed by name,
// reachable from any process of the job.
//
//   class Counter : public elastic::runtime::Actor {
//     std::string Receive(const std::string& method, const std::string& payload) override;
//   };
//   ActorSystem system({.token = token, .head = &head_client});
//   system.Spawn("counter", std::make_shared<Counter>());       // registered with the head
//   // elsewhere, any process:
//   ActorRef counter = other_system.Lookup("counter", std::chrono::seconds(10));
//   counter.Tell("add", "1");
//   std::string total = counter.Ask("get", "", std::chrono::seconds(5)).get();
//
// Delivery: messages from one sender to one actor arrive in order. An ask
// fails (its future throws) with TimeoutError after its timeout, and with
// AskError when the actor threw, does not exist, or its process or the
// connection to it is lost (at once on a dropped connection, after the
// heartbeat timeout for a silent process) - never a hang.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "runtime/connection.h"
#include "runtime/event_loop.h"
#include "runtime/kv_store.h"
#include "runtime/listener.h"
#include "runtime/membership.h"
#include "runtime/options.h"

namespace elastic::runtime {

class HeadClient;
class ActorSystem;

// An ask that failed for a reason other than its timeout.
class AskError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Actor {
 public:
  virtual ~Actor() = default;
  // Handles one message. Runs on the system's thread pool, never concurrently
  // with another message of the same actor. The result answers an ask (and is
  // dropped for a tell); an exception answers the ask with an AskError
  // carrying what().
  virtual std::string Receive(const std::string& method, const std::string& payload) = 0;
};

// A location-transparent handle: the same calls whether the actor lives in
// this process or another. Valid while the ActorSystem that made it lives.
class ActorRef {
 public:
  ActorRef() = default;

  void Tell(const std::string& method, const std::string& payload) const;
  std::future<std::string> Ask(const std::string& method, const std::string& payload,
                               std::chrono::milliseconds timeout) const;

  const std::string& name() const { return name_; }
  bool is_local() const { return !remote_.has_value(); }
  // Where a remote actor lives (empty for a local one).
  std::optional<Endpoint> endpoint() const { return remote_; }

 private:
  friend class ActorSystem;
  ActorRef(ActorSystem* system, std::string name, std::optional<Endpoint> remote)
      : system_(system), name_(std::move(name)), remote_(std::move(remote)) {}

  ActorSystem* system_ = nullptr;
  std::string name_;
  std::optional<Endpoint> remote_;
};

struct ActorSystemOptions {
  std::string token;  // the cluster token, for calls in both directions
  std::string listen_host = "127.0.0.1";
  uint16_t port = 0;
  // The address other machines use to reach this system (registered with the
  // head). Empty: listen_host, which then must not be a wildcard (0.0.0.0).
  std::string advertise_host;
  size_t threads = 2;  // actor execution threads
  TransportOptions transport;
  // Connections still in their handshake (idle floods); see listener.h.
  PreAuthLimits pre_auth;
  // When set, Spawn registers actors with the head and Lookup resolves names
  // through it. Must outlive the system.
  HeadClient* head = nullptr;
  std::string name = "actors";  // for logs
};

class ActorSystem {
 public:
  // Listens for calls from other processes. Throws std::runtime_error when it
  // cannot bind.
  explicit ActorSystem(ActorSystemOptions options);
  ~ActorSystem();
  ActorSystem(const ActorSystem&) = delete;
  ActorSystem& operator=(const ActorSystem&) = delete;

  // Where other processes reach this system's actors.
  Endpoint endpoint() const { return endpoint_; }

  // Starts an actor under a name unique in the job. Throws
  // std::invalid_argument when the name is taken (here or at the head).
  ActorRef Spawn(const std::string& name, std::shared_ptr<Actor> actor);
  // A handle to an actor at a known endpoint.
  ActorRef Remote(const std::string& name, const Endpoint& endpoint);
  // A handle by name: a local actor, else the head's directory (waiting up
  // to timeout for the name to appear). Throws TimeoutError when not found.
  ActorRef Lookup(const std::string& name, std::chrono::milliseconds timeout);

 private:
  friend class ActorRef;
  struct LocalActor;
  struct AskState;
  struct Peer;

  void Tell(const ActorRef& ref, const std::string& method, const std::string& payload);
  std::future<std::string> Ask(const ActorRef& ref, const std::string& method,
                               const std::string& payload, std::chrono::milliseconds timeout);

  std::shared_ptr<LocalActor> FindLocal(const std::string& name);
  // Runs one message on the actor's strand; reply (if set) gets the outcome.
  void Deliver(const std::shared_ptr<LocalActor>& actor, std::string method, std::string payload,
               std::function<void(bool ok, const std::string& result)> reply);
  std::shared_ptr<Peer> PeerFor(const Endpoint& endpoint, std::string* error);
  ConnectionCallbacks IncomingCallbacks();
  void OnIncomingCall(const ConnectionPtr& connection, proto::Envelope::Reader envelope);
  void ArmTimeout(const std::shared_ptr<AskState>& ask, std::chrono::milliseconds timeout,
                  std::function<void()> on_timeout);

  ActorSystemOptions options_;
  EventLoop loop_;  // network and ask timeouts
  asio::thread_pool pool_;
  asio::ip::tcp::acceptor acceptor_;
  Endpoint endpoint_;
  std::unique_ptr<Listener> listener_;  // after loop_: used on the loop until it stops

  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<LocalActor>> local_;
  std::map<std::string, std::shared_ptr<Peer>> peers_;  // by "host:port"
  std::map<Connection*, ConnectionPtr> incoming_;
  bool stopping_ = false;
};

// Subscribes client to membership changes and tells each update to actor as
// a message with method "membership" and EncodeMembershipUpdate bytes, so the
// actor handles membership changes in turn with its other messages. Returns
// the snapshot at subscription time. Replaces any earlier subscription
// callback of client.
MembershipUpdate ForwardMembershipTo(HeadClient& client, ActorRef actor);
// As ForwardMembershipTo, and the actor is told the snapshot too (kind
// kSnapshot), before every update that follows it: an actor that subscribes
// again after a lost session sees how the membership changed meanwhile, in
// order with what comes next.
MembershipUpdate ForwardMembershipWithSnapshotTo(HeadClient& client, ActorRef actor);
constexpr const char* kMembershipMethod = "membership";

}  // namespace elastic::runtime
