// elastic_cifar: the cifar binary's flags with the elastic trainer's added,
// dispatching to the elastic entry points (elastic.h). The elastic tests run
// this binary; //trainer:cifar does the same dispatch in its own main.
#include <cstdio>
#include <string>
#include <vector>

#include "models/registry.h"
#include "trainer/elastic/elastic.h"
#include "trainer/elastic/elastic_options.h"
#include "trainer/flags.h"
#include "trainer/train_options.h"

int main(int argc, char** argv) {
  using namespace elastic::trainer;
  TrainOptions train;
  ElasticOptions elastic;
  FlagSet flags("elastic_cifar",
                "Elastic data-parallel training of a pytorch-cifar model: --workers N starts a "
                "job,\n--join HOST:PORT --workers K --token-file F adds workers to one.");
  RegisterTrainFlags(flags, train);
  RegisterElasticFlags(flags, elastic);
  try {
    flags.Parse(argc, argv);
    if (flags.help_requested()) {
      std::fputs(flags.Help().c_str(), stdout);
      return 0;
    }
    std::vector<std::string> models;
    for (const auto& info : elastic::models::AvailableModels()) models.push_back(info.name);
    ValidateTrainOptions(train, models);
    ValidateElasticOptions(elastic, train);
    if (!IsElasticRun(elastic)) throw FlagError("elastic_cifar needs --workers N or --join");
  } catch (const FlagError& e) {
    std::fprintf(stderr, "elastic_cifar: %s\n", e.what());
    return 2;
  }
  return RunElastic(elastic, train, std::vector<std::string>(argv + 1, argv + argc));
}
