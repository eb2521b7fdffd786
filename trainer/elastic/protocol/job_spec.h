// The job's settings as values: what the driver builds once from its flags,
// sends every worker (control.capnp JobSpec) and journals, and what a driver
// that takes a job over reads back. Only the flags of the training and elastic
// scopes travel (FlagScope, trainer/flags.h); a process's own (its role, ports,
// addresses, token file) never leave it.
#pragma once

#include <string>
#include <vector>

#include "trainer/elastic/elastic_options.h"
#include "trainer/elastic/protocol/control.capnp.h"
#include "trainer/train_options.h"

namespace elastic::trainer {

struct JobSettings {
  TrainOptions train;
  ElasticOptions elastic;  // its process-scope fields are this process's own
};

void WriteTrainSpec(const TrainOptions& train, proto::TrainSpec::Builder spec);
TrainOptions ReadTrainSpec(proto::TrainSpec::Reader spec);
void WriteElasticSpec(const ElasticOptions& elastic, proto::ElasticSpec::Builder spec);
// Sets the elastic-scope fields of *elastic from `spec`; its process-scope
// fields stay as they are.
void ReadElasticSpec(proto::ElasticSpec::Reader spec, ElasticOptions* elastic);

// Sets the elastic-scope fields of *to from `from` (a job taken over keeps
// its own; the process-scope ones are this driver's).
void TakeElasticScope(const ElasticOptions& from, ElasticOptions* to);

// A JobSpec message (the controller's answer to a worker's spec request).
std::string EncodeJobSpec(const std::string& job_id, const JobSettings& job);

// The job's flags as an older journal kept them (text); parsed as the driver
// parsed its command line. Throws FlagError.
JobSettings SettingsFromFlags(const std::vector<std::string>& flags);

// A flag this driver's own command line gives that the job taken over has
// otherwise; the job keeps its value.
struct FlagChange {
  std::string name;
  std::string job_value;
  std::string given_value;
};
// `given`: the names of the flags the command line gave (FlagSet::given());
// process-scope flags are this process's own and never a change.
std::vector<FlagChange> ChangesToJob(const JobSettings& job, const JobSettings& command_line,
                                     const std::vector<std::string>& given);
// Why the job cannot be taken over with these changes ("" when it can): a
// different --model, --model-file or --dataset is another job, most likely
// started with the wrong --state-dir.
std::string RefusalOfChanges(const std::vector<FlagChange>& changes, const std::string& state_dir);

}  // namespace elastic::trainer
