#include "trainer/elastic/job_keys.h"

namespace elastic::trainer {

void ParseJobArgs(const std::vector<std::string>& args, TrainOptions* train,
                  ElasticOptions* elastic) {
  FlagSet flags("cifar", "");
  RegisterTrainFlags(flags, *train);
  RegisterElasticFlags(flags, *elastic);
  std::vector<const char*> argv = {"cifar"};
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  flags.Parse(static_cast<int>(argv.size()), argv.data());
}

}  // namespace elastic::trainer
