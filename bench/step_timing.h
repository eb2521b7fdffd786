// What the step benchmarks (train_step_bench, model_file_bench) share: our
// Learner::Step timed on a model, fed by our Loader, and the small helpers
// that read and summarise their runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/net.h"
#include "trainer/data/dataset.h"
#include "trainer/precision.h"

namespace elastic::bench {

struct StepTiming {
  int64_t batch_size = 128;
  int64_t loader_threads = 1;
  int64_t warmup_steps = 3;
  int64_t steps = 20;
  std::string device = "cpu";
  trainer::Precision precision = trainer::Precision::kFloat32;
  bool channels_last = false;
};

// Images per second of Learner::Step on `model` (SGD, momentum 0.9, weight
// decay 5e-4, a constant learning rate) over `data` through our Loader, after
// the warm-up steps. Seed LibTorch before building `model`.
double MeasureLearnerStep(std::shared_ptr<models::Net> model, const std::string& model_name,
                          const std::shared_ptr<const trainer::Dataset>& data,
                          const StepTiming& timing);

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> SplitList(const std::string& list);
double Median(std::vector<double> values);
// The values rounded, comma-separated: one run per figure in a table's notes.
std::string Join(const std::vector<double>& values);
// value (or value / over) in printf `format`; "-" for a figure not measured (0).
std::string Figure(const char* format, double value, double over = 1);
// The number after the last "key=" in `output`; 0 if there is none.
double ValueAfter(const std::string& output, const std::string& key);

}  // namespace elastic::bench
