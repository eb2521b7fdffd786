// The key-value store one generation's rendezvous runs through, which gives
// up as soon as a newer generation exists.
//
// A rendezvous waits for every member's key. When a member dies before it
// wrote its key, the head publishes a newer view within milliseconds, but a
// wait on the dead member's key would go on until the rendezvous timeout
// (30 s) and hold every survivor out of the newer generation that long: on the
// p3 spot trace, ten such waits were most of the job's idle time. So every
// wait here is cut into short slices, and between them the store asks whether
// the generation was superseded; if so it throws RendezvousSuperseded.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/kv_store.h"

namespace elastic::trainer {

// The rendezvous stopped because a newer generation exists: not a fault.
class RendezvousSuperseded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SupersededStore : public runtime::KeyValueStore {
 public:
  // `superseded` is asked between slices of `slice`; `inner` must outlive this.
  SupersededStore(runtime::KeyValueStore& inner, std::function<bool()> superseded,
                  std::chrono::milliseconds slice = std::chrono::milliseconds(100));

  void Put(const std::string& key, const std::string& value) override;
  std::optional<std::string> Get(const std::string& key) override;
  // Throws TimeoutError after `timeout`, RendezvousSuperseded as soon as a
  // slice ends with the generation superseded.
  std::string Wait(const std::string& key, std::chrono::milliseconds timeout) override;
  // The inner store's WaitAll (one request for all keys) in slices: throws
  // MissingKeysError after `timeout`, RendezvousSuperseded as above.
  std::vector<std::string> WaitAll(const std::vector<std::string>& keys,
                                   std::chrono::milliseconds timeout,
                                   const std::vector<runtime::ByteRange>& ranges) override;
  // The inner store's AllGather in slices, its put repeated with each (the
  // same value: harmless), and the same errors as WaitAll.
  std::vector<std::string> AllGather(const std::string& prefix, size_t rank, size_t count,
                                     const std::string& value, std::chrono::milliseconds timeout,
                                     const std::vector<runtime::ByteRange>& ranges) override;

  // Whether the generation is superseded now (the backend may have wrapped
  // RendezvousSuperseded into its own error).
  bool superseded() const { return superseded_(); }

 private:
  void ThrowIfSuperseded(const std::string& key) const;
  // Runs wait(slice) until it returns, `timeout` passes (then its last
  // MissingKeysError, named with the whole timeout) or the generation is
  // superseded; `keys_of` names the keys waited for.
  std::vector<std::string> InSlices(
      const std::function<std::vector<std::string>(std::chrono::milliseconds)>& wait,
      const std::function<std::vector<std::string>()>& keys_of, std::chrono::milliseconds timeout);

  runtime::KeyValueStore& inner_;
  const std::function<bool()> superseded_;
  const std::chrono::milliseconds slice_;
};

}  // namespace elastic::trainer
