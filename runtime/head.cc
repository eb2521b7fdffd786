#include "runtime/head.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <stdexcept>
#include <unordered_set>

#include "runtime/auth.h"
#include "runtime/log.h"
#include "runtime/sockets.h"

namespace elastic::runtime {
namespace {

HeadOptions Validated(HeadOptions options) {
  if (options.first_member_id == 0) {
    throw std::invalid_argument(
        "HeadOptions.first_member_id must be >= 1 (member id 0 means none)");
  }
  if (options.first_node_id == 0) {
    throw std::invalid_argument("HeadOptions.first_node_id must be >= 1 (node id 0 means none)");
  }
  const HeadLimits& limits = options.limits;
  if (limits.kv.max_key_bytes == 0 || limits.kv.max_keys == 0 || limits.max_name_bytes == 0 ||
      limits.max_waits_per_session == 0 || limits.max_wait.count() <= 0) {
    throw std::invalid_argument(
        "HeadOptions.limits: max_key_bytes, max_keys, max_name_bytes, max_waits_per_session and "
        "max_wait must be positive");
  }
  return options;
}

std::string ResolveToken(const HeadOptions& options) {
  asio::error_code ec;
  const auto address = asio::ip::make_address(options.listen_host, ec);
  if (ec) {
    throw std::invalid_argument("head listen address '" + options.listen_host +
                                "' is not an IP address");
  }
  if (!address.is_loopback() && options.token_file.empty()) {
    throw std::invalid_argument("listening on " + options.listen_host +
                                " (not loopback) requires a token file (--token-file)");
  }
  if (!options.token_file.empty()) return ReadTokenFile(options.token_file);
  if (!options.token.empty()) {
    const std::string weakness = TokenWeakness(options.token);
    if (!weakness.empty()) {
      throw std::invalid_argument("HeadOptions::token is too weak: " + weakness +
                                  "; use GenerateToken() or a token file (" +
                                  HowToMakeATokenFile("FILE") + ")");
    }
    return options.token;
  }
  return GenerateToken();
}

// "host:port" as the actor directory holds it (Endpoint::ToString); nullopt
// for anything else.
std::optional<Endpoint> ParseLocation(const std::string& location) {
  const auto colon = location.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  const char* const end = location.data() + location.size();
  uint16_t port = 0;
  const auto [digits_end, error] = std::from_chars(location.data() + colon + 1, end, port);
  if (error != std::errc() || digits_end != end) return std::nullopt;
  return Endpoint{location.substr(0, colon), port};
}

std::string DescribeExit(proto::ProcessExited::Reader exited) {
  std::string detail = "worker " + std::to_string(exited.getWorkerIndex()) + " (pid " +
                       std::to_string(exited.getPid()) + ") ";
  if (exited.getSignal() != 0)
    return detail + "killed by signal " + std::to_string(exited.getSignal());
  return detail + "exited with code " + std::to_string(exited.getExitCode());
}

}  // namespace

struct Head::Member {
  MemberInfo info;
  // record_changes_ when info last changed: a delta carries the records that
  // changed since the previous update (Broadcast).
  uint64_t changed_at = 0;
};

struct Head::Session {
  struct PendingWait {
    KvTable* table;
    std::string key;  // empty for a wait of many keys (KvWaitAll)
    uint64_t ticket;
    std::shared_ptr<asio::steady_timer> timer;
    bool many = false;  // a KvTable::WaitForAll ticket

    void Cancel() const {
      timer->cancel();
      if (many) {
        table->CancelWaitAll(ticket);
      } else {
        table->CancelWait(key, ticket);
      }
    }
  };

  ConnectionPtr connection;
  uint64_t member_id = 0;
  uint64_t node_id = 0;
  bool subscribed = false;
  std::map<uint64_t, PendingWait> waits;  // by wait serial
  uint64_t next_wait_serial = 1;
  std::vector<std::string> actors;  // names this session registered
};

template <typename F>
auto Head::RunOnLoop(F f) -> decltype(f()) {
  using Result = decltype(f());
  auto task = std::make_shared<std::packaged_task<Result()>>(std::move(f));
  auto future = task->get_future();
  loop_.Post([task] { (*task)(); });
  return future.get();
}

Head::Head(HeadOptions options)
    : options_(Validated(std::move(options))),
      token_(ResolveToken(options_)),
      loop_("head"),
      acceptor_(loop_.context()),
      generation_(options_.first_generation),
      next_member_id_(options_.first_member_id),
      next_node_id_(options_.first_node_id),
      kv_(options_.limits.kv, "key-value store"),
      actors_(options_.limits.kv, "actor directory"),
      refusals_log_(LogLevel::kWarning, "head", std::chrono::seconds(10)) {
  const asio::ip::tcp::endpoint endpoint(asio::ip::make_address(options_.listen_host),
                                         options_.port);
  const asio::error_code ec = ListenCloseOnExec(acceptor_, endpoint, /*reuse_address=*/true);
  if (ec) {
    throw std::runtime_error("head cannot listen on " + options_.listen_host + ":" +
                             std::to_string(options_.port) + ": " + ec.message());
  }
  port_ = acceptor_.local_endpoint().port();
  ELASTIC_LOG(kInfo, "head", "listening on " << options_.listen_host << ":" << port_);
  listener_ = std::make_unique<Listener>(loop_, acceptor_, "head", options_.pre_auth,
                                         options_.transport, token_, SessionCallbacks());
  loop_.Post([this] { listener_->Start(); });
}

Head::~Head() {
  RunOnLoop([this] {
    // From here on nobody hears of the members it drops: each close would
    // otherwise send every session still open a view of everyone else (M
    // closes x M sessions x M members of bytes).
    stopping_ = true;
    asio::error_code ignored;
    acceptor_.close(ignored);
    listener_->Stop("head shutting down");
    for (auto& [raw, session] : sessions_) session->connection->Close("head shutting down");
    return 0;
  });
  RunOnLoop([] { return 0; });  // the closes posted above have run
  loop_.Stop();
  sessions_.clear();
}

ConnectionCallbacks Head::SessionCallbacks() {
  ConnectionCallbacks callbacks;
  callbacks.on_open = [this](const ConnectionPtr& connection) { OnOpen(connection); };
  callbacks.on_message = [this](const ConnectionPtr& connection, proto::Envelope::Reader envelope,
                                const std::shared_ptr<IncomingFrame>&) {
    OnMessage(connection, envelope);
  };
  callbacks.on_closed = [this](const ConnectionPtr& connection, const std::string& reason) {
    OnClosed(connection, reason);
  };
  callbacks.on_heartbeats_missed = [this](const ConnectionPtr& connection, uint64_t missed) {
    auto it = sessions_.find(connection.get());
    if (it != sessions_.end() && it->second->member_id != 0) heartbeats_missed_ += missed;
  };
  return callbacks;
}

void Head::OnOpen(const ConnectionPtr& connection) {
  auto session = std::make_unique<Session>();
  session->connection = connection;
  sessions_[connection.get()] = std::move(session);
}

void Head::OnClosed(const ConnectionPtr& connection, const std::string& reason) {
  auto it = sessions_.find(connection.get());
  if (it == sessions_.end()) return;  // never authenticated
  std::unique_ptr<Session> session = std::move(it->second);
  sessions_.erase(it);
  for (auto& [serial, wait] : session->waits) wait.Cancel();
  for (const auto& name : session->actors) actors_.Erase(name);
  if (session->node_id != 0) {
    ELASTIC_LOG(kInfo, "head", "node " << session->node_id << " disconnected: " << reason);
    nodes_.erase(session->node_id);
    nodes_connected_.store(nodes_.size());
  }
  if (session->member_id != 0) {
    RemoveMember(session->member_id, MembershipEventKind::kFailed, "connection lost: " + reason);
  }
}

void Head::Send(const ConnectionPtr& connection, capnp::MessageBuilder& message) {
  if (connection->Send(message)) ++messages_sent_;
}

void Head::ReplyOk(const ConnectionPtr& connection, uint64_t request_id) {
  capnp::MallocMessageBuilder message;
  auto envelope = message.initRoot<proto::Envelope>();
  envelope.setRequestId(request_id);
  envelope.setOk();
  Send(connection, message);
}

void Head::ReplyError(const ConnectionPtr& connection, uint64_t request_id, proto::ErrorCode code,
                      const std::string& text) {
  capnp::MallocMessageBuilder message;
  auto envelope = message.initRoot<proto::Envelope>();
  envelope.setRequestId(request_id);
  SetError(envelope, code, text);
  Send(connection, message);
}

void Head::OnMessage(const ConnectionPtr& connection, proto::Envelope::Reader envelope) {
  auto it = sessions_.find(connection.get());
  if (it == sessions_.end()) return;
  Session& session = *it->second;
  const uint64_t id = envelope.getRequestId();
  // Short names for the table below.
  using E = proto::Envelope;
  const E::Reader& e = envelope;
  ++messages_received_;
  // One line per kind; the kinds the head only sends (replies, views, errors)
  // and any it does not know are refused.
  // clang-format off
  switch (e.which()) {
    case E::KV_PUT: return HandleKvPut(session, id, e.getKvPut());
    case E::KV_GET: return HandleKvGet(session, id, e.getKvGet());
    case E::KV_WAIT: return HandleKvWait(session, id, e.getKvWait());
    case E::KV_WAIT_ALL: return HandleKvWaitAll(session, id, e.getKvWaitAll());
    case E::REGISTER_NODE: return HandleRegisterNode(session, id, e.getRegisterNode());
    case E::REGISTER_MEMBER: return HandleRegisterMember(session, id, e.getRegisterMember());
    case E::LEAVE: return HandleLeave(session, id);
    case E::SUBSCRIBE: return HandleView(session, id, /*subscribe=*/true);
    case E::GET_VIEW: return HandleView(session, id, /*subscribe=*/false);
    case E::PUBLISH_VIEW: return HandlePublishView(session, id, e.getPublishView());
    case E::DRAINING: return HandleDraining(session, id, e.getDraining());
    case E::PROCESS_EXITED: return HandleProcessExited(session, id, e.getProcessExited());
    case E::REGISTER_ACTOR: return HandleRegisterActor(session, id, e.getRegisterActor());
    case E::LOOKUP_ACTOR: return HandleLookupActor(session, id, e.getLookupActor());
    default: return HandleUnknown(session, id, e.which());
  }
  // clang-format on
}

void Head::HandleKvPut(Session& session, uint64_t request_id, proto::KvPut::Reader put) {
  try {
    kv_.Put(put.getKey().cStr(), ToBytes(put.getValue()));
  } catch (const LimitExceededError& e) {
    Refuse(session.connection, request_id, e.what());
    return;
  }
  NoteKvSize();
  ReplyOk(session.connection, request_id);
}

void Head::HandleKvGet(Session& session, uint64_t request_id, proto::KvGet::Reader get) {
  const std::string key = get.getKey().cStr();
  try {
    kv_.CheckKey(key);
  } catch (const LimitExceededError& e) {
    Refuse(session.connection, request_id, e.what());
    return;
  }
  auto value = kv_.Get(key);
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<proto::Envelope>();
  reply.setRequestId(request_id);
  auto kv_value = reply.initKvValue();
  kv_value.setFound(value.has_value());
  if (value) kv_value.setValue(AsData(*value));
  Send(session.connection, message);
}

void Head::HandleRegisterNode(Session& session, uint64_t request_id,
                              proto::RegisterNode::Reader request) {
  const ConnectionPtr& connection = session.connection;
  if (session.node_id != 0) {
    ReplyError(connection, request_id, proto::ErrorCode::INVALID_ARGUMENT,
               "this connection already registered node " + std::to_string(session.node_id));
    return;
  }
  const std::string name = request.getName().cStr();
  const std::string too_long =
      OverLimit("node name", name, options_.limits.max_name_bytes, "max_name_bytes");
  if (!too_long.empty()) {
    Refuse(connection, request_id, too_long);
    return;
  }
  session.node_id = ClaimId(
      request.getPreviousId(), options_.first_node_id,
      [this](uint64_t id) { return nodes_.count(id) > 0; }, next_node_id_);
  nodes_[session.node_id] = name;
  nodes_connected_.store(nodes_.size());
  ELASTIC_LOG(kInfo, "head",
              "node " << session.node_id << " (" << nodes_[session.node_id] << ") registered");
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<proto::Envelope>();
  reply.setRequestId(request_id);
  reply.initNodeRegistered().setNodeId(session.node_id);
  Send(connection, message);
}

void Head::HandleLeave(Session& session, uint64_t request_id) {
  if (session.member_id != 0) {
    const uint64_t id = session.member_id;
    session.member_id = 0;
    RemoveMember(id, MembershipEventKind::kLeft, "left");
  }
  ReplyOk(session.connection, request_id);
}

void Head::HandleView(Session& session, uint64_t request_id, bool subscribe) {
  if (subscribe) session.subscribed = true;
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<proto::Envelope>();
  reply.setRequestId(request_id);
  ToProto(Snapshot(MembershipEventKind::kSnapshot, 0, 0, ""), reply.initView());
  Send(session.connection, message);
}

void Head::HandlePublishView(Session& session, uint64_t request_id,
                             proto::PublishView::Reader publish) {
  std::vector<uint64_t> ids;
  for (uint64_t id : publish.getMemberIds()) ids.push_back(id);
  try {
    PublishOnLoop(ids);
  } catch (const std::invalid_argument& e) {
    ReplyError(session.connection, request_id, proto::ErrorCode::INVALID_ARGUMENT, e.what());
    return;
  }
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<proto::Envelope>();
  reply.setRequestId(request_id);
  ToProto(Snapshot(MembershipEventKind::kViewChanged, 0, 0, ""), reply.initView());
  Send(session.connection, message);
}

void Head::HandleDraining(Session& session, uint64_t request_id, proto::Draining::Reader draining) {
  const ConnectionPtr& connection = session.connection;
  const uint64_t node_id = draining.getNodeId();
  const std::string too_long = OverLimit("draining reason", draining.getReason().cStr(),
                                         options_.limits.max_reason_bytes, "max_reason_bytes");
  if (!too_long.empty()) {
    Refuse(connection, request_id, too_long);
    return;
  }
  if (nodes_.count(node_id) == 0) {
    ReplyError(connection, request_id, proto::ErrorCode::NOT_FOUND,
               "no node " + std::to_string(node_id));
    return;
  }
  for (auto& [id, member] : members_) {
    if (member.info.node_id == node_id && !member.info.draining) {
      member.info.draining = true;
      member.changed_at = ++record_changes_;
    }
  }
  ELASTIC_LOG(kInfo, "head", "node " << node_id << " is draining: " << draining.getReason().cStr());
  Broadcast(Snapshot(MembershipEventKind::kDraining, 0, node_id, draining.getReason().cStr()));
  ReplyOk(connection, request_id);
}

void Head::HandleUnknown(Session& session, uint64_t request_id, proto::Envelope::Which which) {
  ReplyError(session.connection, request_id, proto::ErrorCode::INVALID_ARGUMENT,
             "the head does not handle message kind " + std::to_string(static_cast<int>(which)));
}

void Head::HandleKvWait(Session& session, uint64_t request_id, proto::KvWait::Reader wait) {
  const std::string key = wait.getKey().cStr();
  ConnectionPtr connection = session.connection;
  try {
    kv_.CheckKey(key);
  } catch (const LimitExceededError& e) {
    Refuse(connection, request_id, e.what());
    return;
  }
  const std::string too_many = TooManyWaits(session, key);
  if (!too_many.empty()) {
    Refuse(connection, request_id, too_many);
    return;
  }
  const auto timeout = ClampedWait(wait.getTimeoutMillis());
  const uint64_t serial = session.next_wait_serial++;
  auto timer = std::make_shared<asio::steady_timer>(loop_.context());
  const uint64_t ticket =
      kv_.WaitFor(key, [this, connection, request_id, serial, timer](const std::string& value) {
        timer->cancel();
        auto it = sessions_.find(connection.get());
        if (it != sessions_.end()) it->second->waits.erase(serial);
        capnp::MallocMessageBuilder message;
        auto reply = message.initRoot<proto::Envelope>();
        reply.setRequestId(request_id);
        auto kv_value = reply.initKvValue();
        kv_value.setFound(true);
        kv_value.setValue(AsData(value));
        Send(connection, message);
      });
  if (ticket == 0) return;  // the key was there; answered already
  session.waits[serial] = Session::PendingWait{&kv_, key, ticket, timer};
  timer->expires_after(timeout);
  timer->async_wait([this, connection, request_id, serial, key,
                     timeout](const asio::error_code& ec) {
    if (ec) return;
    auto it = sessions_.find(connection.get());
    if (it == sessions_.end()) return;
    auto wait_it = it->second->waits.find(serial);
    if (wait_it == it->second->waits.end()) return;
    kv_.CancelWait(key, wait_it->second.ticket);
    it->second->waits.erase(wait_it);
    ReplyError(connection, request_id, proto::ErrorCode::TIMEOUT,
               "key '" + key + "' was not set within " + std::to_string(timeout.count()) + " ms");
  });
}

void Head::HandleKvWaitAll(Session& session, uint64_t request_id, proto::KvWaitAll::Reader wait) {
  ConnectionPtr connection = session.connection;
  const auto keys_reader = wait.getKeys();
  const auto ranges_reader = wait.getRanges();
  const uint64_t key_count = uint64_t{keys_reader.size()} + wait.getKeyCount();
  // Counted before anything is copied: a request naming a million keys costs
  // the head nothing but this refusal.
  std::string refusal;
  if (key_count > options_.limits.kv.max_keys_per_wait) {
    refusal = "wait for " + std::to_string(key_count) + " keys refused: over the limit of " +
              std::to_string(options_.limits.kv.max_keys_per_wait) + " (max_keys_per_wait)";
  } else if (ranges_reader.size() > options_.limits.max_ranges_per_wait) {
    refusal = "wait for " + std::to_string(key_count) +
              " keys refused: " + std::to_string(ranges_reader.size()) +
              " byte ranges, over the limit of " +
              std::to_string(options_.limits.max_ranges_per_wait) + " (max_ranges_per_wait)";
  } else {
    refusal = TooManyWaits(session, std::to_string(key_count) + " keys");
  }
  if (!refusal.empty()) {
    Refuse(connection, request_id, refusal);
    return;
  }
  const KvTable::KeyList keys = KeysOf(wait);
  auto ranges = std::make_shared<std::vector<ByteRange>>();
  for (auto range : ranges_reader) {
    ranges->push_back(
        ByteRange{static_cast<size_t>(range.getOffset()), static_cast<size_t>(range.getLength())});
  }
  if (wait.hasPut()) {
    // An all-gather's own key, set before its wait. Refused like a KvPut, and
    // then nothing is waited for; a wait that would be refused sets nothing.
    try {
      for (const std::string& key : *keys) kv_.CheckKey(key);
      kv_.Put(wait.getPut().getKey().cStr(), ToBytes(wait.getPut().getValue()));
    } catch (const LimitExceededError& e) {
      Refuse(connection, request_id, e.what());
      return;
    }
    NoteKvSize();
  }
  const auto timeout = ClampedWait(wait.getTimeoutMillis());
  const uint64_t serial = session.next_wait_serial++;
  auto timer = std::make_shared<asio::steady_timer>(loop_.context());
  uint64_t ticket = 0;
  try {
    ticket = kv_.WaitForAll(keys, [this, connection, request_id, serial, timer, keys, ranges] {
      timer->cancel();
      auto it = sessions_.find(connection.get());
      if (it != sessions_.end()) it->second->waits.erase(serial);
      ReplyValues(connection, request_id, keys, *ranges);
    });
  } catch (const LimitExceededError& e) {
    Refuse(connection, request_id, e.what());
    return;
  }
  if (ticket == 0) return;  // every key was there; answered already
  session.waits[serial] = Session::PendingWait{&kv_, "", ticket, timer, /*many=*/true};
  timer->expires_after(timeout);
  timer->async_wait(
      [this, connection, request_id, serial, keys, ranges](const asio::error_code& ec) {
        if (ec) return;
        auto it = sessions_.find(connection.get());
        if (it == sessions_.end()) return;
        auto wait_it = it->second->waits.find(serial);
        if (wait_it == it->second->waits.end()) return;
        kv_.CancelWaitAll(wait_it->second.ticket);
        it->second->waits.erase(wait_it);
        // The keys that are there still travel: the caller can tell who came.
        ReplyValues(connection, request_id, keys, *ranges);
      });
}

KvTable::KeyList Head::KeysOf(proto::KvWaitAll::Reader wait) {
  const std::string prefix = wait.getKeyPrefix().cStr();
  const uint32_t count = wait.getKeyCount();
  const bool all_gather = wait.getKeys().size() == 0 && count > 0;
  if (all_gather) {
    auto cached = indexed_keys_.find({prefix, count});
    if (cached != indexed_keys_.end()) {
      if (KvTable::KeyList keys = cached->second.lock()) return keys;
    }
  }
  auto keys = std::make_shared<std::vector<std::string>>();
  keys->reserve(wait.getKeys().size() + count);
  for (auto key : wait.getKeys()) keys->push_back(key.cStr());
  for (uint32_t i = 0; i < count; ++i) keys->push_back(IndexedKey(prefix, i));
  if (all_gather) {
    // Lists nobody waits for any more go first: the map stays as small as
    // the number of all-gathers under way.
    for (auto it = indexed_keys_.begin(); it != indexed_keys_.end();) {
      it = it->second.expired() ? indexed_keys_.erase(it) : std::next(it);
    }
    indexed_keys_[{prefix, count}] = keys;
  }
  return keys;
}

const std::vector<const std::string*>& Head::Resolve(const KvTable::KeyList& keys) {
  if (resolved_.keys != keys || resolved_.version != kv_.version()) {
    resolved_.keys = keys;
    resolved_.version = kv_.version();
    resolved_.found.resize(keys->size());
    for (size_t i = 0; i < keys->size(); ++i) resolved_.found[i] = kv_.Find((*keys)[i]);
  }
  return resolved_.found;
}

void Head::ReplyValues(const ConnectionPtr& connection, uint64_t request_id,
                       const KvTable::KeyList& key_list, const std::vector<ByteRange>& ranges) {
  // The values are found once and copied straight into the reply, range by
  // range: when the last key of a rendezvous arrives, n replies of n values
  // each are built at once, and a string per value would be n^2 allocations.
  const std::vector<std::string>& keys = *key_list;
  const std::vector<const std::string*>& found = Resolve(key_list);
  std::vector<size_t> missing;  // now, whatever the caller saw: a key can also have gone
  // What the frame will hold: each value padded to a word plus its pointer,
  // the missing indices, and the envelope around them.
  size_t frame_bytes = 1024 + 8 * keys.size();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (found[i] == nullptr) {
      missing.push_back(i);
      frame_bytes += 4;
      continue;
    }
    frame_bytes += (SlicedSize(*found[i], ranges) + 7) / 8 * 8;
  }
  if (frame_bytes > options_.transport.max_frame_bytes) {
    Refuse(connection, request_id,
           "the values of " + std::to_string(keys.size()) + " keys come to " +
               std::to_string(frame_bytes) + " bytes, over the frame limit of " +
               std::to_string(options_.transport.max_frame_bytes) +
               " (max_frame_bytes); wait for fewer keys or fewer bytes of each (ranges)");
    return;
  }
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<proto::Envelope>();
  reply.setRequestId(request_id);
  auto values = reply.initKvValues();
  auto list = values.initValues(static_cast<unsigned>(keys.size()));
  for (size_t i = 0; i < keys.size(); ++i) {
    if (found[i] == nullptr) continue;
    auto data =
        list.init(static_cast<unsigned>(i), static_cast<unsigned>(SlicedSize(*found[i], ranges)));
    SliceInto(*found[i], ranges, reinterpret_cast<char*>(data.begin()));
  }
  auto absent = values.initMissing(static_cast<unsigned>(missing.size()));
  for (size_t i = 0; i < missing.size(); ++i)
    absent.set(static_cast<unsigned>(i), static_cast<uint32_t>(missing[i]));
  Send(connection, message);
}

void Head::HandleLookupActor(Session& session, uint64_t request_id,
                             proto::LookupActor::Reader lookup) {
  const std::string name = lookup.getName().cStr();
  ConnectionPtr connection = session.connection;
  std::string refusal =
      OverLimit("actor name", name, options_.limits.max_name_bytes, "max_name_bytes");
  if (refusal.empty()) refusal = TooManyWaits(session, name);
  if (!refusal.empty()) {
    Refuse(connection, request_id, refusal);
    return;
  }
  const auto timeout = ClampedWait(lookup.getTimeoutMillis());
  const uint64_t serial = session.next_wait_serial++;
  auto timer = std::make_shared<asio::steady_timer>(loop_.context());
  const uint64_t ticket = actors_.WaitFor(
      name, [this, connection, request_id, serial, timer, name](const std::string& location) {
        timer->cancel();
        auto it = sessions_.find(connection.get());
        if (it != sessions_.end()) it->second->waits.erase(serial);
        // The head wrote the location itself; still, a value it cannot read
        // fails this one lookup, never the head.
        const std::optional<Endpoint> endpoint = ParseLocation(location);
        if (!endpoint) {
          ReplyError(connection, request_id, proto::ErrorCode::INTERNAL,
                     "actor " + Quoted(name) + " has a malformed location " + Quoted(location));
          return;
        }
        capnp::MallocMessageBuilder message;
        auto reply = message.initRoot<proto::Envelope>();
        reply.setRequestId(request_id);
        auto found = reply.initActorLocation();
        found.setName(name);
        ToProto(*endpoint, found.initEndpoint());
        Send(connection, message);
      });
  if (ticket == 0) return;
  session.waits[serial] = Session::PendingWait{&actors_, name, ticket, timer};
  timer->expires_after(timeout);
  timer->async_wait(
      [this, connection, request_id, serial, name, timeout](const asio::error_code& ec) {
        if (ec) return;
        auto it = sessions_.find(connection.get());
        if (it == sessions_.end()) return;
        auto wait_it = it->second->waits.find(serial);
        if (wait_it == it->second->waits.end()) return;
        actors_.CancelWait(name, wait_it->second.ticket);
        it->second->waits.erase(wait_it);
        ReplyError(connection, request_id, proto::ErrorCode::NOT_FOUND,
                   "no actor named '" + name + "' registered within " +
                       std::to_string(timeout.count()) + " ms");
      });
}

std::string Head::OverLimit(const std::string& what, const std::string& text, size_t limit,
                            const char* limit_name) {
  if (text.size() <= limit) return "";
  return what + " " + Quoted(text) + " is " + std::to_string(text.size()) +
         " bytes, over the limit of " + std::to_string(limit) + " (" + limit_name + ")";
}

std::string Head::TooManyWaits(const Session& session, const std::string& key) const {
  if (session.waits.size() < options_.limits.max_waits_per_session) return "";
  return "wait for " + Quoted(key) + " refused: this connection has " +
         std::to_string(session.waits.size()) + " waits pending, the limit (max_waits_per_session)";
}

std::chrono::milliseconds Head::ClampedWait(uint64_t millis) const {
  const auto most = options_.limits.max_wait;
  if (millis > static_cast<uint64_t>(most.count())) return most;
  return std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(millis));
}

void Head::Refuse(const ConnectionPtr& connection, uint64_t request_id, const std::string& why) {
  ++requests_refused_;
  uint64_t suppressed = 0;
  if (refusals_log_.Admit(&suppressed)) {
    ELASTIC_LOG(kWarning, "head",
                "refused a request: " << why << SuppressedNote(suppressed, "refusals"));
  }
  ReplyError(connection, request_id, proto::ErrorCode::RESOURCE_EXHAUSTED, why);
}

void Head::AdvanceGeneration() {
  ++generation_;
  if (generation_ < 2) return;
  const size_t erased = kv_.EraseGenerationsBefore(generation_ - 1);
  if (erased > 0) {
    ELASTIC_LOG(kDebug, "head",
                "deleted " << erased << " keys of generations before " << generation_ - 1);
    NoteKvSize();
  }
}

void Head::NoteKvSize() {
  kv_keys_.store(kv_.size());
  kv_bytes_.store(kv_.total_bytes());
}

uint64_t Head::ClaimId(uint64_t previous, uint64_t first,
                       const std::function<bool(uint64_t)>& in_use, std::atomic<uint64_t>& next) {
  // An id from an earlier head (below this one's first) or one this head never
  // issued, and free: the process keeps its name across the restart.
  if (previous != 0 && (previous < first || previous >= next) && !in_use(previous)) {
    next.store(std::max(next.load(), previous + 1));
    return previous;
  }
  return next++;
}

void Head::HandleRegisterMember(Session& session, uint64_t request_id,
                                proto::RegisterMember::Reader request) {
  if (session.member_id != 0) {
    ReplyError(session.connection, request_id, proto::ErrorCode::INVALID_ARGUMENT,
               "this connection is already member " + std::to_string(session.member_id));
    return;
  }
  const std::string name = request.getName().cStr();
  const std::string host = request.getEndpoint().getHost().cStr();
  std::string refusal =
      OverLimit("member name", name, options_.limits.max_name_bytes, "max_name_bytes");
  if (refusal.empty()) {
    refusal =
        OverLimit("member endpoint host", host, options_.limits.max_name_bytes, "max_name_bytes");
  }
  if (!refusal.empty()) {
    Refuse(session.connection, request_id, refusal);
    return;
  }
  Member member;
  member.info.id = ClaimId(
      request.getPreviousId(), options_.first_member_id,
      [this](uint64_t id) { return members_.count(id) > 0; }, next_member_id_);
  member.info.name = name;
  member.info.node_id = request.getNodeId();
  member.info.endpoint = FromProto(request.getEndpoint());
  member.info.pid = request.getPid();
  session.member_id = member.info.id;
  member.changed_at = ++record_changes_;
  members_[member.info.id] = member;
  if (member.info.node_id != 0)
    member_by_pid_[{member.info.node_id, member.info.pid}] = member.info.id;
  if (options_.admit_joins) {
    view_.push_back(member.info.id);
    AdvanceGeneration();
  }
  ELASTIC_LOG(kInfo, "head",
              "member " << member.info.id << " (" << member.info.name << ") joined; generation "
                        << generation_);
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<proto::Envelope>();
  reply.setRequestId(request_id);
  auto registered = reply.initMemberRegistered();
  registered.setMemberId(member.info.id);
  registered.setGeneration(generation_);
  Send(session.connection, message);
  Broadcast(Snapshot(MembershipEventKind::kJoined, member.info.id, member.info.node_id,
                     member.info.name));
}

void Head::HandleRegisterActor(Session& session, uint64_t request_id,
                               proto::RegisterActor::Reader request) {
  const std::string name = request.getName().cStr();
  if (name.empty()) {
    ReplyError(session.connection, request_id, proto::ErrorCode::INVALID_ARGUMENT,
               "actor name is empty");
    return;
  }
  std::string refusal =
      OverLimit("actor name", name, options_.limits.max_name_bytes, "max_name_bytes");
  if (refusal.empty()) {
    refusal = OverLimit("actor endpoint host", request.getEndpoint().getHost().cStr(),
                        options_.limits.max_name_bytes, "max_name_bytes");
  }
  if (!refusal.empty()) {
    Refuse(session.connection, request_id, refusal);
    return;
  }
  if (actors_.Get(name).has_value()) {
    ReplyError(session.connection, request_id, proto::ErrorCode::INVALID_ARGUMENT,
               "an actor named '" + name + "' is already registered");
    return;
  }
  const Endpoint endpoint = FromProto(request.getEndpoint());
  try {
    actors_.Put(name, endpoint.ToString());
  } catch (const LimitExceededError& e) {
    Refuse(session.connection, request_id, e.what());
    return;
  }
  session.actors.push_back(name);
  ReplyOk(session.connection, request_id);
}

void Head::HandleProcessExited(Session& session, uint64_t request_id,
                               proto::ProcessExited::Reader exited) {
  uint64_t member_id = 0;
  auto it = member_by_pid_.find({exited.getNodeId(), exited.getPid()});
  if (it != member_by_pid_.end()) member_id = it->second;
  const std::string detail = DescribeExit(exited);
  ELASTIC_LOG(kInfo, "head", "node " << exited.getNodeId() << ": " << detail);
  Broadcast(Snapshot(MembershipEventKind::kExited, member_id, exited.getNodeId(), detail));
  ReplyOk(session.connection, request_id);
}

void Head::RemoveMember(uint64_t member_id, MembershipEventKind kind, const std::string& detail) {
  auto it = members_.find(member_id);
  if (it == members_.end()) return;
  const uint64_t node_id = it->second.info.node_id;
  members_.erase(it);
  auto in_view = std::find(view_.begin(), view_.end(), member_id);
  if (in_view != view_.end()) {
    view_.erase(in_view);
    AdvanceGeneration();
  }
  ELASTIC_LOG(kInfo, "head",
              "member " << member_id << " " << ToString(kind) << " (" << detail << "); generation "
                        << generation_);
  Broadcast(Snapshot(kind, member_id, node_id, detail));
}

void Head::PublishOnLoop(const std::vector<uint64_t>& member_ids) {
  std::set<uint64_t> seen;
  for (uint64_t id : member_ids) {
    if (members_.count(id) == 0) {
      throw std::invalid_argument("member " + std::to_string(id) + " is not a live member");
    }
    if (!seen.insert(id).second) {
      throw std::invalid_argument("member " + std::to_string(id) + " appears twice");
    }
  }
  view_ = member_ids;
  AdvanceGeneration();
  ELASTIC_LOG(kInfo, "head",
              "published view of " << view_.size() << " members; generation " << generation_);
  Broadcast(Snapshot(MembershipEventKind::kViewChanged, 0, 0, ""));
}

MembershipUpdate Head::Snapshot(MembershipEventKind kind, uint64_t member_id, uint64_t node_id,
                                const std::string& detail) const {
  MembershipUpdate update;
  update.kind = kind;
  update.member_id = member_id;
  update.node_id = node_id;
  update.detail = detail;
  update.view.generation = generation_;
  update.view.members.reserve(view_.size());
  for (uint64_t id : view_) update.view.members.push_back(members_.at(id).info);
  const std::unordered_set<uint64_t> in_view(view_.begin(), view_.end());
  for (const auto& [id, member] : members_) {
    if (in_view.count(id) == 0) update.pending.push_back(member.info);
  }
  return update;
}

void Head::Broadcast(const MembershipUpdate& update) {
  if (stopping_) return;
  // Every subscriber has had its snapshot and every update since: it holds
  // the records of all members but those changed since the previous update.
  const uint64_t previous = broadcast_changes_;
  broadcast_changes_ = record_changes_;
  capnp::MallocMessageBuilder message;
  ToProtoDelta(
      update,
      [&](const MemberInfo& record) { return members_.at(record.id).changed_at > previous; },
      message.initRoot<proto::Envelope>().initMembershipUpdate());
  for (auto& [raw, session] : sessions_) {
    if (session->subscribed) Send(session->connection, message);
  }
}

MembershipUpdate Head::Membership() {
  return RunOnLoop([this] { return Snapshot(MembershipEventKind::kSnapshot, 0, 0, ""); });
}

MembershipView Head::PublishView(const std::vector<uint64_t>& member_ids) {
  return RunOnLoop([this, member_ids] {
    PublishOnLoop(member_ids);
    return Snapshot(MembershipEventKind::kViewChanged, 0, 0, "").view;
  });
}

HeadStats Head::stats() const {
  HeadStats stats;
  stats.messages_received = messages_received_.load();
  stats.messages_sent = messages_sent_.load();
  stats.heartbeats_missed = heartbeats_missed_.load();
  stats.nodes_connected = nodes_connected_.load();
  stats.next_member_id = next_member_id_.load();
  stats.next_node_id = next_node_id_.load();
  stats.kv_keys = kv_keys_.load();
  stats.kv_bytes = kv_bytes_.load();
  stats.requests_refused = requests_refused_.load();
  return stats;
}

}  // namespace elastic::runtime
