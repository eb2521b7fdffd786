#include "runtime/head_session.h"

#include <stdexcept>
#include <utility>

#include "runtime/head_reconnect.h"
#include "runtime/log.h"

namespace elastic::runtime {
namespace {

int64_t MillisSince(std::chrono::steady_clock::time_point then) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               then)
      .count();
}

}  // namespace

HeadSession::HeadSession(HeadSessionOptions options, Establish establish)
    : options_(std::move(options)),
      establish_(std::move(establish)),
      head_(options_.client.host + ":" + std::to_string(options_.client.port)) {
  if (options_.reconnect_timeout.count() < 0)
    throw std::invalid_argument("HeadSessionOptions.reconnect_timeout must not be negative");
  auto client = std::make_unique<HeadClient>(options_.client);
  establish_(*client, false);
  Install(std::move(client));
  keeper_ = std::thread([this] { Keep(); });
}

HeadSession::~HeadSession() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (keeper_.joinable()) keeper_.join();
  // Its close callback finds stopping_ set: no attempt follows.
  client_.reset();
}

uint64_t HeadSession::reestablished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reestablished_;
}

bool HeadSession::established() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !lost_at_ && client_ != nullptr && client_->connected();
}

std::string HeadSession::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

void HeadSession::Install(std::unique_ptr<HeadClient> client) {
  std::unique_ptr<HeadClient> old;
  uint64_t serial = 0;
  HeadClient* installed = client.get();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    old = std::move(client_);
    client_ = std::move(client);
    serial = ++serial_;
    lost_at_.reset();
  }
  // Outside the lock: a client lost already calls back at once, on this thread.
  installed->OnDisconnect([this, serial](const std::string& reason) { Lost(serial, reason); });
  // Its close callback has an older serial and changes nothing.
  old.reset();
}

void HeadSession::Lost(uint64_t serial, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (serial != serial_ || stopping_ || lost_at_) return;
    lost_at_ = Clock::now();
    lost_reason_ = reason;
  }
  changed_.notify_all();
}

void HeadSession::Keep() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || (lost_at_ && failure_.empty()); });
    if (stopping_) return;
    const Clock::time_point lost_at = *lost_at_;
    const std::string reason = lost_reason_;
    lock.unlock();
    Reestablish(lost_at, reason);
    lock.lock();
  }
}

void HeadSession::Reestablish(Clock::time_point lost_at, const std::string& reason) {
  ELASTIC_LOG(kWarning, "head-session",
              "lost the session with the head at "
                  << head_ << " (" << reason << "); the head drops what was registered through it: "
                  << "connecting again every " << kHeadReconnectInterval.count() << " ms for up to "
                  << options_.reconnect_timeout.count() << " ms to register it again");
  const HeadReconnectWindow window(lost_at, options_.reconnect_timeout);
  std::string last_error;
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (!window.Open(now)) {
      const std::string failure = "lost the session with the head at " + head_ + " (" + reason +
                                  ") and could not establish it again within " +
                                  std::to_string(options_.reconnect_timeout.count()) + " ms" +
                                  (last_error.empty() ? "" : "; last attempt: " + last_error);
      ELASTIC_LOG(kError, "head-session", failure);
      std::lock_guard<std::mutex> lock(mutex_);
      failure_ = failure;
      return;
    }
    try {
      HeadClientOptions client_options = options_.client;
      client_options.transport.connect_timeout =
          window.AttemptBudget(now, client_options.transport.connect_timeout);
      auto client = std::make_unique<HeadClient>(client_options);
      establish_(*client, true);
      Install(std::move(client));
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++reestablished_;
      }
      ELASTIC_LOG(kWarning, "head-session",
                  "established the session with the head at "
                      << head_ << " again " << MillisSince(lost_at)
                      << " ms after it was lost; its registrations are back");
      return;
    } catch (const std::exception& e) {
      // A refused name (the head has not dropped the old session yet) or the
      // head unreachable: both may pass before the window closes.
      last_error = e.what();
      ELASTIC_LOG(kDebug, "head-session", "establishing the session again: " << e.what());
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (changed_.wait_for(lock, kHeadReconnectInterval, [this] { return stopping_; })) return;
  }
}

}  // namespace elastic::runtime
