#include "monitoring/testing/exposition.h"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

namespace elastic::monitoring::testing {
namespace {

TEST(ExpositionTest, ParsesFamiliesLabelsAndSpecialValues) {
  const Exposition e = ParseExposition(
      "# HELP up_total Things\n"
      "# TYPE up_total counter\n"
      "up_total{reason=\"a \\\"quoted\\\" \\\\ value\",b=\"x\",} 3 1700000000000\n"
      "# just a comment\n"
      "\n"
      "# TYPE lat histogram\n"
      "lat_bucket{le=\"+Inf\"} 2\n"
      "lat_sum 1.5e-3\n"
      "g NaN\n"
      "h -Inf\n");
  EXPECT_EQ(e.types.at("up_total"), "counter");
  EXPECT_EQ(e.types.at("lat"), "histogram");
  EXPECT_EQ(e.help.at("up_total"), "Things");
  ASSERT_EQ(e.samples.size(), 5u);
  EXPECT_EQ(e.samples[0].labels.at("reason"), "a \"quoted\" \\ value");
  EXPECT_EQ(e.Value("up_total", {{"b", "x"}}), 3);
  EXPECT_EQ(e.Value("lat_bucket", {{"le", "+Inf"}}), 2);
  EXPECT_DOUBLE_EQ(*e.Value("lat_sum"), 1.5e-3);
  EXPECT_TRUE(std::isnan(*e.Value("g")));
  EXPECT_TRUE(std::isinf(*e.Value("h")));
  EXPECT_FALSE(e.Value("missing").has_value());
  EXPECT_FALSE(e.Value("up_total", {{"b", "y"}}).has_value());
}

TEST(ExpositionTest, AmbiguousLookupIsAnError) {
  const Exposition e = ParseExposition("m{r=\"0\"} 1\nm{r=\"1\"} 2\n");
  EXPECT_THROW(e.Value("m"), ExpositionError);
  EXPECT_EQ(e.Value("m", {{"r", "1"}}), 2);
}

TEST(ExpositionTest, MalformedLinesNameTheLine) {
  const std::vector<std::pair<std::string, int>> cases = {{"m{a=\"1\" 2\n", 2},
                                                          {"m{a=1} 2\n", 2},
                                                          {"m 12abc\n", 2},
                                                          {"m\n", 2},
                                                          {"m{a=\"\\q\"} 1\n", 2},
                                                          {"# TYPE m weird\n", 2},
                                                          {"1m 2\n", 2},
                                                          {"m{a=\"1\",a=\"2\"} 1\n", 2},
                                                          {"# TYPE m gauge\n# TYPE m gauge\n", 3}};
  for (const auto& [bad, line] : cases) {
    try {
      ParseExposition("ok 1\n" + bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ExpositionError& e) {
      EXPECT_NE(std::string(e.what()).find("line " + std::to_string(line) + ":"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace elastic::monitoring::testing
