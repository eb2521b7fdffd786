// Factories of the individual models (internal to models/; callers use
// CreateModel from registry.h). One definition file per model.
#ifndef ELASTIC_MODELS_ZOO_H_
#define ELASTIC_MODELS_ZOO_H_

#include <cstdint>
#include <memory>

#include "models/net.h"

namespace elastic::models {

std::shared_ptr<Net> MakeResNet8(int64_t num_classes);          // resnet8.cc
std::shared_ptr<Net> MakeVgg16(int64_t num_classes);            // vgg.cc
std::shared_ptr<Net> MakeResNet18(int64_t num_classes);         // resnet.cc
std::shared_ptr<Net> MakeResNet50(int64_t num_classes);         // resnet.cc
std::shared_ptr<Net> MakeResNet101(int64_t num_classes);        // resnet.cc
std::shared_ptr<Net> MakeRegNetX200MF(int64_t num_classes);     // regnet.cc
std::shared_ptr<Net> MakeRegNetY400MF(int64_t num_classes);     // regnet.cc
std::shared_ptr<Net> MakeMobileNetV2(int64_t num_classes);      // mobilenetv2.cc
std::shared_ptr<Net> MakeResNeXt29_32x4d(int64_t num_classes);  // resnext.cc
std::shared_ptr<Net> MakeResNeXt29_2x64d(int64_t num_classes);  // resnext.cc
std::shared_ptr<Net> MakeSimpleDLA(int64_t num_classes);        // dla_simple.cc
std::shared_ptr<Net> MakeDenseNet121(int64_t num_classes);      // densenet.cc
std::shared_ptr<Net> MakePreActResNet18(int64_t num_classes);   // preact_resnet.cc
std::shared_ptr<Net> MakeDPN92(int64_t num_classes);            // dpn.cc
std::shared_ptr<Net> MakeDLA(int64_t num_classes);              // dla.cc

}  // namespace elastic::models

#endif  // ELASTIC_MODELS_ZOO_H_
