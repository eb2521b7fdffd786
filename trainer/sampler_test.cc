#include "trainer/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace elastic::trainer {
namespace {

TEST(ElasticSamplerTest, PermutationIsAPermutationAndDependsOnEpochAndSeed) {
  ElasticSampler sampler(1000, 7);
  std::vector<int64_t> a = sampler.Permutation(0);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(a, ElasticSampler(1000, 7).Permutation(0));  // reproducible
  EXPECT_NE(a, sampler.Permutation(1));                  // reshuffled every epoch
  EXPECT_NE(a, ElasticSampler(1000, 8).Permutation(0));  // seed matters
}

// The order statistics a training run depends on, measured over many epochs
// of the size of the CIFAR-10 subset (4,068 samples) as a DistributedSampler
// would give them: every sample is equally likely at every position, one
// epoch's order says nothing about the next one's (nor one seed's about
// another's), and whether two samples share a step, or a sample stays on
// its rank, is left to chance afresh each epoch. Bounds are 5 standard
// deviations of what a uniformly random permutation gives.
TEST(ElasticSamplerTest, OrderStatisticsAreThoseOfUniformPermutations) {
  const int64_t n = 4068, step = 128;
  const int epochs = 400, world = 2;
  ElasticSampler sampler(n, 0);
  std::vector<std::vector<int64_t>> position_of(epochs, std::vector<int64_t>(n));
  for (int e = 0; e < epochs; ++e) {
    const std::vector<int64_t> order = sampler.Permutation(static_cast<uint64_t>(e));
    for (int64_t p = 0; p < n; ++p) position_of[e][order[p]] = p;
  }
  // Each sample's mean position over the epochs: (n-1)/2, with a spread of
  // sqrt((n^2-1)/12 / epochs).
  const double mean_spread = std::sqrt((static_cast<double>(n) * n - 1) / 12.0 / epochs);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int e = 0; e < epochs; ++e) sum += static_cast<double>(position_of[e][i]);
    worst = std::max(worst, std::abs(sum / epochs - (n - 1) / 2.0) / mean_spread);
  }
  // The largest of 4,068 near-normal deviations stays below about 4.5.
  EXPECT_LT(worst, 5.0) << "a sample's mean position is off by " << worst << " sigma";

  // Consecutive epochs (and the same epoch of another seed): rank correlation
  // of the positions near 0, within 5 / sqrt(n).
  auto correlation = [&](const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    const double mean = (n - 1) / 2.0, variance = (static_cast<double>(n) * n - 1) / 12.0;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (a[i] - mean) * (b[i] - mean);
    return sum / n / variance;
  };
  const double bound = 5.0 / std::sqrt(static_cast<double>(n));
  for (int e = 0; e + 1 < epochs; ++e)
    ASSERT_LT(std::abs(correlation(position_of[e], position_of[e + 1])), bound) << "epoch " << e;
  for (uint64_t seed = 1; seed < 5; ++seed) {
    const std::vector<int64_t> order = ElasticSampler(n, seed).Permutation(0);
    std::vector<int64_t> position(n);
    for (int64_t p = 0; p < n; ++p) position[order[p]] = p;
    EXPECT_LT(std::abs(correlation(position_of[0], position)), bound) << "seed " << seed;
  }

  // Pairs that share a step in one epoch share one in the next with the
  // chance any pair has: (step - 1) / (n - 1). And a sample trains on the same
  // rank as in the epoch before half the time at world 2.
  int64_t pairs = 0, pairs_again = 0, same_rank = 0;
  // Which rank trains each sample in epoch e, as the workers draw steps.
  auto ranks_in = [&](int e) {
    const std::vector<int64_t> order = sampler.Permutation(static_cast<uint64_t>(e));
    std::vector<int> rank(n, -1);
    for (int64_t start = 0; start < n; start = sampler.NextPosition(start, step))
      for (int r = 0; r < world; ++r)
        for (int64_t i : sampler.StepIndices(order, start, r, world, step)) rank[i] = r;
    return rank;
  };
  for (int e = 0; e + 1 < epochs; e += 7) {
    const std::vector<int64_t> order = sampler.Permutation(static_cast<uint64_t>(e));
    for (int64_t p = 0; p + 1 < n; p += 2) {  // disjoint pairs of step-mates
      const int64_t a = order[p], b = order[p + 1];
      if (p / step != (p + 1) / step) continue;
      ++pairs;
      if (position_of[e + 1][a] / step == position_of[e + 1][b] / step) ++pairs_again;
    }
    const std::vector<int> now = ranks_in(e), next = ranks_in(e + 1);
    for (int64_t i = 0; i < n; ++i) same_rank += now[i] == next[i];
  }
  const double together = static_cast<double>(step - 1) / (n - 1);
  const double expected_pairs = pairs * together;
  EXPECT_NEAR(pairs_again, expected_pairs, 5 * std::sqrt(expected_pairs * (1 - together)));
  const int64_t samples = n * ((epochs - 2) / 7 + 1);
  EXPECT_NEAR(same_rank, samples / 2.0, 5 * std::sqrt(samples / 4.0));
}

// Pinned values: bench/ddp_peer.py --order=elastic ports this permutation to
// train the peer on our sample order (an accuracy ablation), and
// bench/ddp_peer_test.sh checks the port against the same numbers.
TEST(ElasticSamplerTest, PermutationIsPinned) {
  const std::vector<int64_t> order = ElasticSampler(4068, 0).Permutation(0);
  EXPECT_EQ(std::vector<int64_t>(order.begin(), order.begin() + 8),
            (std::vector<int64_t>{2275, 1933, 2321, 2210, 1391, 3203, 2792, 218}));
}

TEST(ElasticSamplerTest, RanksOfAStepAreDisjointAndCoverTheEpoch) {
  ElasticSampler sampler(1003, 1);  // not divisible by world * batch
  const std::vector<int64_t> perm = sampler.Permutation(3);
  std::multiset<int64_t> seen;
  int64_t position = 0, steps = 0;
  const int world = 4;
  const int64_t batch = 32;
  const int64_t expected_steps = sampler.StepsLeft(0, world * batch);
  while (position < 1003) {
    for (int r = 0; r < world; ++r) {
      for (int64_t i : sampler.StepIndices(perm, position, r, world, world * batch)) seen.insert(i);
    }
    position = sampler.NextPosition(position, world * batch);
    ++steps;
  }
  EXPECT_EQ(steps, expected_steps);
  ASSERT_EQ(seen.size(), 1003u);
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 1003u);  // each exactly once
}

TEST(ElasticSamplerTest, ShortLastStepIsSpreadEvenly) {
  ElasticSampler sampler(10, 0);
  const std::vector<int64_t> perm = sampler.Permutation(0);
  // 10 samples, world 3, steps of 24: one short step of 4/3/3.
  EXPECT_EQ(sampler.StepIndices(perm, 0, 0, 3, 24).size(), 4u);
  EXPECT_EQ(sampler.StepIndices(perm, 0, 1, 3, 24).size(), 3u);
  EXPECT_EQ(sampler.StepIndices(perm, 0, 2, 3, 24).size(), 3u);
  EXPECT_TRUE(sampler.StepIndices(perm, 10, 0, 3, 24).empty());
}

// --global-batch: every step consumes G samples whatever the world, split as
// evenly as possible, and the epoch is still covered exactly once when G is
// not divisible by the world (nor the data set by G, nor G by the micro-batch).
TEST(ElasticSamplerTest, GlobalBatchStepsAreSplitEvenlyAndCoverTheEpochOnce) {
  const int64_t n = 1001, global_batch = 50;
  ElasticSampler sampler(n, 9);
  const std::vector<int64_t> perm = sampler.Permutation(2);
  for (int world : {1, 2, 3, 7}) {
    std::multiset<int64_t> seen;
    int64_t position = 0, steps = 0;
    while (position < n) {
      const int64_t samples = std::min(global_batch, n - position);
      int64_t total = 0;
      for (int r = 0; r < world; ++r) {
        const std::vector<int64_t> share =
            sampler.StepIndices(perm, position, r, world, global_batch);
        // Shares differ by at most one, larger first.
        EXPECT_EQ(static_cast<int64_t>(share.size()), ElasticSampler::Share(samples, r, world));
        EXPECT_LE(static_cast<int64_t>(share.size()), (samples + world - 1) / world);
        EXPECT_GE(static_cast<int64_t>(share.size()), samples / world);
        total += static_cast<int64_t>(share.size());
        seen.insert(share.begin(), share.end());
      }
      EXPECT_EQ(total, samples) << "world " << world << " position " << position;
      position = sampler.NextPosition(position, global_batch);
      ++steps;
    }
    EXPECT_EQ(steps, 21) << "world " << world;  // 20 steps of 50 and one of 1
    EXPECT_EQ(steps, sampler.StepsLeft(0, global_batch));
    ASSERT_EQ(seen.size(), static_cast<size_t>(n)) << "world " << world;
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), static_cast<size_t>(n))
        << "world " << world << ": a sample was used twice";
  }
  // 50 over 3 ranks: 17/17/16. One sample over 3 ranks: 1/0/0.
  EXPECT_EQ(ElasticSampler::Share(50, 0, 3), 17);
  EXPECT_EQ(ElasticSampler::Share(50, 2, 3), 16);
  EXPECT_EQ(sampler.StepIndices(perm, 1000, 0, 3, global_batch).size(), 1u);
  EXPECT_TRUE(sampler.StepIndices(perm, 1000, 1, 3, global_batch).empty());
  EXPECT_TRUE(sampler.StepIndices(perm, 1000, 2, 3, global_batch).empty());
}

// The property the elastic trainer relies on: a world that changes at commit
// points (and redoes the steps after the last commit after a failure) still
// uses every sample of the epoch exactly once.
TEST(ElasticSamplerTest, WorldChangesAtCommitsUseEverySampleOnce) {
  const int64_t n = 5000, batch = 16;
  ElasticSampler sampler(n, 42);
  const std::vector<int64_t> perm = sampler.Permutation(0);
  std::map<int64_t, int> uses;
  int64_t committed = 0, position = 0;
  const int worlds[] = {2, 4, 3, 1, 5, 2};
  int phase = 0;
  while (position < n) {
    const int world = worlds[phase % 6];
    std::vector<int64_t> step;
    for (int r = 0; r < world; ++r) {
      auto idx = sampler.StepIndices(perm, position, r, world, world * batch);
      step.insert(step.end(), idx.begin(), idx.end());
    }
    position = sampler.NextPosition(position, world * batch);
    for (int64_t i : step) ++uses[i];
    if (position % 7 == 0 || position == n) committed = position;  // a commit
    if (position - committed > 200) {
      // A failure: the steps after the commit are discarded and redone by a
      // different world; their samples are not counted twice.
      for (int64_t i : std::vector<int64_t>(perm.begin() + committed, perm.begin() + position))
        --uses[i];
      position = committed;
      ++phase;
    }
  }
  ASSERT_EQ(static_cast<int64_t>(uses.size()), n);
  for (const auto& [index, count] : uses) ASSERT_EQ(count, 1) << "sample " << index;
}

TEST(ElasticSamplerTest, RejectsBadShapes) {
  EXPECT_THROW(ElasticSampler(0, 1), std::invalid_argument);
  ElasticSampler sampler(10, 0);
  const auto perm = sampler.Permutation(0);
  EXPECT_THROW(sampler.StepIndices(perm, 0, 3, 3, 8), std::invalid_argument);
  EXPECT_THROW(sampler.StepIndices(perm, 0, 0, 0, 8), std::invalid_argument);
  EXPECT_THROW(sampler.StepIndices(perm, 0, 0, 1, 0), std::invalid_argument);
  EXPECT_THROW(sampler.StepsLeft(0, 0), std::invalid_argument);
}

}  // namespace
}  // namespace elastic::trainer
