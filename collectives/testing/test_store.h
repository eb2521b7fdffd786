// Names a key-value store with a string, so that child processes open the very
// store their parent chose:
//   "head:<host>:<port>"  the runtime's head (HeadClient); the token comes from
//                         $ELASTIC_RUNTIME_TOKEN (runtime::kTokenEnvironmentVariable)
//   "dir:<path>"          a FileKeyValueStore (no runtime needed)
#pragma once

#include <memory>
#include <string>

#include "runtime/head.h"
#include "runtime/kv_store.h"

namespace elastic::collectives::testing {

std::unique_ptr<runtime::KeyValueStore> OpenStore(const std::string& spec,
                                                  const std::string& client_name);

// A runtime head hosted in this process (127.0.0.1, OS-assigned port, random
// token). Exports the token into the environment so spawned children inherit it.
class TestHead {
 public:
  TestHead();
  std::string spec() const;
  // What the head served so far (to count a rendezvous's requests).
  runtime::HeadStats stats() const { return head_.stats(); }

 private:
  runtime::Head head_;
};

}  // namespace elastic::collectives::testing
