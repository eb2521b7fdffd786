#include "trainer/compute_threads.h"

#include <dlfcn.h>
#include <torch/torch.h>

namespace elastic::trainer {
namespace {

// Looked up at run time: the build links libblas.so.3, whichever library the
// system's alternative points to, and only OpenBLAS has these.
template <typename F>
F* OpenBlasFunction(const char* name) {
  return reinterpret_cast<F*>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

void SetComputeThreads(int threads) {
  torch::set_num_threads(threads);
  if (auto* set = OpenBlasFunction<void(int)>("openblas_set_num_threads")) set(threads);
}

int BlasThreads() {
  auto* get = OpenBlasFunction<int()>("openblas_get_num_threads");
  return get != nullptr ? get() : 0;
}

void StopBlasThreadsUntilNextUse() {
  if (auto* shutdown = OpenBlasFunction<int()>("blas_thread_shutdown_")) shutdown();
}

}  // namespace elastic::trainer
