#include "collectives/gloo_store.h"

#include "collectives/types.h"

namespace elastic::collectives {

GlooStore::GlooStore(runtime::KeyValueStore& kv, uint64_t generation, const std::string& tag,
                     std::chrono::milliseconds timeout)
    : kv_(kv), generation_(generation), prefix_("gloo/" + tag + "/"), timeout_(timeout) {}

std::string GlooStore::ScopedKey(const std::string& key) const {
  return runtime::GenerationKey(generation_, prefix_ + key);
}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  kv_.Put(ScopedKey(key), std::string(data.begin(), data.end()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  // Gloo's get() blocks until the key exists; so does ours, for at most timeout_.
  try {
    const std::string value = kv_.Wait(ScopedKey(key), timeout_);
    return std::vector<char>(value.begin(), value.end());
  } catch (const runtime::TimeoutError&) {
    throw CollectiveTimeout("gloo rendezvous: key " + ScopedKey(key) + " did not appear within " +
                            std::to_string(timeout_.count()) + " ms (a member is missing?)");
  }
}

void GlooStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& key : keys) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    try {
      kv_.Wait(ScopedKey(key), std::max(left, std::chrono::milliseconds(1)));
    } catch (const runtime::TimeoutError&) {
      throw CollectiveTimeout("gloo rendezvous: key " + ScopedKey(key) + " did not appear within " +
                              std::to_string(timeout.count()) + " ms (a member is missing?)");
    }
  }
}

}  // namespace elastic::collectives
