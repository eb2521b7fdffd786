#include "runtime/kv_table.h"

namespace elastic::runtime {

void KvTable::Put(const std::string& key, const std::string& value) {
  values_[key] = value;
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  // Detach first: a waiter may add new waiters or put other keys.
  std::map<uint64_t, Waiter> ready = std::move(it->second);
  waiters_.erase(it);
  for (auto& [ticket, waiter] : ready) waiter(value);
}

std::optional<std::string> KvTable::Get(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

bool KvTable::Erase(const std::string& key) { return values_.erase(key) > 0; }

uint64_t KvTable::WaitFor(const std::string& key, Waiter waiter) {
  auto it = values_.find(key);
  if (it != values_.end()) {
    waiter(it->second);
    return 0;
  }
  const uint64_t ticket = next_ticket_++;
  waiters_[key].emplace(ticket, std::move(waiter));
  return ticket;
}

bool KvTable::CancelWait(const std::string& key, uint64_t ticket) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return false;
  const bool erased = it->second.erase(ticket) > 0;
  if (it->second.empty()) waiters_.erase(it);
  return erased;
}

size_t KvTable::waiter_count() const {
  size_t count = 0;
  for (const auto& [key, waiters] : waiters_) count += waiters.size();
  return count;
}

}  // namespace elastic::runtime
