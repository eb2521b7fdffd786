// Gloo's rendezvous store over the runtime's key-value store. Every key is
// scoped by membership generation (runtime::GenerationKey) and by a tag, so a
// communicator of generation g+1 never reads an address published for g.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "runtime/kv_store.h"

namespace elastic::collectives {

class GlooStore : public gloo::rendezvous::Store {
 public:
  // `timeout` bounds get() and wait() without an explicit timeout.
  GlooStore(runtime::KeyValueStore& kv, uint64_t generation, const std::string& tag,
            std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The key under which `key` is stored in the runtime's store.
  std::string ScopedKey(const std::string& key) const;

 private:
  runtime::KeyValueStore& kv_;
  const uint64_t generation_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace elastic::collectives
