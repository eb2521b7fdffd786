// The job's flags as a worker parses them: the controller sends them as a
// typed JobSpec (control.capnp); every worker trains with the driver's flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/elastic/elastic_options.h"
#include "trainer/train_options.h"

namespace elastic::trainer {

// Parses the job's flags as the driver did (throws FlagError).
void ParseJobArgs(const std::vector<std::string>& args, TrainOptions* train,
                  ElasticOptions* elastic);

}  // namespace elastic::trainer
