#include "bench/step_timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "trainer/data/loader.h"
#include "trainer/device.h"
#include "trainer/learner.h"
#include "trainer/sampler.h"

namespace elastic::bench {

double MeasureLearnerStep(std::shared_ptr<models::Net> model, const std::string& model_name,
                          const std::shared_ptr<const trainer::Dataset>& data,
                          const StepTiming& timing) {
  using namespace trainer;
  LoaderOptions loader_options;
  loader_options.batch_size = timing.batch_size;
  loader_options.threads = static_cast<int>(timing.loader_threads);
  loader_options.drop_last = true;
  loader_options.channels_last = timing.channels_last;
  Loader loader(data, loader_options);
  ElasticSampler sampler(data->size(), 0);

  LearnerOptions learner_options;
  learner_options.model_name = model_name;
  learner_options.optimizer.lr = 0.1;
  learner_options.optimizer.momentum = 0.9;
  learner_options.optimizer.weight_decay = 5e-4;
  learner_options.schedule.kind = ScheduleKind::kConstant;
  learner_options.schedule.base_lr = 0.1;
  learner_options.precision = timing.precision;
  learner_options.channels_last = timing.channels_last;
  Learner learner(std::move(model), learner_options, ResolveDevice(timing.device, 0));

  uint64_t epoch = 0;
  loader.Start(sampler.Permutation(epoch), epoch);
  std::chrono::steady_clock::time_point start;
  for (int64_t step = 0; step < timing.warmup_steps + timing.steps; ++step) {
    if (step == timing.warmup_steps) start = std::chrono::steady_clock::now();
    std::optional<Batch> batch = loader.Next();
    if (!batch) {
      ++epoch;
      loader.Start(sampler.Permutation(epoch), epoch);
      batch = loader.Next();
    }
    learner.Step(batch->inputs, batch->targets, 1.0);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(timing.steps * timing.batch_size) / seconds;
}

std::vector<std::string> SplitList(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string Join(const std::vector<double>& values) {
  std::string text;
  for (const double v : values) text += (text.empty() ? "" : ", ") + std::to_string(std::lround(v));
  return text;
}

std::string Figure(const char* format, double value, double over) {
  if (value <= 0 || over <= 0) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), format, value / over);
  return text;
}

double ValueAfter(const std::string& output, const std::string& key) {
  const size_t at = output.rfind(key + "=");
  return at == std::string::npos ? 0 : std::atof(output.c_str() + at + key.size() + 1);
}

}  // namespace elastic::bench
