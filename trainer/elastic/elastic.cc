#include "trainer/elastic/elastic.h"

#include <cstdio>
#include <exception>

namespace elastic::trainer {

int RunElastic(const ElasticOptions& elastic, const TrainOptions& train,
               const std::vector<std::string>& given, const JobProgram& program) {
  try {
    if (elastic.role == "worker") return RunWorker(program);
    if (!elastic.join.empty()) return RunJoin(elastic, program);
    // --controller-only is a driver without local workers.
    return RunDriver(elastic, train, given, program);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program.name.c_str(), e.what());
    return kExitError;
  }
}

}  // namespace elastic::trainer
