#include "runtime/event_loop.h"

#include <pthread.h>

#include "runtime/log.h"

namespace elastic::runtime {

EventLoop::EventLoop(std::string name) : name_(std::move(name)) {
  work_.emplace(io_.get_executor());
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        // A handler must not take the whole loop down with it.
        ELASTIC_LOG(kError, name_, "handler threw: " << e.what());
      }
    }
  });
}

EventLoop::~EventLoop() { Stop(); }

void EventLoop::Stop() {
  if (!thread_.joinable()) return;
  work_.reset();
  io_.stop();
  thread_.join();
}

}  // namespace elastic::runtime
