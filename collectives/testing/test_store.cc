#include "collectives/testing/test_store.h"

#include <stdlib.h>

#include <stdexcept>

#include "collectives/testing/file_kv_store.h"
#include "runtime/auth.h"
#include "runtime/head_client.h"

namespace elastic::collectives::testing {

std::unique_ptr<runtime::KeyValueStore> OpenStore(const std::string& spec,
                                                  const std::string& client_name) {
  if (spec.rfind("dir:", 0) == 0) return std::make_unique<FileKeyValueStore>(spec.substr(4));
  if (spec.rfind("head:", 0) == 0) {
    const std::string address = spec.substr(5);
    const auto colon = address.rfind(':');
    if (colon == std::string::npos) throw std::invalid_argument("bad store spec " + spec);
    const char* token = getenv(runtime::kTokenEnvironmentVariable);
    if (token == nullptr) {
      throw std::runtime_error(std::string("store spec ") + spec + " needs $" +
                               runtime::kTokenEnvironmentVariable);
    }
    runtime::HeadClientOptions options;
    options.host = address.substr(0, colon);
    options.port = static_cast<uint16_t>(std::stoi(address.substr(colon + 1)));
    options.token = token;
    options.name = client_name;
    return std::make_unique<runtime::HeadClient>(options);
  }
  throw std::invalid_argument("unknown store spec " + spec + " (want head:HOST:PORT or dir:PATH)");
}

TestHead::TestHead() : head_(runtime::HeadOptions{}) {
  setenv(runtime::kTokenEnvironmentVariable, head_.token().c_str(), 1);
}

std::string TestHead::spec() const {
  return "head:" + head_.host() + ":" + std::to_string(head_.port());
}

}  // namespace elastic::collectives::testing
