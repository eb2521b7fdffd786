#include "trainer/state_fuzz.h"

#include <stdexcept>
#include <string_view>

#include "models/registry.h"
#include "trainer/commit_state.h"
#include "trainer/learner.h"

namespace elastic::trainer {
namespace {

Learner& Target() {
  static Learner* learner = [] {
    LearnerOptions options;
    options.model_name = "resnet8";
    options.num_classes = 10;
    options.optimizer.lr = 0.05;
    options.optimizer.momentum = 0.9;
    options.seed = 1;
    torch::manual_seed(1);
    return new Learner(models::CreateModel("resnet8", 10), options, torch::kCPU);
  }();
  return *learner;
}

}  // namespace

std::string StateFuzzLearnerState() { return Target().CaptureState(); }

}  // namespace elastic::trainer

// Bytes that are not a state sealed under the token are refused before any
// decoding; a sealed state is restored. Either ends in a value or an
// exception (the worker reports it and the controller picks another source);
// a crash, hang or sanitizer report is a bug.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using elastic::trainer::Commit;
  try {
    const Commit commit =
        Commit::Open(elastic::trainer::kStateFuzzToken,
                     std::string_view(reinterpret_cast<const char*>(data), size), "the fuzzer");
    elastic::trainer::Target().RestoreState(commit.learner);
  } catch (const std::exception&) {
  }
  return 0;
}
