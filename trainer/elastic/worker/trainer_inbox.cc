#include "trainer/elastic/worker/trainer_inbox.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/frame.h"
#include "trainer/elastic/protocol/control_messages.h"

namespace elastic::trainer {

int GenerationOrder::RankOf(uint64_t member) const {
  const auto it = std::find(members.begin(), members.end(), member);
  return it == members.end() ? -1 : static_cast<int>(it - members.begin());
}

TrainerInbox::TrainerInbox(std::function<void(uint64_t)> on_newer_generation)
    : on_newer_generation_(std::move(on_newer_generation)) {}

std::string TrainerInbox::Receive(const std::string& method, const std::string& payload) {
  if (method != kControlCall) RefuseUnimplemented("trainer actor", method);
  MessageBytes bytes(payload, "ToTrainer");
  const proto::ToTrainer::Reader message = bytes.Get<proto::ToTrainer>();
  // One line per member.
  // clang-format off
  switch (message.which()) {
    case proto::ToTrainer::GENERATION: return OnGeneration(message.getGeneration()), "";
    case proto::ToTrainer::REQUEST: return OnRequest(message.getRequest()), "";
    case proto::ToTrainer::OVER: return OnOver(message.getOver()), "";
    case proto::ToTrainer::UNSET: break;
  }
  // clang-format on
  RefuseUnimplemented("trainer actor", message);  // unset, or a member this build does not know
}

void TrainerInbox::OnGeneration(proto::Generation::Reader message) {
  GenerationOrder order;
  order.generation = message.getGeneration();
  for (uint64_t id : message.getMemberIds()) order.members.push_back(id);
  const proto::StateSource::Reader source = message.getSource();
  order.source.kind = FromProto(source.getKind());
  order.source.rank = source.getRank();
  order.source.point = FromProto(source.getPoint());
  order.state = runtime::ToBytes(source.getState());
  order.stop = message.getStop().cStr();
  order.reason = message.getReason().cStr();
  order.send_copy = message.getSendCopy();
  if (order.source.rank < 0 || order.source.rank >= static_cast<int>(order.members.size()))
    order.source.rank = 0;
  const uint64_t generation = order.generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (latest_ && latest_->generation >= generation) return;  // stale
    latest_ = std::move(order);
  }
  changed_.notify_all();
  on_newer_generation_(generation);
}

void TrainerInbox::OnRequest(proto::StopRequest::Reader request) {
  std::lock_guard<std::mutex> lock(mutex_);
  bool& now = requests_[request.getGeneration()];
  now = now || request.getAtNextCommit();
}

void TrainerInbox::OnOver(proto::JobOver::Reader over) {
  const std::string reason = over.getReason().cStr();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    over_ = reason;
  }
  changed_.notify_all();
}

std::optional<GenerationOrder> TrainerInbox::Next(uint64_t after,
                                                  std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, timeout,
                    [&] { return over_ || (latest_ && latest_->generation > after); });
  if (latest_ && latest_->generation > after) return latest_;
  return std::nullopt;
}

std::optional<bool> TrainerInbox::Request(uint64_t generation) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = requests_.find(generation);
  if (it == requests_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> TrainerInbox::Over() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return over_;
}

}  // namespace elastic::trainer
