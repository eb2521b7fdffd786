#include "runtime/head_client.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "runtime/auth.h"
#include "runtime/log.h"

namespace elastic::runtime {
namespace {

// Slack on top of a server-side wait, so the head's own timeout answer (which
// names the key) arrives before the client gives up on its own.
constexpr std::chrono::milliseconds kWaitSlack{5000};

// The longest the client itself waits for an answer: the head cuts every wait
// far shorter (HeadLimits::max_wait), and a deadline this far out still fits
// the clock (Wait(key, milliseconds::max()) would overflow it).
constexpr std::chrono::milliseconds kLongestWait = std::chrono::hours(24 * 30);

// How long to wait for the answer to a wait of `timeout`.
std::chrono::milliseconds WithSlack(std::chrono::milliseconds timeout) {
  return std::clamp(timeout, std::chrono::milliseconds(0), kLongestWait) + kWaitSlack;
}

// What a request says of timeout: milliseconds, never negative.
uint64_t TimeoutMillis(std::chrono::milliseconds timeout) {
  return static_cast<uint64_t>(std::max<int64_t>(timeout.count(), 0));
}

}  // namespace

HeadClient::HeadClient(HeadClientOptions options)
    : options_(std::move(options)), loop_("head-client") {
  ConnectionCallbacks callbacks;
  callbacks.on_message = [this](const ConnectionPtr&, proto::Envelope::Reader envelope,
                                const std::shared_ptr<IncomingFrame>& frame) {
    OnMessage(envelope, frame);
  };
  callbacks.on_closed = [this](const ConnectionPtr&, const std::string& reason) {
    OnClosed(reason);
  };
  auto dialing = Connection::Dial(loop_, options_.host, options_.port, options_.transport,
                                  options_.token, options_.name, std::move(callbacks));
  try {
    connection_ = dialing.get();
  } catch (const std::exception& e) {
    loop_.Stop();
    throw std::runtime_error("cannot connect to head " + options_.host + ":" +
                             std::to_string(options_.port) + ": " + e.what());
  }
}

HeadClient::~HeadClient() {
  // Close on the loop, then wait for the loop to have run that close, so the
  // head sees an orderly close rather than a reset.
  if (connection_) {
    std::promise<void> closed;
    auto done = closed.get_future();
    connection_->Close("client closed");
    loop_.Post([&closed] { closed.set_value(); });
    done.wait_for(std::chrono::seconds(5));
  }
  loop_.Stop();
  connection_.reset();
}

bool HeadClient::connected() const { return connection_ && connection_->is_open(); }

void HeadClient::OnDisconnect(DisconnectCallback callback) {
  std::string lost;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    on_disconnect_ = callback;
    lost = lost_reason_;
  }
  if (!lost.empty() && callback) callback(lost);
}

HeadClient::Reply HeadClient::Call(const std::function<void(proto::Envelope::Builder)>& fill,
                                   std::chrono::milliseconds wait, const std::string& what) {
  if (loop_.InLoopThread()) {
    throw std::logic_error("HeadClient::" + what +
                           " called from a subscription callback (the client's loop thread)");
  }
  std::future<Reply> answer;
  uint64_t request_id = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!lost_reason_.empty()) {
      throw std::runtime_error(what + ": connection to head lost: " + lost_reason_);
    }
    request_id = next_request_id_++;
    answer = pending_[request_id].get_future();
  }
  capnp::MallocMessageBuilder message;
  auto envelope = message.initRoot<proto::Envelope>();
  envelope.setRequestId(request_id);
  fill(envelope);
  connection_->Send(message);  // a failed send shows up as the lost connection
  if (answer.wait_for(wait) != std::future_status::ready) {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.erase(request_id);
    throw TimeoutError(what + ": head did not answer within " + std::to_string(wait.count()) +
                       " ms");
  }
  Reply reply = answer.get();  // throws when the connection was lost
  auto root = reply->Envelope();
  if (root.which() == proto::Envelope::ERROR) {
    auto error = root.getError();
    const std::string text = what + ": " + error.getMessage().cStr();
    if (error.getCode() == proto::ErrorCode::TIMEOUT) throw TimeoutError(text);
    if (error.getCode() == proto::ErrorCode::NOT_FOUND) throw TimeoutError(text);
    if (error.getCode() == proto::ErrorCode::INVALID_ARGUMENT) throw std::invalid_argument(text);
    if (error.getCode() == proto::ErrorCode::RESOURCE_EXHAUSTED) throw LimitExceededError(text);
    throw std::runtime_error(text);
  }
  return reply;
}

void HeadClient::OnMessage(proto::Envelope::Reader envelope,
                           const std::shared_ptr<IncomingFrame>& frame) {
  if (envelope.which() == proto::Envelope::MEMBERSHIP_UPDATE) {
    OnMembershipUpdate(envelope.getMembershipUpdate());
    return;
  }
  // Every view the head answers with is whole and newer than the updates
  // before it on this connection: the deltas after it build on its records.
  if (envelope.which() == proto::Envelope::VIEW) records_.Read(envelope.getView());
  std::promise<Reply> promise;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pending_.find(envelope.getRequestId());
    if (it == pending_.end()) return;  // the caller gave up waiting
    promise = std::move(it->second);
    pending_.erase(it);
  }
  promise.set_value(frame);
}

void HeadClient::OnMembershipUpdate(proto::MembershipUpdate::Reader update) {
  // A delta naming a member without a record throws: the connection closes
  // naming it (never the case with an honest head).
  const MembershipUpdate read = records_.Read(update);
  UpdateCallback callback;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    callback = on_update_;
  }
  if (callback) callback(read);
}

void HeadClient::OnClosed(const std::string& reason) {
  std::map<uint64_t, std::promise<Reply>> pending;
  DisconnectCallback callback;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    lost_reason_ = reason.empty() ? "closed" : reason;
    pending.swap(pending_);
    callback = on_disconnect_;
  }
  for (auto& [id, promise] : pending) {
    promise.set_exception(
        std::make_exception_ptr(std::runtime_error("connection to head lost: " + reason)));
  }
  if (callback) callback(reason);
}

void HeadClient::Put(const std::string& key, const std::string& value) {
  Call(
      [&](proto::Envelope::Builder envelope) {
        auto put = envelope.initKvPut();
        put.setKey(key);
        put.setValue(AsData(value));
      },
      options_.request_timeout, "Put(" + Quoted(key) + ")");
}

std::optional<std::string> HeadClient::Get(const std::string& key) {
  Reply reply = Call([&](proto::Envelope::Builder envelope) { envelope.initKvGet().setKey(key); },
                     options_.request_timeout, "Get(" + Quoted(key) + ")");
  auto value = reply->Envelope().getKvValue();
  if (!value.getFound()) return std::nullopt;
  return ToBytes(value.getValue());
}

std::string HeadClient::Wait(const std::string& key, std::chrono::milliseconds timeout) {
  Reply reply = Call(
      [&](proto::Envelope::Builder envelope) {
        auto wait = envelope.initKvWait();
        wait.setKey(key);
        wait.setTimeoutMillis(TimeoutMillis(timeout));
      },
      WithSlack(timeout), "Wait(" + Quoted(key) + ")");
  return ToBytes(reply->Envelope().getKvValue().getValue());
}

std::vector<std::string> HeadClient::WaitAll(const std::vector<std::string>& keys,
                                             std::chrono::milliseconds timeout,
                                             const std::vector<ByteRange>& ranges) {
  return CallWaitAll(
      [&](proto::KvWaitAll::Builder wait) {
        auto list = wait.initKeys(static_cast<unsigned>(keys.size()));
        for (size_t i = 0; i < keys.size(); ++i) list.set(static_cast<unsigned>(i), keys[i]);
      },
      keys.size(), [&] { return keys; }, timeout, ranges);
}

std::vector<std::string> HeadClient::AllGather(const std::string& prefix, size_t rank, size_t count,
                                               const std::string& value,
                                               std::chrono::milliseconds timeout,
                                               const std::vector<ByteRange>& ranges) {
  if (count > std::numeric_limits<uint32_t>::max() || rank >= count) {
    throw std::invalid_argument("AllGather: rank " + std::to_string(rank) + " of " +
                                std::to_string(count));
  }
  return CallWaitAll(
      [&](proto::KvWaitAll::Builder wait) {
        wait.setKeyPrefix(prefix);
        wait.setKeyCount(static_cast<uint32_t>(count));
        auto put = wait.initPut();
        put.setKey(IndexedKey(prefix, rank));
        put.setValue(AsData(value));
      },
      count, [&] { return IndexedKeys(prefix, count); }, timeout, ranges);
}

std::vector<std::string> HeadClient::CallWaitAll(
    const std::function<void(proto::KvWaitAll::Builder)>& fill, size_t key_count,
    const std::function<std::vector<std::string>()>& keys_of, std::chrono::milliseconds timeout,
    const std::vector<ByteRange>& ranges) {
  Reply reply = Call(
      [&](proto::Envelope::Builder envelope) {
        auto wait = envelope.initKvWaitAll();
        fill(wait);
        wait.setTimeoutMillis(TimeoutMillis(timeout));
        auto cuts = wait.initRanges(static_cast<unsigned>(ranges.size()));
        for (size_t i = 0; i < ranges.size(); ++i) {
          cuts[static_cast<unsigned>(i)].setOffset(ranges[i].offset);
          cuts[static_cast<unsigned>(i)].setLength(ranges[i].length);
        }
      },
      WithSlack(timeout), "WaitAll(" + std::to_string(key_count) + " keys)");
  auto root = reply->Envelope();
  if (root.which() != proto::Envelope::KV_VALUES) {
    throw std::runtime_error("WaitAll: the head answered with message kind " +
                             std::to_string(static_cast<int>(root.which())) + ", not kvValues");
  }
  auto found = root.getKvValues();
  if (found.getValues().size() != key_count) {
    throw std::runtime_error("WaitAll: the head answered " +
                             std::to_string(found.getValues().size()) + " values for " +
                             std::to_string(key_count) + " keys");
  }
  if (found.getMissing().size() > 0) {
    std::vector<size_t> missing;
    for (uint32_t index : found.getMissing()) missing.push_back(index);
    // The message first: the argument that moves `missing` may be built first.
    const std::string message = "WaitAll: " + DescribeMissingKeys(keys_of(), missing, timeout);
    throw MissingKeysError(message, std::move(missing));
  }
  std::vector<std::string> values;
  values.reserve(key_count);
  for (auto value : found.getValues()) values.push_back(ToBytes(value));
  return values;
}

uint64_t HeadClient::RegisterNode(const std::string& name, uint32_t workers, uint64_t previous_id) {
  Reply reply = Call(
      [&](proto::Envelope::Builder envelope) {
        auto node = envelope.initRegisterNode();
        node.setName(name);
        node.setWorkers(workers);
        node.setPreviousId(previous_id);
      },
      options_.request_timeout, "RegisterNode");
  return reply->Envelope().getNodeRegistered().getNodeId();
}

uint64_t HeadClient::RegisterMember(const std::string& name, uint64_t node_id,
                                    const Endpoint& endpoint, uint64_t previous_id) {
  Reply reply = Call(
      [&](proto::Envelope::Builder envelope) {
        auto member = envelope.initRegisterMember();
        member.setName(name);
        member.setNodeId(node_id);
        ToProto(endpoint, member.initEndpoint());
        member.setPid(static_cast<int32_t>(getpid()));
        member.setPreviousId(previous_id);
      },
      options_.request_timeout, "RegisterMember");
  const uint64_t id = reply->Envelope().getMemberRegistered().getMemberId();
  member_id_.store(id);
  return id;
}

void HeadClient::Leave() {
  Call([](proto::Envelope::Builder envelope) { envelope.setLeave(); }, options_.request_timeout,
       "Leave");
  member_id_.store(0);
}

MembershipUpdate HeadClient::GetMembership() {
  Reply reply = Call([](proto::Envelope::Builder envelope) { envelope.setGetView(); },
                     options_.request_timeout, "GetMembership");
  return FromProto(reply->Envelope().getView());
}

MembershipUpdate HeadClient::Subscribe(UpdateCallback callback) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    on_update_ = std::move(callback);
  }
  Reply reply = Call([](proto::Envelope::Builder envelope) { envelope.setSubscribe(); },
                     options_.request_timeout, "Subscribe");
  return FromProto(reply->Envelope().getView());
}

MembershipView HeadClient::PublishView(const std::vector<uint64_t>& member_ids) {
  Reply reply = Call(
      [&](proto::Envelope::Builder envelope) {
        auto ids =
            envelope.initPublishView().initMemberIds(static_cast<unsigned>(member_ids.size()));
        for (size_t i = 0; i < member_ids.size(); ++i)
          ids.set(static_cast<unsigned>(i), member_ids[i]);
      },
      options_.request_timeout, "PublishView");
  return FromProto(reply->Envelope().getView()).view;
}

void HeadClient::ReportDraining(uint64_t node_id, const std::string& reason) {
  Call(
      [&](proto::Envelope::Builder envelope) {
        auto draining = envelope.initDraining();
        draining.setNodeId(node_id);
        draining.setReason(reason);
      },
      options_.request_timeout, "ReportDraining");
}

void HeadClient::ReportExit(uint64_t node_id, uint32_t worker_index, int32_t pid, int32_t exit_code,
                            int32_t signal) {
  Call(
      [&](proto::Envelope::Builder envelope) {
        auto exited = envelope.initProcessExited();
        exited.setNodeId(node_id);
        exited.setWorkerIndex(worker_index);
        exited.setPid(pid);
        exited.setExitCode(exit_code);
        exited.setSignal(signal);
      },
      options_.request_timeout, "ReportExit");
}

void HeadClient::RegisterActor(const std::string& name, const Endpoint& endpoint) {
  Call(
      [&](proto::Envelope::Builder envelope) {
        auto actor = envelope.initRegisterActor();
        actor.setName(name);
        ToProto(endpoint, actor.initEndpoint());
      },
      options_.request_timeout, "RegisterActor('" + name + "')");
}

Endpoint HeadClient::LookupActor(const std::string& name, std::chrono::milliseconds timeout) {
  Reply reply = Call(
      [&](proto::Envelope::Builder envelope) {
        auto lookup = envelope.initLookupActor();
        lookup.setName(name);
        lookup.setTimeoutMillis(TimeoutMillis(timeout));
      },
      WithSlack(timeout), "LookupActor(" + Quoted(name) + ")");
  return FromProto(reply->Envelope().getActorLocation().getEndpoint());
}

namespace {

std::string RequireEnvironment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    throw std::runtime_error(std::string("environment variable ") + name +
                             " is not set (is this process started by a node agent?)");
  }
  return value;
}

// A positive number of milliseconds from `name`, or `fallback` when unset.
std::chrono::milliseconds MillisecondsFromEnvironment(const char* name,
                                                      std::chrono::milliseconds fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr) return fallback;
  char* end = nullptr;
  const long long parsed = std::strtoll(value, &end, 10);
  if (end == value || *end != '\0' || parsed <= 0) {
    throw std::runtime_error(std::string("environment variable ") + name + "='" + value +
                             "' is not a positive number of milliseconds");
  }
  return std::chrono::milliseconds(parsed);
}

}  // namespace

WorkerEnvironment WorkerEnvironment::FromEnvironment() {
  WorkerEnvironment environment;
  const std::string head = RequireEnvironment("ELASTIC_HEAD_ADDRESS");
  const auto colon = head.rfind(':');
  if (colon == std::string::npos) {
    throw std::runtime_error("ELASTIC_HEAD_ADDRESS='" + head + "' is not host:port");
  }
  environment.head_host = head.substr(0, colon);
  environment.head_port = static_cast<uint16_t>(std::stoul(head.substr(colon + 1)));
  environment.token = RequireEnvironment(kTokenEnvironmentVariable);
  environment.node_id = std::stoull(RequireEnvironment("ELASTIC_NODE_ID"));
  environment.worker_index =
      static_cast<uint32_t>(std::stoul(RequireEnvironment("ELASTIC_WORKER_INDEX")));
  TransportOptions& transport = environment.transport;
  transport.heartbeat_interval =
      MillisecondsFromEnvironment("ELASTIC_HEARTBEAT_MS", transport.heartbeat_interval);
  transport.heartbeat_timeout =
      MillisecondsFromEnvironment("ELASTIC_HEARTBEAT_TIMEOUT_MS", transport.heartbeat_timeout);
  if (transport.heartbeat_timeout <= transport.heartbeat_interval) {
    throw std::runtime_error(
        "ELASTIC_HEARTBEAT_TIMEOUT_MS must be larger than ELASTIC_HEARTBEAT_MS");
  }
  environment.head_reconnect_timeout =
      MillisecondsFromEnvironment("ELASTIC_HEAD_RECONNECT_MS", environment.head_reconnect_timeout);
  return environment;
}

HeadClientOptions WorkerEnvironment::ClientOptions(const std::string& name) const {
  HeadClientOptions options;
  options.host = head_host;
  options.port = head_port;
  options.token = token;
  options.name = name;
  options.transport = transport;
  return options;
}

}  // namespace elastic::runtime
