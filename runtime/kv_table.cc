#include "runtime/kv_table.h"

#include <utility>

#include "runtime/log.h"

namespace elastic::runtime {

KvTable::KvTable(KvLimits limits, std::string what) : limits_(limits), what_(std::move(what)) {}

void KvTable::Refuse(const std::string& key, const std::string& why) const {
  throw LimitExceededError(what_ + " refused key " + Quoted(key) + ": " + why);
}

void KvTable::CheckKey(const std::string& key) const {
  if (key.size() > limits_.max_key_bytes) {
    Refuse(key, "the key is " + std::to_string(key.size()) + " bytes, over the limit of " +
                    std::to_string(limits_.max_key_bytes) + " (max_key_bytes)");
  }
}

void KvTable::Put(const std::string& key, const std::string& value) {
  CheckKey(key);
  if (value.size() > limits_.max_value_bytes) {
    Refuse(key, "the value is " + std::to_string(value.size()) + " bytes, over the limit of " +
                    std::to_string(limits_.max_value_bytes) + " (max_value_bytes)");
  }
  auto existing = values_.find(key);
  const bool is_new = existing == values_.end();
  if (is_new && values_.size() >= limits_.max_keys) {
    Refuse(key,
           "the table holds " + std::to_string(values_.size()) + " keys, the limit (max_keys)");
  }
  // What the table holds once this put replaced the old value, if any.
  const size_t released = is_new ? 0 : key.size() + existing->second.size();
  const size_t after = total_bytes_ - released + key.size() + value.size();
  if (after > limits_.max_total_bytes) {
    Refuse(key, "it would bring the table to " + std::to_string(after) +
                    " bytes, over the limit of " + std::to_string(limits_.max_total_bytes) +
                    " (max_total_bytes)");
  }
  total_bytes_ = after;
  if (is_new) {
    values_.emplace(key, value);
    if (const auto generation = GenerationOfKey(key)) keys_by_generation_[*generation].insert(key);
  } else {
    existing->second = value;
  }
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

bool KvTable::Erase(const std::string& key) {
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  total_bytes_ -= key.size() + it->second.size();
  values_.erase(it);
  if (const auto generation = GenerationOfKey(key)) {
    auto keys = keys_by_generation_.find(*generation);
    if (keys != keys_by_generation_.end()) {
      keys->second.erase(key);
      if (keys->second.empty()) keys_by_generation_.erase(keys);
    }
  }
  return true;
}

size_t KvTable::EraseGenerationsBefore(uint64_t generation) {
  size_t erased = 0;
  const auto end = keys_by_generation_.lower_bound(generation);
  for (auto it = keys_by_generation_.begin(); it != end; ++it) {
    for (const std::string& key : it->second) {
      auto value = values_.find(key);
      total_bytes_ -= key.size() + value->second.size();
      values_.erase(value);
      ++erased;
    }
  }
  keys_by_generation_.erase(keys_by_generation_.begin(), end);
  return erased;
}

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
