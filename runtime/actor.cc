#include "runtime/actor.h"

#include <atomic>
#include <stdexcept>
#include <vector>

#include "runtime/head_client.h"
#include "runtime/log.h"
#include "runtime/sockets.h"

namespace elastic::runtime {
namespace {

// Posts f to loop and waits until it ran.
void RunAndWait(EventLoop& loop, std::function<void()> f) {
  std::promise<void> done;
  auto future = done.get_future();
  loop.Post([&] {
    f();
    done.set_value();
  });
  future.wait();
}

}  // namespace

struct ActorSystem::LocalActor {
  LocalActor(std::string name, std::shared_ptr<Actor> actor, asio::thread_pool& pool)
      : name(std::move(name)), actor(std::move(actor)), strand(asio::make_strand(pool)) {}
  std::string name;
  std::shared_ptr<Actor> actor;
  // One message at a time: the strand never runs two handlers at once.
  asio::strand<asio::thread_pool::executor_type> strand;
};

// One outstanding ask; completed exactly once by its reply, its timeout or a
// lost connection, whichever comes first.
struct ActorSystem::AskState {
  std::promise<std::string> promise;
  std::atomic<bool> done{false};
  std::shared_ptr<asio::steady_timer> timer;  // loop thread only

  bool Succeed(EventLoop& loop, std::shared_ptr<AskState> self, const std::string& value) {
    if (done.exchange(true)) return false;
    promise.set_value(value);
    loop.Post([self] {
      if (self->timer) self->timer->cancel();
    });
    return true;
  }
  template <typename E>
  bool Fail(EventLoop& loop, std::shared_ptr<AskState> self, const E& error) {
    if (done.exchange(true)) return false;
    promise.set_exception(std::make_exception_ptr(error));
    loop.Post([self] {
      if (self->timer) self->timer->cancel();
    });
    return true;
  }
};

// An outbound connection to another process's actor system, with the asks
// waiting for answers on it.
struct ActorSystem::Peer {
  Endpoint endpoint;
  std::shared_future<ConnectionPtr> dialing;
  std::mutex mutex;
  std::map<uint64_t, std::shared_ptr<AskState>> pending;
  uint64_t next_request_id = 1;
  std::string lost_reason;  // non-empty once the connection is gone
};

void ActorRef::Tell(const std::string& method, const std::string& payload) const {
  if (system_ == nullptr) throw std::logic_error("Tell on an empty ActorRef");
  system_->Tell(*this, method, payload);
}

std::future<std::string> ActorRef::Ask(const std::string& method, const std::string& payload,
                                       std::chrono::milliseconds timeout) const {
  if (system_ == nullptr) throw std::logic_error("Ask on an empty ActorRef");
  return system_->Ask(*this, method, payload, timeout);
}

ActorSystem::ActorSystem(ActorSystemOptions options)
    : options_(std::move(options)),
      loop_(options_.name),
      pool_(options_.threads),
      acceptor_(loop_.context()) {
  if (options_.token.empty()) {
    throw std::invalid_argument(
        "an actor system needs the cluster token (ActorSystemOptions.token)");
  }
  asio::error_code ec;
  const auto address = asio::ip::make_address(options_.listen_host, ec);
  if (ec) throw std::invalid_argument("'" + options_.listen_host + "' is not an IP address");
  const asio::ip::tcp::endpoint endpoint(address, options_.port);
  // A fixed port is taken again by a restarted process: its old
  // connections' TIME_WAIT must not keep it out.
  ec = ListenCloseOnExec(acceptor_, endpoint, /*reuse_address=*/options_.port != 0);
  if (ec) {
    throw std::runtime_error("actor system cannot listen on " + options_.listen_host + ": " +
                             ec.message());
  }
  std::string advertised = options_.advertise_host;
  if (advertised.empty()) {
    if (address.is_unspecified()) {
      throw std::invalid_argument("actor system listening on " + options_.listen_host +
                                  " needs an advertise_host that other machines can reach");
    }
    advertised = options_.listen_host;
  }
  endpoint_ = Endpoint{advertised, acceptor_.local_endpoint().port()};
  listener_ = std::make_unique<Listener>(loop_, acceptor_, options_.name, options_.pre_auth,
                                         options_.transport, options_.token, IncomingCallbacks());
  loop_.Post([this] { listener_->Start(); });
}

ActorSystem::~ActorSystem() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  RunAndWait(loop_, [this] {
    asio::error_code ignored;
    acceptor_.close(ignored);
    listener_->Stop("actor system stopping");
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [raw, connection] : incoming_) connection->Close("actor system stopping");
    for (auto& [key, peer] : peers_) {
      if (peer->dialing.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
        try {
          peer->dialing.get()->Close("actor system stopping");
        } catch (const std::exception&) {
        }
      }
    }
  });
  RunAndWait(loop_, [] {});  // the closes posted above have run
  pool_.stop();
  pool_.join();
  loop_.Stop();
  std::lock_guard<std::mutex> lock(mutex_);
  incoming_.clear();
  peers_.clear();
  local_.clear();
}

ConnectionCallbacks ActorSystem::IncomingCallbacks() {
  ConnectionCallbacks callbacks;
  callbacks.on_open = [this](const ConnectionPtr& connection) {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming_[connection.get()] = connection;
  };
  callbacks.on_message = [this](const ConnectionPtr& connection, proto::Envelope::Reader envelope,
                                const std::shared_ptr<IncomingFrame>&) {
    OnIncomingCall(connection, envelope);
  };
  callbacks.on_closed = [this](const ConnectionPtr& connection, const std::string&) {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming_.erase(connection.get());
  };
  return callbacks;
}

std::shared_ptr<ActorSystem::LocalActor> ActorSystem::FindLocal(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = local_.find(name);
  return it == local_.end() ? nullptr : it->second;
}

ActorRef ActorSystem::Spawn(const std::string& name, std::shared_ptr<Actor> actor) {
  if (name.empty()) throw std::invalid_argument("actor name is empty");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (local_.count(name) > 0) {
      throw std::invalid_argument("an actor named '" + name + "' already exists here");
    }
    local_[name] = std::make_shared<LocalActor>(name, std::move(actor), pool_);
  }
  if (options_.head != nullptr) {
    try {
      options_.head->RegisterActor(name, endpoint_);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      local_.erase(name);
      throw;
    }
  }
  return ActorRef(this, name, std::nullopt);
}

ActorRef ActorSystem::Remote(const std::string& name, const Endpoint& endpoint) {
  if (endpoint.host == endpoint_.host && endpoint.port == endpoint_.port) {
    return ActorRef(this, name, std::nullopt);
  }
  return ActorRef(this, name, endpoint);
}

ActorRef ActorSystem::Lookup(const std::string& name, std::chrono::milliseconds timeout) {
  if (FindLocal(name) != nullptr) return ActorRef(this, name, std::nullopt);
  if (options_.head == nullptr) {
    throw TimeoutError("no actor named '" + name + "' in this process and no head to ask");
  }
  return Remote(name, options_.head->LookupActor(name, timeout));
}

void ActorSystem::Deliver(const std::shared_ptr<LocalActor>& actor, std::string method,
                          std::string payload,
                          std::function<void(bool ok, const std::string& result)> reply) {
  asio::post(actor->strand, [actor, method = std::move(method), payload = std::move(payload),
                             reply = std::move(reply)] {
    std::string result;
    try {
      result = actor->actor->Receive(method, payload);
    } catch (const std::exception& e) {
      const std::string error =
          "actor '" + actor->name + "' failed on '" + method + "': " + e.what();
      if (reply) {
        reply(false, error);
      } else {
        // A peer can send malformed tells in a loop: at most a line a second.
        static RateLimitedLog failed_tells(LogLevel::kWarning, "actors", std::chrono::seconds(1));
        uint64_t suppressed = 0;
        if (failed_tells.Admit(&suppressed)) {
          ELASTIC_LOG(kWarning, "actors", error << SuppressedNote(suppressed, "failed tells"));
        }
      }
      return;
    }
    if (reply) reply(true, result);
  });
}

void ActorSystem::OnIncomingCall(const ConnectionPtr& connection,
                                 proto::Envelope::Reader envelope) {
  if (envelope.which() != proto::Envelope::ACTOR_CALL) {
    ELASTIC_LOG(kWarning, "actors",
                "ignoring message kind " << static_cast<int>(envelope.which()) << " from "
                                         << connection->peer());
    return;
  }
  auto call = envelope.getActorCall();
  const uint64_t request_id = envelope.getRequestId();
  const bool expects_reply = call.getExpectsReply();
  auto send_reply = [connection, request_id](bool ok, const std::string& result) {
    capnp::MallocMessageBuilder message;
    auto reply_envelope = message.initRoot<proto::Envelope>();
    reply_envelope.setRequestId(request_id);
    auto reply = reply_envelope.initActorReply();
    reply.setOk(ok);
    if (ok) {
      reply.setPayload(AsData(result));
    } else {
      reply.setError(result);
    }
    connection->Send(message);
  };
  const std::string name = call.getActor().cStr();
  auto actor = FindLocal(name);
  if (actor == nullptr) {
    if (expects_reply) {
      send_reply(false, "no actor named '" + name + "' at " + endpoint_.ToString());
    }
    return;
  }
  Deliver(actor, call.getMethod().cStr(), ToBytes(call.getPayload()),
          expects_reply ? std::function<void(bool, const std::string&)>(send_reply) : nullptr);
}

std::shared_ptr<ActorSystem::Peer> ActorSystem::PeerFor(const Endpoint& endpoint,
                                                        std::string* error) {
  const std::string key = endpoint.ToString();
  std::shared_ptr<Peer> peer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      *error = "actor system stopping";
      return nullptr;
    }
    auto it = peers_.find(key);
    if (it != peers_.end()) {
      std::lock_guard<std::mutex> peer_lock(it->second->mutex);
      if (it->second->lost_reason.empty()) peer = it->second;
    }
    if (peer == nullptr) {
      peer = std::make_shared<Peer>();
      peer->endpoint = endpoint;
      ConnectionCallbacks callbacks;
      // Weak: the peer owns the connection, which owns these callbacks.
      std::weak_ptr<Peer> weak_peer = peer;
      callbacks.on_message = [this, weak_peer](const ConnectionPtr&,
                                               proto::Envelope::Reader envelope,
                                               const std::shared_ptr<IncomingFrame>&) {
        auto peer = weak_peer.lock();
        if (peer == nullptr || envelope.which() != proto::Envelope::ACTOR_REPLY) return;
        std::shared_ptr<AskState> ask;
        {
          std::lock_guard<std::mutex> peer_lock(peer->mutex);
          auto it = peer->pending.find(envelope.getRequestId());
          if (it == peer->pending.end()) return;  // timed out already
          ask = it->second;
          peer->pending.erase(it);
        }
        auto reply = envelope.getActorReply();
        if (reply.getOk()) {
          ask->Succeed(loop_, ask, ToBytes(reply.getPayload()));
        } else {
          ask->Fail(loop_, ask, AskError(reply.getError().cStr()));
        }
      };
      callbacks.on_closed = [this, weak_peer, key](const ConnectionPtr&,
                                                   const std::string& reason) {
        auto peer = weak_peer.lock();
        if (peer == nullptr) return;
        std::map<uint64_t, std::shared_ptr<AskState>> pending;
        {
          std::lock_guard<std::mutex> peer_lock(peer->mutex);
          peer->lost_reason = reason.empty() ? "closed" : reason;
          pending.swap(peer->pending);
        }
        for (auto& [id, ask] : pending) {
          ask->Fail(loop_, ask,
                    AskError("connection to actor system at " + key + " lost: " + reason));
        }
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = peers_.find(key);
        if (it != peers_.end() && it->second == peer) peers_.erase(it);
      };
      peer->dialing = Connection::Dial(loop_, endpoint.host, endpoint.port, options_.transport,
                                       options_.token, options_.name, std::move(callbacks))
                          .share();
      peers_[key] = peer;
    }
  }
  try {
    peer->dialing.get();
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
  return peer;
}

void ActorSystem::ArmTimeout(const std::shared_ptr<AskState>& ask,
                             std::chrono::milliseconds timeout, std::function<void()> on_timeout) {
  loop_.Post([this, ask, timeout, on_timeout = std::move(on_timeout)] {
    if (ask->done.load()) return;
    ask->timer = std::make_shared<asio::steady_timer>(loop_.context(), timeout);
    ask->timer->async_wait([on_timeout](const asio::error_code& ec) {
      if (!ec) on_timeout();
    });
  });
}

void ActorSystem::Tell(const ActorRef& ref, const std::string& method, const std::string& payload) {
  if (ref.is_local()) {
    auto actor = FindLocal(ref.name());
    if (actor == nullptr) {
      ELASTIC_LOG(kWarning, "actors", "tell to unknown local actor '" << ref.name() << "' dropped");
      return;
    }
    Deliver(actor, method, payload, nullptr);
    return;
  }
  std::string error;
  auto peer = PeerFor(*ref.remote_, &error);
  if (peer == nullptr) {
    ELASTIC_LOG(
        kWarning, "actors",
        "tell to '" << ref.name() << "' at " << ref.remote_->ToString() << " dropped: " << error);
    return;
  }
  capnp::MallocMessageBuilder message;
  auto call = message.initRoot<proto::Envelope>().initActorCall();
  call.setActor(ref.name());
  call.setMethod(method);
  call.setPayload(AsData(payload));
  call.setExpectsReply(false);
  peer->dialing.get()->Send(message);
}

std::future<std::string> ActorSystem::Ask(const ActorRef& ref, const std::string& method,
                                          const std::string& payload,
                                          std::chrono::milliseconds timeout) {
  auto ask = std::make_shared<AskState>();
  auto future = ask->promise.get_future();
  const std::string what = "ask '" + method + "' to actor '" + ref.name() + "'";
  const std::string timeout_text =
      what + " timed out after " + std::to_string(timeout.count()) + " ms";

  if (ref.is_local()) {
    auto actor = FindLocal(ref.name());
    if (actor == nullptr) {
      ask->Fail(loop_, ask, AskError(what + ": no such actor in this process"));
      return future;
    }
    ArmTimeout(ask, timeout,
               [this, ask, timeout_text] { ask->Fail(loop_, ask, TimeoutError(timeout_text)); });
    Deliver(actor, method, payload, [this, ask](bool ok, const std::string& result) {
      if (ok) {
        ask->Succeed(loop_, ask, result);
      } else {
        ask->Fail(loop_, ask, AskError(result));
      }
    });
    return future;
  }

  std::string error;
  auto peer = PeerFor(*ref.remote_, &error);
  if (peer == nullptr) {
    ask->Fail(loop_, ask,
              AskError(what + ": cannot reach " + ref.remote_->ToString() + ": " + error));
    return future;
  }
  uint64_t request_id = 0;
  {
    std::lock_guard<std::mutex> lock(peer->mutex);
    if (!peer->lost_reason.empty()) {
      ask->Fail(loop_, ask, AskError(what + ": connection lost: " + peer->lost_reason));
      return future;
    }
    request_id = peer->next_request_id++;
    peer->pending[request_id] = ask;
  }
  ArmTimeout(ask, timeout, [this, ask, peer, request_id, timeout_text] {
    {
      std::lock_guard<std::mutex> lock(peer->mutex);
      peer->pending.erase(request_id);
    }
    ask->Fail(loop_, ask, TimeoutError(timeout_text));
  });
  capnp::MallocMessageBuilder message;
  auto envelope = message.initRoot<proto::Envelope>();
  envelope.setRequestId(request_id);
  auto call = envelope.initActorCall();
  call.setActor(ref.name());
  call.setMethod(method);
  call.setPayload(AsData(payload));
  call.setExpectsReply(true);
  if (!peer->dialing.get()->Send(message)) {
    {
      std::lock_guard<std::mutex> lock(peer->mutex);
      peer->pending.erase(request_id);
    }
    ask->Fail(loop_, ask, AskError(what + ": connection to " + ref.remote_->ToString() + " lost"));
  }
  return future;
}

MembershipUpdate ForwardMembershipTo(HeadClient& client, ActorRef actor) {
  return client.Subscribe([actor](const MembershipUpdate& update) {
    actor.Tell(kMembershipMethod, EncodeMembershipUpdate(update));
  });
}

MembershipUpdate ForwardMembershipWithSnapshotTo(HeadClient& client, ActorRef actor) {
  // The head answers the subscription with the snapshot and sends the updates
  // after it, but the answer reaches this thread while the client's loop may
  // already be forwarding the first update: those wait behind the snapshot.
  struct Gate {
    std::mutex mutex;
    bool open = false;
    std::vector<MembershipUpdate> held;
  };
  auto gate = std::make_shared<Gate>();
  const MembershipUpdate snapshot = client.Subscribe([gate, actor](const MembershipUpdate& update) {
    std::lock_guard<std::mutex> lock(gate->mutex);
    if (gate->open) {
      actor.Tell(kMembershipMethod, EncodeMembershipUpdate(update));
    } else {
      gate->held.push_back(update);
    }
  });
  std::lock_guard<std::mutex> lock(gate->mutex);
  actor.Tell(kMembershipMethod, EncodeMembershipUpdate(snapshot));
  for (const MembershipUpdate& update : gate->held)
    actor.Tell(kMembershipMethod, EncodeMembershipUpdate(update));
  gate->held.clear();
  gate->open = true;
  return snapshot;
}

}  // namespace elastic::runtime
