#include "trainer/elastic/superseded_store.h"

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
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    ThrowIfSuperseded(keys.empty() ? std::string("no key") : keys.front() + " and the rest");
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const auto wait = std::clamp(left, std::chrono::milliseconds(1), slice_);
    try {
      return inner_.WaitAll(keys, wait, ranges);
    } catch (const runtime::MissingKeysError& e) {
      // Named with the whole timeout, not the slice's.
      if (Clock::now() >= deadline)
        throw runtime::MissingKeysError(runtime::DescribeMissingKeys(keys, e.missing(), timeout),
                                        e.missing());
    }
  }
}

void SupersededStore::ThrowIfSuperseded(const std::string& key) const {
  if (superseded_())
    throw RendezvousSuperseded("a newer generation exists; stopped waiting for " + key);
}

}  // namespace elastic::trainer
