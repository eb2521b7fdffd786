// What is trained: a Task. The training loop (training_loop.h) knows nothing
// else of it, so the same loop trains the cifar binary's zoo model on CIFAR-10
// and a user's own module on their own data (api/elastic.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/net.h"
#include "trainer/data/examples.h"
#include "trainer/objective.h"

namespace elastic::trainer {

struct Task {
  // What the job is called in its report and dashboards ("cifar").
  std::string name;
  // Recorded in every state and checkpoint: a state of another model is refused.
  std::string model_name;
  // A freshly initialised model. Called after LibTorch is seeded with --seed,
  // on every rank and at every generation: it must build the same
  // architecture each time (the state broadcast then makes the values equal).
  std::function<std::shared_ptr<models::Net>()> model;
  std::shared_ptr<const Examples> train;
  std::shared_ptr<const Examples> test;
  std::shared_ptr<const Objective> objective;
  // Names of the classes for a per-class report (a classifier's); may be empty.
  std::vector<std::string> class_names;
  // Whether the model runs faster channels-last (--memory-format=auto).
  bool prefers_channels_last = false;

  // Throws std::invalid_argument naming what is missing.
  void Check() const;
};

}  // namespace elastic::trainer
