#include "trainer/task.h"

#include <stdexcept>

namespace elastic::trainer {

void Task::Check() const {
  const std::string what = "task '" + name + "'";
  if (name.empty()) throw std::invalid_argument("a task needs a name");
  if (!model) throw std::invalid_argument(what + " has no model");
  if (!train || train->size() == 0) throw std::invalid_argument(what + " has no training data");
  if (!test) throw std::invalid_argument(what + " has no test data");
  if (!objective) throw std::invalid_argument(what + " has no objective");
}

}  // namespace elastic::trainer
