// Factories of the individual models (internal to models/; callers use
// CreateModel from registry.h). One definition file per model.
#ifndef ELASTIC_MODELS_ZOO_H_
#define ELASTIC_MODELS_ZOO_H_

#include <cstdint>
#include <memory>

#include "models/net.h"

namespace elastic::models {

std::shared_ptr<Net> MakeResNet8(int64_t num_classes);

}  // namespace elastic::models

#endif  // ELASTIC_MODELS_ZOO_H_
