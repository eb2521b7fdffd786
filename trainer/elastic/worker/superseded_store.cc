#include "trainer/elastic/worker/superseded_store.h"

#include <algorithm>
#include <utility>

namespace elastic::trainer {

SupersededStore::SupersededStore(runtime::KeyValueStore& inner, std::function<bool()> superseded,
                                 std::chrono::milliseconds slice)
    : inner_(inner), superseded_(std::move(superseded)), slice_(slice) {}

void SupersededStore::Put(const std::string& key, const std::string& value) {
  inner_.Put(key, value);
}

std::optional<std::string> SupersededStore::Get(const std::string& key) { return inner_.Get(key); }

std::string SupersededStore::Wait(const std::string& key, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    ThrowIfSuperseded(key);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const auto wait = std::clamp(left, std::chrono::milliseconds(1), slice_);
    try {
      return inner_.Wait(key, wait);
    } catch (const runtime::TimeoutError&) {
      if (Clock::now() >= deadline) throw;
    }
  }
}

std::vector<std::string> SupersededStore::WaitAll(const std::vector<std::string>& keys,
                                                  std::chrono::milliseconds timeout,
                                                  const std::vector<runtime::ByteRange>& ranges) {
  return InSlices(
      [&](std::chrono::milliseconds slice) { return inner_.WaitAll(keys, slice, ranges); },
      [&] { return keys; }, timeout);
}

std::vector<std::string> SupersededStore::AllGather(const std::string& prefix, size_t rank,
                                                    size_t count, const std::string& value,
                                                    std::chrono::milliseconds timeout,
                                                    const std::vector<runtime::ByteRange>& ranges) {
  return InSlices(
      [&](std::chrono::milliseconds slice) {
        return inner_.AllGather(prefix, rank, count, value, slice, ranges);
      },
      [&] { return runtime::IndexedKeys(prefix, count); }, timeout);
}

std::vector<std::string> SupersededStore::InSlices(
    const std::function<std::vector<std::string>(std::chrono::milliseconds)>& wait,
    const std::function<std::vector<std::string>()>& keys_of, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    if (superseded_()) {
      const std::vector<std::string> keys = keys_of();
      ThrowIfSuperseded(keys.empty() ? std::string("no key") : keys.front() + " and the rest");
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      return wait(std::clamp(left, std::chrono::milliseconds(1), slice_));
    } catch (const runtime::MissingKeysError& e) {
      // Named with the whole timeout, not the slice's.
      if (Clock::now() >= deadline)
        throw runtime::MissingKeysError(
            runtime::DescribeMissingKeys(keys_of(), e.missing(), timeout), e.missing());
    }
  }
}

void SupersededStore::ThrowIfSuperseded(const std::string& key) const {
  if (superseded_())
    throw RendezvousSuperseded("a newer generation exists; stopped waiting for " + key);
}

}  // namespace elastic::trainer
