#include "trainer/train_options.h"

#include <algorithm>
#include <cmath>
#include <regex>
#include <sstream>

namespace elastic::trainer {

void RegisterTrainFlags(FlagSet& f, TrainOptions& o) {
  f.SetScope(FlagScope::kTraining);
  f.AddString("model", &o.model, "Model to train (see --list-models).");
  f.AddString("model-file", &o.model_file,
              "Train this PyTorch module instead of --model: a file written by "
              "torch.jit.script(model).save(PATH) in Python (docs/your-model-and-data.md). Its "
              "parameters and buffers are trained, committed and checkpointed; the trained "
              "module is written back to --checkpoint-dir as model.pt (torch.jit.load).");
  f.AddBool("list-models", &o.list_models, "Print every model with its parameter count and exit.");
  f.AddString("dataset", &o.dataset,
              "Data set. image-folder: --data-dir holds train/ and test/ (or val/), one folder "
              "of JPEG or PNG files per class as torchvision's ImageFolder reads them. npy: "
              "--data-dir holds train_x.npy, train_y.npy, test_x.npy and test_y.npy written by "
              "numpy.save (images uint8 or float32, NCHW or NHWC; integer labels). tokens: a "
              "language model's token stream, --data-dir holds train.bin and val.bin (flat "
              "uint16 or uint32 token ids, as nanoGPT's prepare.py writes them) and meta.json "
              "({\"vocab_size\": V, \"dtype\": \"uint16\"}); a sample is a window of --context + 1 "
              "tokens, the model maps [N, T] int64 tokens to [N, T, V] logits. webdataset: "
              "--data-dir holds train/ and test/ (or val/) of WebDataset shards, uncompressed "
              ".tar files whose members KEY.jpg, KEY.jpeg or KEY.png and KEY.cls (the class "
              "index as decimal text) make one sample per KEY, read in place through an index "
              "built once per job.",
              {"cifar10", "fashion-mnist", "image-folder", "npy", "tokens", "webdataset"});
  f.AddString("data-dir", &o.data_dir,
              "Directory with the data set's files; empty: the standard place (CIFAR-10 is "
              "downloaded to a cache, Fashion-MNIST is read from /usr/share/datasets); needed "
              "for image-folder, npy, tokens and webdataset.");
  f.AddInt("context", &o.context,
           "tokens: tokens a window gives the model (its targets are the same shifted by one); "
           "at most the model's position table.");
  f.AddInt("image-size", &o.image_size,
           "image-folder and webdataset: every image is resized to this many pixels square.");
  f.AddString("image-index-dir", &o.image_index_dir,
              "image-folder and webdataset: where the data set's index is kept (its listing, "
              "labels, header checks or sample offsets, and normalisation, built once per job "
              "and read by every other process); empty: beside the data "
              "(DIR/.elastic-image-index, DIR/.elastic-webdataset-index) when that directory is "
              "writable, else in the cache ($ELASTIC_CACHE or ~/.cache/elastic, image-index/).");
  f.AddString("normalize", &o.normalize,
              "image-folder and webdataset: the per-channel mean and standard deviation of the "
              "pixels (scaled to [0, 1]) that inputs are normalised with, as R,G,B/R,G,B (e.g. "
              "ImageNet's 0.485,0.456,0.406/0.229,0.224,0.225, as torchvision's Normalize "
              "takes them); empty: measured once per job on 1,000 training images and kept in "
              "the index.");
  f.AddString("image-index", &o.image_index,
              "image-folder and webdataset: the key of the index every process of the job reads "
              "instead of listing and probing the folder or scanning the shards. The driver sets "
              "it for its workers and joiners once it has indexed the data; empty: list the data "
              "and index what is there.");
  f.AddInt("train-samples", &o.train_samples,
           "Train on the first N training images only; 0: all of them.");
  f.AddInt("test-samples", &o.test_samples,
           "Evaluate on the first N test images only; 0: all of them.");
  f.AddInt("epochs", &o.epochs, "Number of passes over the training set.");
  f.AddInt("max-steps", &o.max_steps,
           "Stop after this many optimizer steps in total (the last epoch is cut short and "
           "evaluated); 0: no limit.");
  f.AddInt("eval-every", &o.eval_every,
           "Evaluate the test set every this many optimizer steps as well as after each epoch "
           "(an \"eval step\" line, the test-loss gauges): a language model's epoch is long, "
           "and its validation loss is followed by steps, as nanoGPT's eval_interval. "
           "0: after each epoch only.");
  f.AddInt("batch-size", &o.batch_size,
           "Images per optimizer step; with --workers, split over the workers (--global-batch, "
           "--per-worker-batch).");
  f.AddString("optimizer", &o.optimizer,
              "Optimizer. sgd: --momentum, --nesterov, --weight-decay as L2; adam: "
              "--weight-decay as L2 added to the gradient; adamw: decoupled weight decay "
              "(torch.optim.AdamW) of the matrices, convolutions and embeddings only, not of "
              "biases and norms' gains, as nanoGPT groups them.",
              {"sgd", "adam", "adamw"});
  f.AddDouble("lr", &o.lr,
              "Peak learning rate (reached after warm-up), at every world size; x world size "
              "with --per-worker-batch or mpirun.");
  f.AddDouble("momentum", &o.momentum, "SGD momentum.");
  f.AddBool("nesterov", &o.nesterov, "Use Nesterov momentum with SGD.");
  f.AddDouble("weight-decay", &o.weight_decay,
              "Weight decay: L2 for sgd and adam, decoupled for adamw.");
  f.AddDouble("adam-beta1", &o.adam_beta1, "Adam's and AdamW's first-moment decay.");
  f.AddDouble("adam-beta2", &o.adam_beta2, "Adam's and AdamW's second-moment decay.");
  f.AddBool("lookahead", &o.lookahead,
            "Wrap the optimizer in Lookahead: every k steps the slow weights move alpha of the "
            "way to the fast weights and the fast weights restart from them.");
  f.AddInt("lookahead-k", &o.lookahead_k, "Lookahead: fast steps per slow step.");
  f.AddDouble("lookahead-alpha", &o.lookahead_alpha, "Lookahead: slow step size in (0, 1].");
  f.AddString("schedule", &o.schedule,
              "Learning-rate schedule after warm-up: cosine decays to --min-lr over the run, "
              "step multiplies by --gamma every --step-size epochs, plateau multiplies by "
              "--plateau-factor when test loss has not improved for --plateau-patience epochs.",
              {"cosine", "step", "plateau", "constant"});
  f.AddDouble("warmup-epochs", &o.warmup_epochs,
              "Linear warm-up from 0 to the peak rate (--lr) "
              "over this many epochs (fractions allowed), as Goyal et al. and Horovod's examples "
              "do. Without it ResNet18 at lr 0.1 diverged in its first epoch at every world size, "
              "world 1 included (docs/training.md, \"Warm-up by default\"); 0: the full rate from "
              "the first step, as pytorch-cifar.");
  f.AddInt("warmup-steps", &o.warmup_steps,
           "Warm-up lasts at least this many optimizer steps: the rate is the schedule's times "
           "the smaller of epochs / --warmup-epochs and steps / --warmup-steps. Steps, not "
           "epochs, are what a warm-up needs, and a large world on a small data set takes few "
           "steps an epoch. 0: epochs alone.");
  f.AddInt("recompute-bn", &o.recompute_bn,
           "Before each evaluation, re-estimate batch norm's statistics at the current weights "
           "as the plain average over this many training images (unaugmented, shared by the "
           "workers), instead of evaluating with the running averages, which trail fast-moving "
           "weights: ResNet18 on the CIFAR-10 subset printed a test loss of 5.49 after epoch 2 "
           "with them and 1.99 with recomputed ones (docs/training.md). The re-estimate is kept "
           "and saved with the model. 0: the running averages, as PyTorch evaluates.");
  f.AddInt("step-size", &o.step_size, "Step schedule: epochs between decays.");
  f.AddDouble("gamma", &o.gamma, "Step schedule: decay factor.");
  f.AddInt("plateau-patience", &o.plateau_patience,
           "Plateau schedule: epochs without improvement before the rate drops.");
  f.AddDouble("plateau-factor", &o.plateau_factor, "Plateau schedule: decay factor.");
  f.AddDouble("min-lr", &o.min_lr, "Lowest learning rate of the cosine and plateau schedules.");
  f.AddInt("decay-steps", &o.decay_steps,
           "Cosine schedule counted in optimizer steps: from the end of --warmup-steps the "
           "rate falls to --min-lr at this step and stays there (nanoGPT's lr_decay_iters; "
           "language models are trained by steps). 0: the cosine spans --epochs.");
  f.AddInt("patience", &o.patience,
           "Early stopping: stop when test loss has not improved for this many epochs; 0: off.");
  f.AddDouble("label-smoothing", &o.label_smoothing,
              "Label smoothing of the cross-entropy loss, in [0, 1).");
  f.AddDouble("clip-grad", &o.clip_grad,
              "Clip the global L2 norm of the gradients to this value; 0: off.");
  f.AddBool("balance", &o.balance,
            "Size each worker's share of a step by its measured speed, re-planned at commits "
            "from the workers' own step times (docs/elastic.md, \"Shares sized by speed\"), "
            "so that a slow worker no longer sets everyone's pace. The global batch, the "
            "learning rate and each sample's weight stay as they are; per-worker --batch-size "
            "then means the mean share (a step is --batch-size x workers), and a share above "
            "--batch-size is trained in micro-batches of at most --batch-size. Identical "
            "workers keep the even split. --no-balance: always the even split, for runs "
            "that must be bit-reproducible whatever the machines' speeds.");
  f.AddBool("augment", &o.augment,
            "Random crop (4-pixel padding) and horizontal flip of training images.");
  f.AddString("precision", &o.precision,
              "Precision of the forward pass (autocast; weights, gradients, their allreduce and "
              "checkpoints stay fp32). auto: bf16 on a CPU with AMX-BF16 or AVX512-BF16, fp32 on "
              "other CPUs and on CUDA. bf16: bfloat16 autocast; refused where LibTorch's bf16 "
              "convolutions are wrong (measured at start: AVX2-only CPUs), emulated and slow "
              "on other CPUs without those instructions. fp16: float16 autocast with dynamic "
              "loss scaling, CUDA only. fp64: everything in float64 (weights, activations, "
              "gradients, allreduce, optimizer state, checkpoints), contiguous, no fused "
              "kernels: slow, for comparing runs step for step (bench/float64_check.py).",
              {"auto", "fp32", "bf16", "fp16", "fp64"});
  f.AddString("memory-format", &o.memory_format,
              "Memory format of images and convolution weights. auto: channels-last for the "
              "models measured faster with it (--list-models shows which), contiguous for the "
              "others.",
              {"auto", "contiguous", "channels-last"});
  f.AddInt("seed", &o.seed, "Seed of every random choice (weights, order, augmentation).");
  f.AddString("checkpoint-dir", &o.checkpoint_dir,
              "Directory for checkpoint.ckpt (written atomically); empty: no checkpoints.");
  f.AddInt("checkpoint-every", &o.checkpoint_every, "Epochs between checkpoints.");
  f.AddBool("resume", &o.resume,
            "Continue from the checkpoint in --checkpoint-dir exactly where it stopped.");
  f.AddString("trace-dir", &o.trace_dir,
              "Write every step's loss, learning rate, parameters, buffers and optimizer state, "
              "and every evaluation's sums, to DIR/rank<R>/step<N>.pt and eval<E>.pt (torch.load "
              "reads them), to compare runs step for step (bench/float64_check.py). A file per "
              "step: for debugging numerics, not for long runs. Empty: off.");
  f.AddString("device", &o.device,
              "Where to train: auto (a GPU when this build and machine have one, else the CPU), "
              "cpu, cuda (a worker's GPU is its index on the machine modulo the GPU count) or "
              "cuda:N.");
  f.AddInt("threads", &o.threads, "Compute threads of LibTorch; 0: its default.");
  f.AddInt("loader-threads", &o.loader_threads, "Threads that decode and augment batches.");
  f.AddInt("log-every", &o.log_every,
           "Steps between progress lines when stdout is not a terminal (a terminal gets a live "
           "line).");
}

namespace {

void Require(bool ok, const std::string& flag, const std::string& what) {
  if (!ok) throw FlagError("--" + flag + " " + what);
}

template <typename T>
std::string Show(T value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

ChannelNormalization ParseNormalize(const std::string& value) {
  ChannelNormalization out;
  if (value.empty()) return out;
  const auto slash = value.find('/');
  if (slash == std::string::npos || value.find('/', slash + 1) != std::string::npos) {
    throw FlagError("--normalize=" + value +
                    ": expected three means, a slash, three standard deviations "
                    "(R,G,B/R,G,B), e.g. 0.485,0.456,0.406/0.229,0.224,0.225");
  }
  const auto parse = [&value](const std::string& part, const char* what) {
    std::vector<float> numbers;
    std::stringstream in(part);
    std::string item;
    while (std::getline(in, item, ',')) {
      size_t used = 0;
      float number = 0;
      try {
        number = std::stof(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != item.size() || !std::isfinite(number)) {
        throw FlagError("--normalize=" + value + ": " + what + " '" + item +
                        "' is not a finite number");
      }
      numbers.push_back(number);
    }
    if (numbers.size() != 3) {
      throw FlagError("--normalize=" + value + ": expected 3 " + what + "s (R,G,B), got " +
                      std::to_string(numbers.size()));
    }
    return numbers;
  };
  out.mean = parse(value.substr(0, slash), "mean");
  out.std = parse(value.substr(slash + 1), "standard deviation");
  for (float s : out.std) {
    if (s <= 0) {
      throw FlagError("--normalize=" + value + ": a standard deviation must be > 0, got " +
                      Show(s));
    }
  }
  return out;
}

bool IsDeviceSpec(const std::string& spec) {
  static const std::regex kSpec("auto|cpu|cuda(:[0-9]+)?");
  return std::regex_match(spec, kSpec);
}

void ValidateTrainOptions(const TrainOptions& o, const std::vector<std::string>& known_models) {
  if (!o.list_models && !known_models.empty() &&
      std::find(known_models.begin(), known_models.end(), o.model) == known_models.end()) {
    std::string list;
    for (const std::string& name : known_models) list += (list.empty() ? "" : ", ") + name;
    throw FlagError("--model=" + o.model + ": unknown model; known models: " + list);
  }
  Require(o.image_size >= 8 && o.image_size <= 4096, "image-size",
          "must be in [8, 4096], got " + Show(o.image_size));
  const bool images = o.dataset == "image-folder" || o.dataset == "webdataset";
  Require(o.image_size == 32 || images, "image-size",
          "applies to --dataset=image-folder or webdataset only");
  Require(o.image_index.empty() || images, "image-index",
          "applies to --dataset=image-folder or webdataset only");
  Require(o.image_index_dir.empty() || images, "image-index-dir",
          "applies to --dataset=image-folder or webdataset only");
  Require(o.normalize.empty() || images, "normalize",
          "applies to --dataset=image-folder or webdataset only (the other data sets' "
          "statistics are their own constants)");
  ParseNormalize(o.normalize);
  Require(!o.data_dir.empty() || o.list_models ||
              (!images && o.dataset != "npy" && o.dataset != "tokens"),
          "data-dir", "is needed with --dataset=" + o.dataset);
  Require(o.context >= 1, "context", "must be >= 1, got " + Show(o.context));
  Require(o.train_samples >= 0, "train-samples", "must be >= 0, got " + Show(o.train_samples));
  Require(o.test_samples >= 0, "test-samples", "must be >= 0, got " + Show(o.test_samples));
  Require(o.epochs >= 1, "epochs", "must be >= 1, got " + Show(o.epochs));
  Require(o.max_steps >= 0, "max-steps", "must be >= 0, got " + Show(o.max_steps));
  Require(o.eval_every >= 0, "eval-every", "must be >= 0, got " + Show(o.eval_every));
  Require(o.batch_size >= 1, "batch-size", "must be >= 1, got " + Show(o.batch_size));
  Require(o.lr > 0, "lr", "must be > 0, got " + Show(o.lr));
  Require(o.momentum >= 0 && o.momentum < 1, "momentum",
          "must be in [0, 1), got " + Show(o.momentum));
  Require(!o.nesterov || o.optimizer == "sgd", "nesterov", "needs --optimizer=sgd");
  Require(!o.nesterov || o.momentum > 0, "nesterov", "needs --momentum > 0");
  Require(o.weight_decay >= 0, "weight-decay", "must be >= 0, got " + Show(o.weight_decay));
  Require(o.adam_beta1 >= 0 && o.adam_beta1 < 1, "adam-beta1", "must be in [0, 1)");
  Require(o.adam_beta2 >= 0 && o.adam_beta2 < 1, "adam-beta2", "must be in [0, 1)");
  Require(o.lookahead_k >= 1, "lookahead-k", "must be >= 1, got " + Show(o.lookahead_k));
  Require(o.lookahead_alpha > 0 && o.lookahead_alpha <= 1, "lookahead-alpha",
          "must be in (0, 1], got " + Show(o.lookahead_alpha));
  Require(o.warmup_epochs >= 0, "warmup-epochs", "must be >= 0, got " + Show(o.warmup_epochs));
  Require(o.warmup_steps >= 0, "warmup-steps", "must be >= 0, got " + Show(o.warmup_steps));
  Require(o.recompute_bn >= 0, "recompute-bn", "must be >= 0, got " + Show(o.recompute_bn));
  Require(o.step_size >= 1, "step-size", "must be >= 1, got " + Show(o.step_size));
  Require(o.gamma > 0 && o.gamma <= 1, "gamma", "must be in (0, 1], got " + Show(o.gamma));
  Require(o.plateau_patience >= 0, "plateau-patience", "must be >= 0");
  Require(o.plateau_factor > 0 && o.plateau_factor < 1, "plateau-factor",
          "must be in (0, 1), got " + Show(o.plateau_factor));
  Require(o.decay_steps >= 0, "decay-steps", "must be >= 0, got " + Show(o.decay_steps));
  Require(o.decay_steps == 0 || o.schedule == "cosine", "decay-steps",
          "needs --schedule=cosine, got --schedule=" + o.schedule);
  Require(o.decay_steps == 0 || o.decay_steps > o.warmup_steps, "decay-steps",
          "must be above --warmup-steps=" + Show(o.warmup_steps) + ", got " + Show(o.decay_steps));
  Require(o.min_lr >= 0 && o.min_lr <= o.lr, "min-lr",
          "must be in [0, --lr], got " + Show(o.min_lr));
  Require(o.patience >= 0, "patience", "must be >= 0, got " + Show(o.patience));
  Require(o.label_smoothing >= 0 && o.label_smoothing < 1, "label-smoothing",
          "must be in [0, 1), got " + Show(o.label_smoothing));
  Require(o.clip_grad >= 0, "clip-grad", "must be >= 0, got " + Show(o.clip_grad));
  Require(o.seed >= 0, "seed", "must be >= 0, got " + Show(o.seed));
  Require(o.checkpoint_every >= 1, "checkpoint-every", "must be >= 1");
  Require(!o.resume || !o.checkpoint_dir.empty(), "resume", "needs --checkpoint-dir");
  Require(IsDeviceSpec(o.device), "device", "must be auto, cpu, cuda or cuda:N, got " + o.device);
  Require(o.threads >= 0, "threads", "must be >= 0, got " + Show(o.threads));
  Require(o.loader_threads >= 1, "loader-threads", "must be >= 1");
  Require(o.log_every >= 1, "log-every", "must be >= 1");
}

}  // namespace elastic::trainer
