#include "runtime/kv_store.h"

#include <algorithm>
#include <utility>

namespace elastic::runtime {
namespace {

// Keys a MissingKeysError quotes; the count says how many more there are.
constexpr size_t kKeysQuoted = 8;

}  // namespace

MissingKeysError::MissingKeysError(const std::string& message, std::vector<size_t> missing)
    : TimeoutError(message), missing_(std::move(missing)) {}

std::string SliceValue(const std::string& value, const std::vector<ByteRange>& ranges) {
  std::string out(SlicedSize(value, ranges), '\0');
  SliceInto(value, ranges, out.data());
  return out;
}

size_t SlicedSize(const std::string& value, const std::vector<ByteRange>& ranges) {
  if (ranges.empty()) return value.size();
  size_t size = 0;
  for (const ByteRange& range : ranges) {
    if (range.offset < value.size()) size += std::min(range.length, value.size() - range.offset);
  }
  return size;
}

void SliceInto(const std::string& value, const std::vector<ByteRange>& ranges, char* out) {
  if (ranges.empty()) {
    std::copy(value.begin(), value.end(), out);
    return;
  }
  for (const ByteRange& range : ranges) {
    if (range.offset >= value.size()) continue;
    const size_t length = std::min(range.length, value.size() - range.offset);
    std::copy_n(value.data() + range.offset, length, out);
    out += length;
  }
}

std::string DescribeMissingKeys(const std::vector<std::string>& keys,
                                const std::vector<size_t>& missing,
                                std::chrono::milliseconds timeout) {
  std::string quoted;
  for (size_t i = 0; i < missing.size() && i < kKeysQuoted; ++i) {
    if (i > 0) quoted += ", ";
    quoted += "'" + (missing[i] < keys.size() ? keys[missing[i]] : "?") + "'";
  }
  if (missing.size() > kKeysQuoted) {
    quoted += " and " + std::to_string(missing.size() - kKeysQuoted) + " more";
  }
  return std::to_string(missing.size()) + " of " + std::to_string(keys.size()) + " keys (" +
         quoted + ") were not set within " + std::to_string(timeout.count()) + " ms";
}

std::vector<std::string> KeyValueStore::WaitAll(const std::vector<std::string>& keys,
                                                std::chrono::milliseconds timeout,
                                                const std::vector<ByteRange>& ranges) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  std::vector<std::string> values(keys.size());
  std::vector<size_t> missing;
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto left =
        std::max(std::chrono::milliseconds(0),
                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    try {
      // Once the deadline has passed, only what is there already counts.
      if (left.count() == 0) {
        const std::optional<std::string> value = Get(keys[i]);
        if (!value) {
          missing.push_back(i);
          continue;
        }
        values[i] = SliceValue(*value, ranges);
      } else {
        values[i] = SliceValue(Wait(keys[i], left), ranges);
      }
    } catch (const TimeoutError&) {
      missing.push_back(i);
    }
  }
  if (!missing.empty()) {
    // The message first: the argument that moves `missing` may be built first.
    const std::string message = DescribeMissingKeys(keys, missing, timeout);
    throw MissingKeysError(message, std::move(missing));
  }
  return values;
}

std::vector<std::string> KeyValueStore::AllGather(const std::string& prefix, size_t rank,
                                                  size_t count, const std::string& value,
                                                  std::chrono::milliseconds timeout,
                                                  const std::vector<ByteRange>& ranges) {
  Put(IndexedKey(prefix, rank), value);
  return WaitAll(IndexedKeys(prefix, count), timeout, ranges);
}

std::vector<std::string> IndexedKeys(const std::string& prefix, size_t count) {
  std::vector<std::string> keys;
  keys.reserve(count);
  for (size_t i = 0; i < count; ++i) keys.push_back(IndexedKey(prefix, i));
  return keys;
}

}  // namespace elastic::runtime
