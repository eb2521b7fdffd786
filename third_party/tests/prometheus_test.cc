// prometheus-cpp is wired in: a registry with a counter and a gauge serialises
// to the text exposition format with the values we set.
#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

TEST(PrometheusTest, RegistrySerialisesToText) {
  prometheus::Registry registry;
  auto& counter = prometheus::BuildCounter()
                      .Name("smoke_events_total")
                      .Help("Events seen")
                      .Register(registry)
                      .Add({{"kind", "test"}});
  counter.Increment(3);
  auto& gauge =
      prometheus::BuildGauge().Name("smoke_world_size").Help("Workers").Register(registry).Add({});
  gauge.Set(4);

  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_NE(text.find("# TYPE smoke_events_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("smoke_events_total{kind=\"test\"} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("smoke_world_size 4"), std::string::npos) << text;
}
