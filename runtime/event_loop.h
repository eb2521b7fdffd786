// One Asio io_context run by one thread. All network state of a Head, a
// HeadClient or an ActorSystem lives on its loop's thread, so that state needs
// no locks; other threads hand work to it with Post.
#pragma once

#include <asio.hpp>
#include <optional>
#include <string>
#include <thread>

namespace elastic::runtime {

class EventLoop {
 public:
  explicit EventLoop(std::string name);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  asio::io_context& context() { return io_; }
  bool InLoopThread() const { return std::this_thread::get_id() == thread_.get_id(); }

  // Stops the loop and joins its thread. Pending handlers are not run.
  // Idempotent; must not be called from the loop thread.
  void Stop();

  template <typename F>
  void Post(F&& f) {
    asio::post(io_, std::forward<F>(f));
  }

 private:
  std::string name_;
  asio::io_context io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  std::thread thread_;
};

}  // namespace elastic::runtime
