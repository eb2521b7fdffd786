// The elastic trainer's entry points, dispatched to from a program's main once
// the flags are parsed (docs/elastic.md is the protocol):
//
//   --workers N                          RunDriver: head + local node agent + N workers
//   --join HOST:PORT --workers K ...     RunJoin: a node agent adding K workers
//   --role=worker                        RunWorker: one worker (started by an agent)
//
// controller/driver.cc defines RunDriver and RunJoin, worker/worker.cc
// RunWorker, and elastic.cc RunElastic; this header is all that the roles'
// packages and a program's main share.
//
// The driver hands the job's settings to every worker through the
// controller's typed job spec (protocol/job_spec.h), so that all workers of a job,
// wherever they were started, train with the same settings.
// Workers are this same binary (/proc/self/exe --role=worker), so the same
// JobProgram builds the same Task in every one of them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "trainer/elastic/elastic_options.h"
#include "trainer/elastic/exit_codes.h"
#include "trainer/progress.h"
#include "trainer/task.h"
#include "trainer/train_options.h"

namespace elastic::runtime {
class PreforkedWorkers;
}

namespace elastic::trainer {

// Builds the task from the job's flags; called in every worker, and once in a
// driver with local workers to check it (never in a --controller-only one,
// which may run on a machine without the data).
using TaskFactory = std::function<Task(const TrainOptions&)>;

// What the binary trains, as the elastic processes need it.
struct JobProgram {
  std::string name = "cifar";  // the prefix of its error lines
  std::string title;           // the run report's title (e.g. "cifar: resnet8 on cifar10")
  MetricLabel metric;          // how the driver's progress lines print the task's metric
  TaskFactory make_task;
  // The flags' defaults: the job's arguments are parsed over them in every
  // worker, as in the driver.
  TrainOptions defaults;
  // A --join agent's workers, forked before it started a thread
  // (runtime/preforked_workers.h); null: its workers are exec'd.
  runtime::PreforkedWorkers* preforked_workers = nullptr;
};

// The program's Main builds the task once before (unless --controller-only):
// a bad --data-dir is then one error instead of one per worker. `elastic` and
// `train` are the job's settings as the flags gave them (the driver sends
// them to every worker, typed: job_spec.h); `given` names the flags the
// command line gave, which a driver that takes a job over compares with it.
int RunDriver(const ElasticOptions& elastic, const TrainOptions& train,
              const std::vector<std::string>& given, const JobProgram& program);
int RunJoin(const ElasticOptions& elastic, const JobProgram& program);
// The worker reads the job's settings from the controller; its own command
// line says only that it is a worker.
int RunWorker(const JobProgram& program);

// Dispatches on the options to one of the three above.
int RunElastic(const ElasticOptions& elastic, const TrainOptions& train,
               const std::vector<std::string>& given, const JobProgram& program);

}  // namespace elastic::trainer
