// The key-value store that the processes of one job share through the head.
// Collectives rendezvous through it (NCCL unique ids, Gloo addresses), under
// keys scoped by membership generation so a rebuilt communicator never reads a
// stale entry of an earlier one.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace elastic::runtime {

// Thrown by Wait when the key did not appear in time.
class TimeoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;

  // Sets key to value (bytes), replacing any earlier value, and wakes waiters.
  virtual void Put(const std::string& key, const std::string& value) = 0;

  // The value of key, or nullopt when it is not set.
  virtual std::optional<std::string> Get(const std::string& key) = 0;

  // Blocks until key is set and returns its value; throws TimeoutError after
  // timeout, and std::runtime_error when the store becomes unreachable.
  virtual std::string Wait(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

// "g<generation>/<key>": the key as seen by members of one generation.
inline std::string GenerationKey(uint64_t generation, const std::string& key) {
  return "g" + std::to_string(generation) + "/" + key;
}

}  // namespace elastic::runtime
