#include "trainer/elastic/sampler.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace elastic::trainer {
namespace {

// splitmix64: a fully specified generator, so the permutation is the same on
// every platform and standard library (std::shuffle's is not).
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void CheckWorld(int rank, int world, int64_t batch) {
  if (world < 1 || rank < 0 || rank >= world || batch < 1) {
    throw std::invalid_argument("sampler: bad step shape rank=" + std::to_string(rank) + " world=" +
                                std::to_string(world) + " batch=" + std::to_string(batch));
  }
}

}  // namespace

ElasticSampler::ElasticSampler(int64_t dataset_size, uint64_t seed)
    : dataset_size_(dataset_size), seed_(seed) {
  if (dataset_size <= 0) throw std::invalid_argument("sampler: the data set is empty");
}

std::vector<int64_t> ElasticSampler::Permutation(uint64_t epoch) const {
  std::vector<int64_t> order(dataset_size_);
  for (int64_t i = 0; i < dataset_size_; ++i) order[i] = i;
  uint64_t state = seed_ ^ (0x5851f42d4c957f2dULL * (epoch + 1));
  for (int64_t i = dataset_size_ - 1; i > 0; --i) {
    // Modulo bias is below 2^-40 for any data set that fits in memory.
    const int64_t j = static_cast<int64_t>(SplitMix64(state) % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

std::vector<int64_t> ElasticSampler::StepIndices(const std::vector<int64_t>& permutation,
                                                 int64_t position, int rank, int world,
                                                 int64_t batch) const {
  CheckWorld(rank, world, batch);
  const int64_t left = dataset_size_ - position;
  if (position < 0 || left <= 0) return {};
  int64_t begin, count;
  if (left >= world * batch) {
    begin = position + rank * batch;
    count = batch;
  } else {
    // Short last step: rank r gets base (+1 for the first `extra` ranks).
    const int64_t base = left / world, extra = left % world;
    begin = position + rank * base + std::min<int64_t>(rank, extra);
    count = base + (rank < extra ? 1 : 0);
  }
  return std::vector<int64_t>(permutation.begin() + begin, permutation.begin() + begin + count);
}

int64_t ElasticSampler::NextPosition(int64_t position, int world, int64_t batch) const {
  return std::min(dataset_size_, position + world * batch);
}

int64_t ElasticSampler::StepsLeft(int64_t position, int world, int64_t batch) const {
  const int64_t left = std::max<int64_t>(0, dataset_size_ - position);
  const int64_t per_step = static_cast<int64_t>(world) * batch;
  return (left + per_step - 1) / per_step;
}

}  // namespace elastic::trainer
