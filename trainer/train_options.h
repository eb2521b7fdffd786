// Everything a single-process training run is configured by, and the flags
// that set it. The distributed trainer registers these same flags and adds
// its own to the FlagSet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/flags.h"

namespace elastic::trainer {

struct TrainOptions {
  // What to train on what.
  std::string model = "resnet18";
  std::string model_file;  // a TorchScript module to train instead of `model`
  bool list_models = false;
  std::string dataset = "cifar10";
  std::string data_dir;
  int64_t image_size = 32;      // image-folder, webdataset: pixels per side
  std::string image_index;      // image-folder, webdataset: the job's index (the driver sets it)
  std::string image_index_dir;  // image-folder, webdataset: where the index is; empty: beside/cache
  std::string normalize;        // image-folder, webdataset: "M,M,M/S,S,S"; empty: measured
  int64_t context = 256;        // tokens: tokens per window the model reads
  int64_t train_samples = 0;    // 0: the whole training set
  int64_t test_samples = 0;     // 0: the whole test set

  // How long.
  int64_t epochs = 200;
  int64_t max_steps = 0;   // 0: no limit
  int64_t eval_every = 0;  // optimizer steps between evaluations inside an epoch; 0: none
  int64_t batch_size = 128;

  // Optimizer.
  std::string optimizer = "sgd";
  double lr = 0.1;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 5e-4;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  bool lookahead = false;
  int64_t lookahead_k = 5;
  double lookahead_alpha = 0.5;

  // Learning-rate schedule.
  std::string schedule = "cosine";
  double warmup_epochs = 5;     // the rate's linear rise from 0 (docs/training.md)
  int64_t warmup_steps = 0;     // ... lasting at least this many optimizer steps
  int64_t recompute_bn = 1024;  // batch-norm statistics re-estimated before evaluating
  int64_t step_size = 30;
  double gamma = 0.1;
  int64_t plateau_patience = 5;
  double plateau_factor = 0.1;
  double min_lr = 0;
  int64_t decay_steps = 0;  // cosine over this many optimizer steps; 0: over --epochs

  // Regularisation and numerics.
  int64_t patience = 0;  // early stopping; 0: off
  double label_smoothing = 0;
  double clip_grad = 0;  // max global gradient norm; 0: off
  bool augment = true;
  bool balance = true;  // --balance: shares of a step sized by speed
  int64_t seed = 0;

  // Arithmetic (trainer/precision.h): autocast's precision and the memory
  // format of convolutions; auto decides from the CPU and the model.
  std::string precision = "auto";      // auto, fp32, bf16, fp16
  std::string memory_format = "auto";  // auto, contiguous, channels-last

  // Checkpoints.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 1;  // epochs
  bool resume = false;
  std::string trace_dir;  // state_trace.h; empty: no trace

  // Machine and output.
  std::string device = "auto";  // auto, cpu, cuda, cuda:N (trainer/device.h)
  int64_t threads = 0;          // 0: LibTorch's default
  int64_t loader_threads = 2;
  int64_t log_every = 50;  // steps between plain progress lines
};

// Binds every TrainOptions field to a flag of `flags`.
void RegisterTrainFlags(FlagSet& flags, TrainOptions& options);

// --normalize's value, "R,G,B/R,G,B": three channel means, then three
// standard deviations, of pixels scaled to [0, 1]. Empty: both empty (the
// data set's measured statistics). Throws FlagError naming what is wrong: not
// three of each, a number that does not parse or is not finite, a standard
// deviation <= 0.
struct ChannelNormalization {
  std::vector<float> mean;
  std::vector<float> std;
};
ChannelNormalization ParseNormalize(const std::string& value);

// True when `spec` is a --device value: auto, cpu, cuda or cuda:N.
bool IsDeviceSpec(const std::string& spec);

// Rejects impossible combinations with a FlagError naming the flag, e.g. a
// negative --lr or a --model that is not in `known_models`.
void ValidateTrainOptions(const TrainOptions& options,
                          const std::vector<std::string>& known_models);

}  // namespace elastic::trainer
