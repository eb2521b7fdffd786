// The cifar binary's task: a model of the pytorch-cifar zoo (models/registry.h)
// classifying an image data set (CIFAR-10, Fashion-MNIST) with label-smoothed
// cross-entropy. One Task among others (task.h).
#pragma once

#include <memory>

#include "trainer/data/dataset.h"
#include "trainer/data/user_data.h"
#include "trainer/task.h"
#include "trainer/train_options.h"

namespace elastic::trainer {

// The model of `task`: --model from the zoo, or the module of --model-file
// (whose warnings go to stderr). Throws models::ModelFileError for a file that
// cannot be trained.
void SetModel(const TrainOptions& options, int64_t classes, Task& task);

// --model on the given splits (--label-smoothing for the loss).
Task ZooTask(const TrainOptions& options, std::shared_ptr<const Dataset> train,
             std::shared_ptr<const Dataset> test);

// --model (or --model-file) on a user's data set (--dataset npy, image-folder or webdataset).
Task UserDataTask(const TrainOptions& options, UserData data);

// A language model (--model-file: [N, T] int64 tokens to [N, T, V] logits) on
// the token stream of --data-dir (--dataset tokens), windows of --context
// tokens, next-token cross-entropy. Throws std::invalid_argument without a
// --model-file, and std::runtime_error naming the file for bad data.
Task TokenTask(const TrainOptions& options);

// The same on the splits --dataset and --data-dir name.
Task ZooTaskFromOptions(const TrainOptions& options);

}  // namespace elastic::trainer
