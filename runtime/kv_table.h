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
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/kv_store.h"

namespace elastic::runtime {

// Far above what rendezvous stores (Gloo puts 18 + 2n bytes of address per
// rank, NCCL a 128-byte unique id), far below what would hurt the head.
struct KvLimits {
  size_t max_key_bytes = 1024;
  size_t max_value_bytes = size_t{64} << 20;
  size_t max_keys = 100000;
  size_t max_total_bytes = size_t{1} << 30;  // keys plus values
  // Keys one WaitForAll (one KvWaitAll request) may name: a rendezvous names
  // one per member.
  size_t max_keys_per_wait = 65536;
};

class KvTable {
 public:
  using Waiter = std::function<void(const std::string& value)>;
  using KeyList = std::shared_ptr<const std::vector<std::string>>;

  // `what` names the table and its limits in refusals ("key-value store").
  explicit KvTable(KvLimits limits = {}, std::string what = "key-value store");

  // Sets key and runs (then forgets) every waiter of key, in arrival order.
  // Throws LimitExceededError (naming the limit and the key, table unchanged)
  // for a key or value over its size or a new key beyond the count or bytes.
  void Put(const std::string& key, const std::string& value);
  std::optional<std::string> Get(const std::string& key) const;
  // The value of key without a copy, or nullptr; valid until the next Put or
  // erase.
  const std::string* Find(const std::string& key) const;
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

  // Runs ready once every one of keys is set: now if they all are (and
  // returns 0), otherwise on the Put that sets the last of them (returns a
  // ticket for CancelWaitAll). Throws LimitExceededError for more keys than
  // max_keys_per_wait or a key over max_key_bytes (nothing is registered).
  //
  // Waits given the same list object share one watch: the n members of a
  // rendezvous wait for the same n keys, and the table looks each key up
  // O(1) times for all of them instead of O(n) times. Their readies run in
  // the order they came.
  uint64_t WaitForAll(KeyList keys, std::function<void()> ready);
  uint64_t WaitForAll(std::vector<std::string> keys, std::function<void()> ready);
  // Forgets a WaitForAll that has not run. False if it ran.
  bool CancelWaitAll(uint64_t ticket);
  // Indices of the keys that are not set now, in increasing order.
  std::vector<size_t> Missing(const std::vector<std::string>& keys) const;

  size_t size() const { return values_.size(); }
  // Changes with every Put and erase: a pointer from Find is still valid
  // while the version is the same.
  uint64_t version() const { return version_; }
  // Bytes of every key and value held.
  size_t total_bytes() const { return total_bytes_; }
  size_t waiter_count() const;
  const KvLimits& limits() const { return limits_; }

 private:
  // The waits for one list of keys. It holds a waiter on one of its missing
  // keys at a time, chosen at random: a waiter per key would cost n waiters
  // per list, and always the first missing key would wake it once per key
  // when the keys arrive in the order it names them. A random missing key
  // arrives, in expectation, halfway through the rest, so a watch wakes
  // O(log n) times whatever the order.
  struct MultiWait {
    KeyList keys;
    std::vector<size_t> missing;                      // indices unset at the last look
    std::map<uint64_t, std::function<void()>> ready;  // by ticket: arrival order
    std::string waiting_on;                           // the key whose waiter is registered
    uint64_t key_ticket = 0;
  };

  [[noreturn]] void Refuse(const std::string& key, const std::string& why) const;
  // Drops the keys of the watch for `keys` that are set now; runs its
  // readies when none is left, else waits for another missing key.
  void Advance(const std::vector<std::string>* keys);

  const KvLimits limits_;
  const std::string what_;
  std::unordered_map<std::string, std::string> values_;
  size_t total_bytes_ = 0;
  std::map<uint64_t, std::set<std::string>> keys_by_generation_;
  std::unordered_map<std::string, std::map<uint64_t, Waiter>> waiters_;
  uint64_t next_ticket_ = 1;
  uint64_t version_ = 0;
  std::unordered_map<const std::vector<std::string>*, MultiWait> multi_waits_;
  std::unordered_map<uint64_t, const std::vector<std::string>*> multi_wait_of_ticket_;
  std::minstd_rand random_{0x6b76};  // which missing key a MultiWait waits on
};

}  // namespace elastic::runtime
