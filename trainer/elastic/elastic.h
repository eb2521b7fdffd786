// The elastic trainer's entry points, dispatched to from the cifar binary's
// main once the flags are parsed (docs/elastic.md is the protocol):
//
//   --workers N                          RunDriver: head + local node agent + N workers
//   --join HOST:PORT --workers K ...     RunJoin: a node agent adding K workers
//   --role=worker                        RunWorker: one worker (started by an agent)
//
// `args` are the command-line arguments after the program name; the driver
// hands them to every worker through the head's key-value store, so that all
// workers of a job, wherever they were started, train with the same flags.
#pragma once

#include <string>
#include <vector>

#include "trainer/elastic/elastic_options.h"
#include "trainer/elastic/job_controller.h"  // kExitOk, kExitError, kExitStopped
#include "trainer/train_options.h"

namespace elastic::trainer {

int RunDriver(const ElasticOptions& elastic, const TrainOptions& train,
              const std::vector<std::string>& args);
int RunJoin(const ElasticOptions& elastic);
// The worker reads the job's flags from the head; its own are not used.
int RunWorker();

// Dispatches on the options to one of the three above.
int RunElastic(const ElasticOptions& elastic, const TrainOptions& train,
               const std::vector<std::string>& args);

}  // namespace elastic::trainer
