#include "collectives/gloo_abortable_buffers.h"

#include <utility>

namespace elastic::collectives {

LiveBuffers::Scope::Scope(LiveBuffers& live,
                          std::initializer_list<gloo::transport::UnboundBuffer*> buffers)
    : live_(live), buffers_(buffers) {
  std::lock_guard<std::mutex> lock(live_.mutex_);
  for (auto* buffer : buffers_) {
    if (buffer != nullptr) live_.live_.insert(buffer);
  }
}

LiveBuffers::Scope::~Scope() {
  std::lock_guard<std::mutex> lock(live_.mutex_);
  for (auto* buffer : buffers_) {
    if (buffer == nullptr) continue;
    const auto it = live_.live_.find(buffer);
    if (it != live_.live_.end()) live_.live_.erase(it);
  }
}

void LiveBuffers::Poke() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto* buffer : live_) {
    buffer->abortWaitSend();
    buffer->abortWaitRecv();
  }
}

CollectiveAborter::CollectiveAborter(LiveBuffers& live, std::function<bool()> busy)
    : live_(live), busy_(std::move(busy)) {}

CollectiveAborter::~CollectiveAborter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CollectiveAborter::Start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (thread_.joinable() || closed_ || stop_) return;
  thread_ = std::thread([this] { Run(); });
}

void CollectiveAborter::Finish() {
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    thread = std::move(thread_);
  }
  if (thread.joinable()) thread.join();
}

// Pokes until the operation has ended: busy() is asked after each poke, so
// an operation that was running when Start() came is poked at least once.
void CollectiveAborter::Run() {
  while (true) {
    live_.Poke();
    if (!busy_()) return;
    std::unique_lock<std::mutex> lock(mutex_);
    if (wake_.wait_for(lock, kPoll, [this] { return stop_; })) return;
  }
}

}  // namespace elastic::collectives
