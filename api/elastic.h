// The public C++ API: write the main() of your own elastic training binary.
//
//   #include "api/elastic.h"
//
//   int main(int argc, char** argv) {
//     elastic::Program program;
//     program.name = "mytrainer";
//     program.summary = "Trains my model on my data.";
//     program.make_task = [](const elastic::TrainOptions& flags) {
//       elastic::Task task;
//       task.name = "mytrainer";
//       task.model_name = "my-mlp";
//       task.model = [] { return std::make_shared<MyModel>(); };  // a LibTorch module
//       task.train = std::make_shared<elastic::TensorExamples>("train", x, y);
//       task.test = std::make_shared<elastic::TensorExamples>("test", xt, yt);
//       task.objective = std::make_shared<elastic::Regression>();
//       return task;
//     };
//     return elastic::Main(argc, argv, program);
//   }
//
// The binary then takes every flag the cifar binary takes (--help lists them:
// --epochs, --lr, --batch-size, --checkpoint-dir, --resume, ...) and runs as
// cifar does: in one process; with --workers N as the driver of an elastic job
// (a head, a controller, N worker processes that are this same binary);
// with --join HOST:PORT as a node adding workers; with --controller-only as a
// controller on a machine without workers; or as one rank of a fixed job
// under mpirun. Exactly-once sampling, commits, the controller's copy,
// checkpoints and --resume, metrics and the run report come with it, and in
// every mode the job's event log, <--run-dir>/events.jsonl (docs/events.md).
// docs/writing-a-trainer.md walks through it; examples/regression is one.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "models/net.h"
#include "models/registry.h"
#include "trainer/data/examples.h"
#include "trainer/data/token_stream.h"
#include "trainer/objective.h"
#include "trainer/progress.h"
#include "trainer/task.h"
#include "trainer/train_options.h"

namespace elastic {

// A model: a LibTorch module with forward(Tensor) -> Tensor.
using Model = models::Net;
using models::CreateModel;
using models::ModelInfo;
using models::RegisterModel;

using trainer::Batch;
using trainer::BatchRequest;
using trainer::Classification;
using trainer::EvalResult;
using trainer::Examples;
using trainer::LanguageModel;
using trainer::LoadTokenData;
using trainer::MetricLabel;
using trainer::Objective;
using trainer::Regression;
using trainer::Task;
using trainer::TensorExamples;
using trainer::TokenData;
using trainer::TrainOptions;

// What the binary is and trains.
struct Program {
  std::string name;     // in --help and in its error lines
  std::string summary;  // --help's first paragraph: what it trains
  // Builds the task from the flags. Called in every process that trains (each
  // worker, or the one process), and once in the driver to check it before
  // any worker starts; never in a --controller-only driver. It must build the
  // same task in every process: workers run this same binary.
  std::function<Task(const TrainOptions&)> make_task;
  // Whether --model names a model of the registry (the zoo and the models
  // added with RegisterModel): it is then checked before anything starts.
  bool model_from_registry = false;
  // The run report's title from the flags; null: the name.
  std::function<std::string(const TrainOptions&)> title;
  // How a --controller-only driver, which builds no task, prints the metric
  // (every other process takes it from the task's objective).
  MetricLabel controller_metric;
  // The flags' defaults (a recipe that fits the task); the command line
  // overrides them and --help shows them.
  TrainOptions defaults;
};

// Parses the flags and runs the program as they say (see the file comment).
// Returns the process's exit status: 0 done, 1 an error, 2 bad flags, 3
// stopped before the last epoch (with a checkpoint to --resume from).
int Main(int argc, char** argv, const Program& program);

}  // namespace elastic
