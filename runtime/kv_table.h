// The head's in-memory key-value table with wait-for-key. Not thread-safe: the
// head uses it from its loop thread only. Waiters are callbacks, so the same
// table serves the network (a waiter answers a request) and unit tests.
//
// The table is bounded (KvLimits): a key or value over its size, or a put that
// would pass the key count or the total bytes, is refused with
// LimitExceededError and leaves the table as it was. Keys made by
// GenerationKey ("g<generation>/...") are indexed by generation, so the keys
// of finished generations can be dropped at once (EraseGenerationsBefore).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "runtime/kv_store.h"

namespace elastic::runtime {

// Far above what rendezvous stores (Gloo puts a few hundred bytes of address
// per rank, NCCL a 128-byte unique id), far below what would hurt the head.
struct KvLimits {
  size_t max_key_bytes = 1024;
  size_t max_value_bytes = size_t{64} << 20;
  size_t max_keys = 100000;
  size_t max_total_bytes = size_t{1} << 30;  // keys plus values
};

class KvTable {
 public:
  using Waiter = std::function<void(const std::string& value)>;

  // `what` names the table and its limits in refusals ("key-value store").
  explicit KvTable(KvLimits limits = {}, std::string what = "key-value store");

  // Sets key and runs (then forgets) every waiter of key, in arrival order.
  // Throws LimitExceededError (naming the limit and the key, table unchanged)
  // for a key or value over its size or a new key beyond the count or bytes.
  void Put(const std::string& key, const std::string& value);
  std::optional<std::string> Get(const std::string& key) const;
  bool Erase(const std::string& key);
  // Erases every GenerationKey of a generation below `generation`; returns
  // how many. Waiters of those keys stay (their requests time out).
  size_t EraseGenerationsBefore(uint64_t generation);

  // Throws LimitExceededError when key is longer than max_key_bytes: such a
  // key can never be set, so a get or wait of it is refused rather than held.
  void CheckKey(const std::string& key) const;

  // Runs waiter with the value once key is set: now if it already is (and
  // returns 0), otherwise on the Put that sets it (returns a ticket for
  // CancelWait).
  uint64_t WaitFor(const std::string& key, Waiter waiter);
  // Forgets a waiter that has not run (timeout, disconnect). False if it ran.
  bool CancelWait(const std::string& key, uint64_t ticket);

  size_t size() const { return values_.size(); }
  // Bytes of every key and value held.
  size_t total_bytes() const { return total_bytes_; }
  size_t waiter_count() const;
  const KvLimits& limits() const { return limits_; }

 private:
  [[noreturn]] void Refuse(const std::string& key, const std::string& why) const;

  const KvLimits limits_;
  const std::string what_;
  std::unordered_map<std::string, std::string> values_;
  size_t total_bytes_ = 0;
  std::map<uint64_t, std::set<std::string>> keys_by_generation_;
  std::unordered_map<std::string, std::map<uint64_t, Waiter>> waiters_;
  uint64_t next_ticket_ = 1;
};

}  // namespace elastic::runtime
