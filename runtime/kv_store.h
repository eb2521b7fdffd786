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
#include <vector>

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

// Thrown by WaitAll when some keys did not appear in time. The message names
// them; missing() says which, so that a caller can name what they stand for
// (the ranks of a rendezvous).
class MissingKeysError : public TimeoutError {
 public:
  MissingKeysError(const std::string& message, std::vector<size_t> missing);
  // Indices into the keys WaitAll was given, in increasing order.
  const std::vector<size_t>& missing() const { return missing_; }

 private:
  std::vector<size_t> missing_;
};

// Bytes [offset, offset + length) of a value, cut at the value's end.
struct ByteRange {
  size_t offset = 0;
  size_t length = 0;
};

// The concatenation of `ranges` of value, each cut at its end; all of value
// when ranges is empty. What WaitAll returns of each value.
std::string SliceValue(const std::string& value, const std::vector<ByteRange>& ranges);
// How many bytes SliceValue(value, ranges) has, and writing them to `out`
// (which must have room for that many) without building a string.
size_t SlicedSize(const std::string& value, const std::vector<ByteRange>& ranges);
void SliceInto(const std::string& value, const std::vector<ByteRange>& ranges, char* out);

// "3 of 8 keys ('a', 'b', 'c') were not set within 100 ms": the message of a
// MissingKeysError, at most a few keys quoted.
std::string DescribeMissingKeys(const std::vector<std::string>& keys,
                                const std::vector<size_t>& missing,
                                std::chrono::milliseconds timeout);

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

  // Blocks until every key is set and returns their values in the order of
  // keys, each cut to `ranges` (SliceValue; empty: whole values). Throws
  // MissingKeysError naming the keys still unset after timeout (one deadline
  // for all), LimitExceededError when the store refuses that many keys or
  // bytes, and std::runtime_error when it becomes unreachable.
  //
  // This default waits for one key after another: one request per key. A
  // store that can wait for many keys in one request (HeadClient: one
  // request, one reply) overrides it; that is what keeps a rendezvous of n
  // members at O(n) requests in all.
  virtual std::vector<std::string> WaitAll(const std::vector<std::string>& keys,
                                           std::chrono::milliseconds timeout,
                                           const std::vector<ByteRange>& ranges);

  // An all-gather through the store, the whole of a rendezvous for member
  // `rank` of `count`: sets IndexedKey(prefix, rank) to value, then waits for
  // IndexedKeys(prefix, count) as WaitAll does (same errors, same slices).
  //
  // This default makes those two calls. HeadClient overrides it with one
  // request that carries the put and names the keys by prefix and count, so
  // a rendezvous costs each member one request of O(1) bytes and one reply.
  // Calling it again with the same value is harmless (a wait in slices does).
  virtual std::vector<std::string> AllGather(const std::string& prefix, size_t rank, size_t count,
                                             const std::string& value,
                                             std::chrono::milliseconds timeout,
                                             const std::vector<ByteRange>& ranges);
};

// prefix + the decimal index: the keys an AllGather names ("g7/gloo/world/3").
inline std::string IndexedKey(const std::string& prefix, size_t index) {
  return prefix + std::to_string(index);
}
std::vector<std::string> IndexedKeys(const std::string& prefix, size_t count);

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
