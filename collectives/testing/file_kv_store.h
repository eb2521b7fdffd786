// A KeyValueStore shared by processes through a directory: a real store (not a
// mock) for tests and benchmarks that run without the runtime's head. One file
// per key; a value becomes visible atomically (written to a temp file, then
// renamed). Wait polls, so it is slower than the head's push-based Wait.
#pragma once

#include <string>

#include "runtime/kv_store.h"

namespace elastic::collectives::testing {

class FileKeyValueStore : public runtime::KeyValueStore {
 public:
  // `directory` must exist and be shared by every user of the store.
  explicit FileKeyValueStore(std::string directory);

  void Put(const std::string& key, const std::string& value) override;
  std::optional<std::string> Get(const std::string& key) override;
  std::string Wait(const std::string& key, std::chrono::milliseconds timeout) override;

 private:
  std::string PathOf(const std::string& key) const;

  const std::string directory_;
};

}  // namespace elastic::collectives::testing
