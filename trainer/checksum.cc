#include "trainer/checksum.h"

namespace elastic::trainer {

uint64_t ParameterChecksum(const std::vector<torch::Tensor>& parameters) {
  uint64_t hash = 1469598103934665603ULL;
  for (const torch::Tensor& p : parameters) {
    const torch::Tensor c = p.detach().contiguous().cpu();
    const auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
    const size_t n = static_cast<size_t>(c.numel()) * c.element_size();
    for (size_t i = 0; i < n; ++i) hash = (hash ^ bytes[i]) * 1099511628211ULL;
  }
  return hash;
}

}  // namespace elastic::trainer
