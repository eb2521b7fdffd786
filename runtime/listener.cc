#include "runtime/listener.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/sockets.h"

namespace elastic::runtime {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff{10};
constexpr std::chrono::milliseconds kMaxBackoff{1000};
// A flood repeats the same event thousands of times a second; one line per
// this long says how many there were.
constexpr std::chrono::seconds kLogInterval{10};

std::vector<uint8_t> RefusedFrame(const std::string& why) {
  capnp::MallocMessageBuilder message;
  auto error = message.initRoot<proto::Envelope>().initRefused();
  error.setCode(proto::ErrorCode::UNAVAILABLE);
  error.setMessage(why);
  const auto words = EncodeFrame(message);
  const auto bytes = words.asBytes();
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

}  // namespace

AcceptBackoff::AcceptBackoff(std::chrono::milliseconds first, std::chrono::milliseconds max)
    : first_(first), max_(max), next_(first) {}

std::chrono::milliseconds AcceptBackoff::Next() {
  const auto delay = next_;
  next_ = std::min(next_ * 2, max_);
  return delay;
}

Listener::Listener(EventLoop& loop, asio::ip::tcp::acceptor& acceptor, std::string component,
                   PreAuthLimits limits, TransportOptions transport, std::string token,
                   ConnectionCallbacks callbacks)
    : loop_(loop),
      acceptor_(acceptor),
      component_(std::move(component)),
      limits_(limits),
      transport_(std::move(transport)),
      token_(std::move(token)),
      callbacks_(std::move(callbacks)),
      refused_total_frame_(RefusedFrame("too many connections are authenticating (limit " +
                                        std::to_string(limits_.max_total) + "); try again")),
      refused_address_frame_(
          RefusedFrame("too many connections from your address are authenticating (limit " +
                       std::to_string(limits_.max_per_address) + "); try again")),
      backoff_(kFirstBackoff, kMaxBackoff),
      retry_timer_(loop.context()),
      accept_error_log_(LogLevel::kWarning, component_, kLogInterval),
      refused_log_(LogLevel::kWarning, component_, kLogInterval) {}

void Listener::Start() { AcceptNext(); }

void Listener::Stop(const std::string& reason) {
  stopped_ = true;
  retry_timer_.cancel();
  std::vector<ConnectionPtr> pending;
  for (const auto& [raw, weak] : pending_) {
    if (ConnectionPtr connection = weak.lock()) pending.push_back(std::move(connection));
  }
  for (const auto& connection : pending) connection->Close(reason);
}

ListenerStats Listener::stats() const {
  ListenerStats stats;
  stats.accept_errors = accept_errors_.load();
  stats.refused_total_limit = refused_total_limit_.load();
  stats.refused_address_limit = refused_address_limit_.load();
  stats.unauthenticated_now = unauthenticated_now_.load();
  return stats;
}

void Listener::AcceptNext() {
  if (stopped_ || !acceptor_.is_open()) return;
  AsyncAcceptCloseOnExec(acceptor_,
                         [this](const asio::error_code& ec, asio::ip::tcp::socket socket) {
                           OnAccepted(ec, std::move(socket));
                         });
}

void Listener::OnAccepted(const asio::error_code& ec, asio::ip::tcp::socket socket) {
  if (ec == asio::error::operation_aborted || stopped_) return;
  if (ec) {
    BackOff(ec);
    return;
  }
  backoff_.Reset();
  asio::error_code endpoint_ec;
  const asio::ip::address address = socket.remote_endpoint(endpoint_ec).address();
  if (endpoint_ec) {
    // The peer is gone already; nothing to serve.
    Drop(socket, {});
  } else if (Admit(address)) {
    auto slot_held = std::make_shared<bool>(true);
    ConnectionCallbacks callbacks = callbacks_;
    callbacks.on_open = [this, address, slot_held,
                         inner = callbacks_.on_open](const ConnectionPtr& connection) {
      if (std::exchange(*slot_held, false)) Release(connection.get(), address);
      if (inner) inner(connection);
    };
    callbacks.on_closed = [this, address, slot_held, inner = callbacks_.on_closed](
                              const ConnectionPtr& connection, const std::string& reason) {
      if (std::exchange(*slot_held, false)) Release(connection.get(), address);
      if (inner) inner(connection, reason);
    };
    ConnectionPtr connection =
        Connection::Accept(loop_, std::move(socket), transport_, token_, std::move(callbacks));
    pending_[connection.get()] = connection;
    unauthenticated_now_.store(pending_.size());
  } else {
    Drop(socket,
         pending_.size() >= limits_.max_total ? refused_total_frame_ : refused_address_frame_);
  }
  AcceptNext();
}

void Listener::BackOff(const asio::error_code& ec) {
  ++accept_errors_;
  const std::chrono::milliseconds delay = backoff_.Next();
  uint64_t suppressed = 0;
  if (accept_error_log_.Admit(&suppressed)) {
    ELASTIC_LOG(kWarning, component_,
                "accept failed: " << ec.message() << " (" << pending_.size()
                                  << " connections in their handshake); retrying in "
                                  << delay.count() << " ms, backing off up to "
                                  << kMaxBackoff.count() << " ms while it fails"
                                  << SuppressedNote(suppressed, "accept failures"));
  }
  retry_timer_.expires_after(delay);
  retry_timer_.async_wait([this](const asio::error_code& timer_ec) {
    if (!timer_ec) AcceptNext();
  });
}

bool Listener::Admit(const asio::ip::address& address) {
  const auto it = per_address_.find(address);
  const size_t from_address = it == per_address_.end() ? 0 : it->second;
  const bool over_total = pending_.size() >= limits_.max_total;
  const bool over_address = from_address >= limits_.max_per_address;
  if (!over_total && !over_address) {
    ++per_address_[address];
    return true;
  }
  ++(over_total ? refused_total_limit_ : refused_address_limit_);
  uint64_t suppressed = 0;
  if (refused_log_.Admit(&suppressed)) {
    const std::string why =
        over_total
            ? std::to_string(pending_.size()) + " connections are in their handshake (limit " +
                  std::to_string(limits_.max_total) + ")"
            : std::to_string(from_address) +
                  " connections from that address are in their handshake (limit " +
                  std::to_string(limits_.max_per_address) + ")";
    ELASTIC_LOG(kWarning, component_,
                "refused a new connection from " << address.to_string() << ": " << why
                                                 << SuppressedNote(suppressed, "refused so"));
  }
  return false;
}

void Listener::Release(Connection* connection, const asio::ip::address& address) {
  pending_.erase(connection);
  unauthenticated_now_.store(pending_.size());
  auto it = per_address_.find(address);
  if (it != per_address_.end() && --it->second == 0) per_address_.erase(it);
}

void Listener::Drop(asio::ip::tcp::socket& socket, const std::vector<uint8_t>& refusal) {
  asio::error_code ignored;
  if (!refusal.empty()) {
    // A new socket's send buffer takes a small frame whole; if it does not,
    // the peer learns only of the close.
    socket.non_blocking(true, ignored);
    socket.send(asio::buffer(refusal), 0, ignored);
  }
  socket.close(ignored);
}

}  // namespace elastic::runtime
