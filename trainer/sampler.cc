#include "trainer/sampler.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "trainer/shares.h"

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

void CheckWorld(int rank, int world, int64_t step_samples) {
  if (world < 1 || rank < 0 || rank >= world || step_samples < 1) {
    throw std::invalid_argument("sampler: bad step shape rank=" + std::to_string(rank) +
                                " world=" + std::to_string(world) +
                                " step_samples=" + std::to_string(step_samples));
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

int64_t ElasticSampler::Share(int64_t samples, int rank, int world) {
  return samples / world + (rank < samples % world ? 1 : 0);
}

std::vector<int64_t> ElasticSampler::StepIndices(const std::vector<int64_t>& permutation,
                                                 int64_t position, int rank, int world,
                                                 int64_t step_samples) const {
  CheckWorld(rank, world, step_samples);
  return StepIndices(permutation, position, rank, EvenShares(step_samples, world));
}

std::vector<int64_t> ElasticSampler::StepIndices(const std::vector<int64_t>& permutation,
                                                 int64_t position, int rank,
                                                 const std::vector<int64_t>& shares) const {
  const int world = static_cast<int>(shares.size());
  const int64_t step_samples = std::accumulate(shares.begin(), shares.end(), int64_t{0});
  CheckWorld(rank, world, step_samples);
  if (std::any_of(shares.begin(), shares.end(), [](int64_t s) { return s < 0; }))
    throw std::invalid_argument("sampler: a negative share");
  if (position < 0 || position >= dataset_size_) return {};
  const int64_t samples = std::min(step_samples, dataset_size_ - position);
  std::vector<int64_t> split = shares;
  if (samples < step_samples) {
    // The even split of a short step is the even split of what is left (the
    // ranks' shares as before speeds were measured, to the sample).
    const bool even = shares == EvenShares(step_samples, world);
    split = even ? EvenShares(samples, world)
                 : Apportion(samples, std::vector<double>(shares.begin(), shares.end()));
  }
  const int64_t begin = position + std::accumulate(split.begin(), split.begin() + rank, int64_t{0});
  const int64_t count = split[static_cast<size_t>(rank)];
  return std::vector<int64_t>(permutation.begin() + begin, permutation.begin() + begin + count);
}

int64_t ElasticSampler::NextPosition(int64_t position, int64_t step_samples) const {
  CheckWorld(0, 1, step_samples);
  return std::min(dataset_size_, position + step_samples);
}

int64_t ElasticSampler::StepsLeft(int64_t position, int64_t step_samples) const {
  CheckWorld(0, 1, step_samples);
  const int64_t left = std::max<int64_t>(0, dataset_size_ - position);
  return (left + step_samples - 1) / step_samples;
}

}  // namespace elastic::trainer
