// The head's in-memory key-value table with wait-for-key. Not thread-safe: the
// head uses it from its loop thread only. Waiters are callbacks, so the same
// table serves the network (a waiter answers a request) and unit tests.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

namespace elastic::runtime {

class KvTable {
 public:
  using Waiter = std::function<void(const std::string& value)>;

  // Sets key and runs (then forgets) every waiter of key, in arrival order.
  void Put(const std::string& key, const std::string& value);
  std::optional<std::string> Get(const std::string& key) const;
  bool Erase(const std::string& key);

  // Runs waiter with the value once key is set: now if it already is (and
  // returns 0), otherwise on the Put that sets it (returns a ticket for
  // CancelWait).
  uint64_t WaitFor(const std::string& key, Waiter waiter);
  // Forgets a waiter that has not run (timeout, disconnect). False if it ran.
  bool CancelWait(const std::string& key, uint64_t ticket);

  size_t size() const { return values_.size(); }
  size_t waiter_count() const;

 private:
  std::unordered_map<std::string, std::string> values_;
  std::unordered_map<std::string, std::map<uint64_t, Waiter>> waiters_;
  uint64_t next_ticket_ = 1;
};

}  // namespace elastic::runtime
