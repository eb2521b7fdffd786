#include "trainer/elastic/job_keys.h"

namespace elastic::trainer {

std::string JoinJobArgs(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& arg : args) {
    out += arg;
    out.push_back('\0');
  }
  return out;
}

std::vector<std::string> SplitJobArgs(const std::string& bytes) {
  std::vector<std::string> args;
  size_t begin = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != '\0') continue;
    args.push_back(bytes.substr(begin, i - begin));
    begin = i + 1;
  }
  if (begin < bytes.size()) args.push_back(bytes.substr(begin));
  return args;
}

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
