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
  ++version_;
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

const std::string* KvTable::Find(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

bool KvTable::Erase(const std::string& key) {
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  total_bytes_ -= key.size() + it->second.size();
  values_.erase(it);
  ++version_;
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
  if (erased > 0) ++version_;
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

uint64_t KvTable::WaitForAll(std::vector<std::string> keys, std::function<void()> ready) {
  return WaitForAll(std::make_shared<const std::vector<std::string>>(std::move(keys)),
                    std::move(ready));
}

uint64_t KvTable::WaitForAll(KeyList keys, std::function<void()> ready) {
  if (keys->size() > limits_.max_keys_per_wait) {
    throw LimitExceededError(what_ + " refused a wait for " + std::to_string(keys->size()) +
                             " keys: over the limit of " +
                             std::to_string(limits_.max_keys_per_wait) + " (max_keys_per_wait)");
  }
  auto shared = multi_waits_.find(keys.get());
  if (shared != multi_waits_.end()) {
    // Checked, looked up and still incomplete: only the ready is new.
    const uint64_t ticket = next_ticket_++;
    shared->second.ready.emplace(ticket, std::move(ready));
    multi_wait_of_ticket_.emplace(ticket, keys.get());
    return ticket;
  }
  for (const std::string& key : *keys) CheckKey(key);
  std::vector<size_t> missing = Missing(*keys);
  if (missing.empty()) {
    ready();
    return 0;
  }
  const uint64_t ticket = next_ticket_++;
  const std::vector<std::string>* list = keys.get();
  MultiWait& wait = multi_waits_[list];
  wait.keys = std::move(keys);
  wait.missing = std::move(missing);
  wait.ready.emplace(ticket, std::move(ready));
  multi_wait_of_ticket_.emplace(ticket, list);
  Advance(list);
  return ticket;
}

void KvTable::Advance(const std::vector<std::string>* keys) {
  auto it = multi_waits_.find(keys);
  if (it == multi_waits_.end()) return;
  MultiWait& wait = it->second;
  wait.key_ticket = 0;
  std::vector<size_t> still;
  for (size_t index : wait.missing) {
    if (values_.count((*wait.keys)[index]) == 0) still.push_back(index);
  }
  wait.missing = std::move(still);
  if (wait.missing.empty()) {
    std::map<uint64_t, std::function<void()>> ready = std::move(wait.ready);
    multi_waits_.erase(it);
    for (const auto& [ticket, run] : ready) multi_wait_of_ticket_.erase(ticket);
    for (auto& [ticket, run] : ready) run();
    return;
  }
  std::uniform_int_distribution<size_t> pick(0, wait.missing.size() - 1);
  wait.waiting_on = (*wait.keys)[wait.missing[pick(random_)]];
  // The key is unset (checked just above), so this registers and never runs now.
  wait.key_ticket = WaitFor(wait.waiting_on, [this, keys](const std::string&) { Advance(keys); });
}

bool KvTable::CancelWaitAll(uint64_t ticket) {
  auto of = multi_wait_of_ticket_.find(ticket);
  if (of == multi_wait_of_ticket_.end()) return false;
  auto it = multi_waits_.find(of->second);
  multi_wait_of_ticket_.erase(of);
  if (it == multi_waits_.end()) return false;
  MultiWait& wait = it->second;
  wait.ready.erase(ticket);
  if (wait.ready.empty()) {
    if (wait.key_ticket != 0) CancelWait(wait.waiting_on, wait.key_ticket);
    multi_waits_.erase(it);
  }
  return true;
}

std::vector<size_t> KvTable::Missing(const std::vector<std::string>& keys) const {
  std::vector<size_t> missing;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (values_.count(keys[i]) == 0) missing.push_back(i);
  }
  return missing;
}

size_t KvTable::waiter_count() const {
  size_t count = 0;
  for (const auto& [key, waiters] : waiters_) count += waiters.size();
  return count;
}

}  // namespace elastic::runtime
