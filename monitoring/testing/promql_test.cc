#include "monitoring/testing/promql.h"

#include <gtest/gtest.h>

namespace elastic::monitoring::testing {
namespace {

using Names = std::set<std::string>;

TEST(PromQLTest, PlainSelectorsAndLabelMatchers) {
  EXPECT_EQ(MetricNamesInPromQL("elastic_world_size"), Names{"elastic_world_size"});
  EXPECT_EQ(MetricNamesInPromQL("elastic_x{reason=~\"join|leave\", job!=\"a}b\"}"),
            Names{"elastic_x"});
}

TEST(PromQLTest, FunctionsAggregationsAndGroupingAreNotMetrics) {
  EXPECT_EQ(
      MetricNamesInPromQL("histogram_quantile(0.99, sum by (le) "
                          "(rate(elastic_allreduce_duration_seconds_bucket[$__rate_interval])))"),
      Names{"elastic_allreduce_duration_seconds_bucket"});
  EXPECT_EQ(MetricNamesInPromQL("sum without(instance) (increase(a_total[5m])) / on(job) "
                                "group_left(rank) max(b) > bool 0 and c offset 5m"),
            (Names{"a_total", "b", "c"}));
  EXPECT_EQ(MetricNamesInPromQL("topk(3, x) or vector(1e-3) unless y"), (Names{"x", "y"}));
}

TEST(PromQLTest, GrafanaVariablesAndNumbersAreSkipped) {
  EXPECT_EQ(MetricNamesInPromQL("rate(m_total[${__interval}]) * 8 + $scale - 1.5e+3"),
            Names{"m_total"});
}

TEST(PromQLTest, UnterminatedInputIsAnError) {
  EXPECT_THROW(MetricNamesInPromQL("m{a=\"1\""), PromQLError);
  EXPECT_THROW(MetricNamesInPromQL("rate(m[5m)"), PromQLError);
  EXPECT_THROW(MetricNamesInPromQL("m{a=\"1}"), PromQLError);
}

}  // namespace
}  // namespace elastic::monitoring::testing
