// What is trained: a Task. The training loop (training_loop.h) knows nothing
// else of it, so the same loop trains the cifar binary's zoo model on CIFAR-10
// and a user's own module on their own data (api/elastic.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/model_file.h"
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
  // Tokens in a sample (a language model's window): throughput is then
  // reported in tokens/s; 0: samples are images, reported in images/s.
  int64_t tokens_per_sample = 0;
  // Whether the model runs faster channels-last (--memory-format=auto).
  bool prefers_channels_last = false;
  // The file the model came from (--model-file), if any: the trained model is
  // written back in its format (model_export.h).
  std::shared_ptr<const models::ModelFile> model_file;
  // How inputs are prepared for the model (JSON: normalisation, size), stored
  // with the trained model so that Python prepares its inputs the same way.
  std::string preprocessing;
  // image-folder, webdataset: the key of the index this task was built from.
  // A job's driver sets it as the job's --image-index, so that its workers and
  // joiners read that index instead of listing and probing the data again.
  std::string pinned_index;

  // Throws std::invalid_argument naming what is missing, and what does not
  // fit (CheckModelFitsData).
  void Check() const;
  // Runs a fresh model on two training samples in eval mode: throws
  // std::invalid_argument when it fails on them, or its output does not fit the
  // objective (a classifier's must be [2, classes]).
  void CheckModelFitsData() const;
};

}  // namespace elastic::trainer
