// The key-value store that the processes of one job share through the head.
// Collectives rendezvous through it (NCCL unique ids, Gloo addresses), under
// keys scoped by membership generation so a rebuilt communicator never reads a
// stale entry of an earlier one.
#pragma once

#include <charconv>
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

// Thrown when the store refuses a request beyond one of its limits (a key,
// value or name too large, too many keys or bytes, too many waits); the
// message names the limit and the key.
class LimitExceededError : public std::runtime_error {
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

// The generation of a key made by GenerationKey, or nullopt for any other key.
inline std::optional<uint64_t> GenerationOfKey(const std::string& key) {
  if (key.size() < 3 || key[0] != 'g') return std::nullopt;
  const char* const end = key.data() + key.size();
  uint64_t generation = 0;
  const auto [digits_end, error] = std::from_chars(key.data() + 1, end, generation);
  if (error != std::errc() || digits_end == key.data() + 1 || digits_end == end ||
      *digits_end != '/') {
    return std::nullopt;
  }
  return generation;
}

}  // namespace elastic::runtime
