#include "trainer/learner.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/utils.h>

#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_set>
#include <vector>

#include "trainer/bytes.h"

namespace elastic::trainer {
namespace {

// Bumped whenever the layout below changes; older states are rejected.
constexpr std::string_view kStateTag = "elastic-training-state/1";

std::string ArchiveBytes(torch::serialize::OutputArchive& archive) {
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void LoadArchive(std::string_view bytes, torch::serialize::InputArchive& archive,
                 const std::string& what) {
  try {
    archive.load_from(bytes.data(), bytes.size());
  } catch (const c10::Error& e) {
    throw StateFormatError(what + " is unreadable: " + e.what_without_backtrace());
  }
}

// The parameters and buffers by name. Module::load would silently take a
// tensor of another shape; this checks every name, shape and dtype first.
void SaveModel(const torch::nn::Module& model, torch::serialize::OutputArchive& archive) {
  for (const auto& item : model.named_parameters()) archive.write(item.key(), item.value());
  for (const auto& item : model.named_buffers())
    archive.write(item.key(), item.value(), /*is_buffer=*/true);
}

// `cast_floating`: a floating-point tensor may be saved in another
// floating-point type than the model's (copy_ rounds it into the model's).
void LoadTensors(const torch::OrderedDict<std::string, torch::Tensor>& tensors,
                 torch::serialize::InputArchive& archive, bool buffers, bool cast_floating) {
  for (const auto& item : tensors) {
    torch::Tensor saved;
    if (!archive.try_read(item.key(), saved, buffers))
      throw std::runtime_error("the saved model has no tensor '" + item.key() + "'");
    const torch::Tensor& target = item.value();
    const bool castable = cast_floating && saved.is_floating_point() && target.is_floating_point();
    if (!saved.sizes().equals(target.sizes()) ||
        (saved.scalar_type() != target.scalar_type() && !castable)) {
      std::ostringstream message;
      message << "model tensor '" << item.key() << "' is saved as " << saved.sizes() << " "
              << saved.scalar_type() << ", the model has " << target.sizes() << " "
              << target.scalar_type();
      throw std::runtime_error(message.str());
    }
    torch::NoGradGuard no_grad;
    target.copy_(saved);
  }
}

std::string CpuRngState() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  torch::Tensor state = generator.get_state();
  return std::string(static_cast<const char*>(state.data_ptr()), state.numel());
}

void SetCpuRngState(std::string_view bytes) {
  torch::Tensor state = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(state.data_ptr(), bytes.data(), bytes.size());
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  try {
    generator.set_state(state);
  } catch (const c10::Error& e) {
    throw StateFormatError(std::string("RNG state is invalid: ") + e.what_without_backtrace());
  }
}

}  // namespace

void ToChannelsLast(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  // set_data keeps each parameter the same autograd variable (the optimizer
  // and the gradient hooks hold it); only its memory is laid out anew.
  for (torch::Tensor& p : model.parameters()) {
    if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
  }
  for (torch::Tensor& b : model.buffers()) {
    if (b.dim() == 4) b.set_data(b.data().contiguous(torch::MemoryFormat::ChannelsLast));
  }
}

void SeedTorch(uint64_t seed) { torch::manual_seed(seed); }

std::vector<torch::Tensor> UniqueParameters(torch::nn::Module& model) {
  std::vector<torch::Tensor> unique;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const torch::Tensor& p : model.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) unique.push_back(p);
  }
  return unique;
}

Learner::Learner(std::shared_ptr<models::Net> model, LearnerOptions options, torch::Device device)
    : model_(std::move(model)),
      options_(std::move(options)),
      device_(device),
      schedule_(options_.schedule),
      stopper_(options_.patience),
      objective_(options_.objective) {
  if (!model_) throw std::invalid_argument("Learner: no model");
  if (!objective_)
    objective_ = std::make_shared<Classification>(options_.num_classes, options_.label_smoothing);
  model_->to(device_);
  ToWeightType(*model_, WeightType(options_.precision));
  if (options_.channels_last) ToChannelsLast(*model_);
  params_ = UniqueParameters(*model_);
  optimizer_ = MakeOptimizer(params_, options_.optimizer);
  CheckAutocastSupported(device_, options_.precision);
  if (options_.precision == Precision::kFloat16) scaler_ = std::make_unique<DynamicLossScaler>();
}

StepStats Learner::Step(const torch::Tensor& inputs, const torch::Tensor& targets,
                        double epochs_done, GradientHook* hook) {
  return Step({MicroBatch{inputs, targets, 1.0}}, epochs_done, hook);
}

StepStats Learner::Step(const std::vector<MicroBatch>& micro_batches, double epochs_done,
                        GradientHook* hook) {
  if (micro_batches.empty()) throw std::invalid_argument("Learner::Step: no micro-batch");
  StepStats stats;
  stats.lr = schedule_.LearningRate(epochs_done, progress_.step + 1);
  model_->train();
  optimizer_->SetLearningRate(stats.lr);
  optimizer_->ZeroGrad();

  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const MicroBatch& micro = micro_batches[i];
    const torch::Tensor output = Forward(micro.inputs);
    const torch::Tensor y = micro.targets.to(device_, /*non_blocking=*/true);
    const torch::Tensor loss = objective_->Loss(output, y);
    torch::Tensor weighted = micro.weight == 1 ? loss : loss * micro.weight;
    if (hook != nullptr) hook->BeforeBackward(i + 1 == micro_batches.size());
    (scaler_ ? scaler_->Scale(weighted) : weighted).backward();

    torch::NoGradGuard no_grad;
    const int64_t count = micro.inputs.size(0);
    stats.count += count;
    stats.loss_sum += loss.item<double>() * static_cast<double>(count);
    stats.metric_sum += objective_->MetricSum(output, y);
  }

  if (hook != nullptr) hook->AfterBackward(params_);
  const bool finite = scaler_ ? scaler_->Unscale(params_) : true;
  if (finite) {
    if (options_.clip_grad > 0) torch::nn::utils::clip_grad_norm_(params_, options_.clip_grad);
    optimizer_->Step();
  }
  if (scaler_) scaler_->Update(!finite);
  stats.skipped = !finite;
  return stats;
}

torch::Tensor Learner::Forward(const torch::Tensor& inputs) {
  torch::Tensor x = InWeightType(inputs.to(device_, /*non_blocking=*/true), options_.precision);
  // Nothing to do for a loader that builds channels-last batches.
  if (options_.channels_last && x.dim() == 4) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
  AutocastScope autocast(device_, options_.precision);
  return model_->forward(x);
}

void Learner::WarmUp(const torch::Tensor& inputs, const torch::Tensor& targets, int passes) {
  model_->train();
  const torch::Tensor y = targets.to(device_);
  for (int i = 0; i < passes; ++i) objective_->Loss(Forward(inputs), y).backward();
  // No gradient at all, as before: an optimizer skips a parameter without one.
  for (torch::Tensor& p : params_) p.mutable_grad() = torch::Tensor();
}

bool Learner::EndEpoch(double validation_loss) {
  schedule_.EndEpoch(validation_loss);
  return stopper_.Update(validation_loss);
}

std::string Learner::CaptureState() const {
  ByteWriter out;
  out.Bytes(kStateTag);
  out.Bytes(options_.model_name);
  out.I64(options_.num_classes);
  out.U64(options_.seed);
  out.I64(progress_.epoch);
  out.I64(progress_.position);
  out.I64(progress_.step);

  torch::serialize::OutputArchive model_archive;
  SaveModel(*model_, model_archive);
  out.Bytes(ArchiveBytes(model_archive));

  torch::serialize::OutputArchive optimizer_archive;
  optimizer_->Save(optimizer_archive);
  out.Bytes(ArchiveBytes(optimizer_archive));

  out.Bytes(schedule_.Save());
  out.Bytes(stopper_.Save());

  if (scaler_) {
    torch::serialize::OutputArchive scaler_archive;
    scaler_->Save(scaler_archive);
    out.Bytes(ArchiveBytes(scaler_archive));
  } else {
    out.Bytes("");
  }
  out.Bytes(CpuRngState());
  return out.Take();
}

void LoadModelFromState(std::string_view state, const std::string& model_name,
                        torch::nn::Module& model) {
  ByteReader in(state, "training state");
  if (in.Bytes() != kStateTag)
    throw StateFormatError("training state: unknown format (expected " + std::string(kStateTag) +
                           ")");
  const std::string saved_model(in.Bytes());
  if (saved_model != model_name) {
    throw std::runtime_error("training state is for model '" + saved_model + "', not '" +
                             model_name + "'");
  }
  in.I64();                              // classes
  in.U64();                              // seed
  for (int i = 0; i < 3; ++i) in.I64();  // progress
  torch::serialize::InputArchive model_archive;
  LoadArchive(in.Bytes(), model_archive, "model state");
  LoadTensors(model.named_parameters(), model_archive, /*buffers=*/false, /*cast_floating=*/true);
  LoadTensors(model.named_buffers(), model_archive, /*buffers=*/true, /*cast_floating=*/true);
}

uint64_t Learner::StateSizeLimit() const {
  return 4 * static_cast<uint64_t>(CaptureState().size()) + (uint64_t{64} << 20);
}

void Learner::RestoreState(std::string_view bytes) {
  ByteReader in(bytes, "training state");
  if (in.Bytes() != kStateTag)
    throw StateFormatError("training state: unknown format (expected " + std::string(kStateTag) +
                           ")");
  const std::string model_name(in.Bytes());
  const int64_t num_classes = in.I64();
  if (model_name != options_.model_name) {
    throw std::runtime_error("training state is for model '" + model_name + "', this run trains '" +
                             options_.model_name + "'");
  }
  if (num_classes != options_.num_classes) {
    throw std::runtime_error("training state has " + std::to_string(num_classes) +
                             " classes, this data set has " + std::to_string(options_.num_classes));
  }
  options_.seed = in.U64();
  TrainingProgress progress;
  progress.epoch = in.I64();
  progress.position = in.I64();
  progress.step = in.I64();

  torch::serialize::InputArchive model_archive;
  LoadArchive(in.Bytes(), model_archive, "model state");
  LoadTensors(model_->named_parameters(), model_archive, /*buffers=*/false,
              /*cast_floating=*/false);
  LoadTensors(model_->named_buffers(), model_archive, /*buffers=*/true, /*cast_floating=*/false);

  torch::serialize::InputArchive optimizer_archive;
  LoadArchive(in.Bytes(), optimizer_archive, "optimizer state");
  try {
    optimizer_->Load(optimizer_archive);
  } catch (const c10::Error& e) {
    throw std::runtime_error(std::string("optimizer state does not fit this optimizer: ") +
                             e.what_without_backtrace());
  }

  schedule_.Load(in.Bytes());
  stopper_.Load(in.Bytes());

  const std::string_view scaler_bytes = in.Bytes();
  if (scaler_ && !scaler_bytes.empty()) {
    torch::serialize::InputArchive scaler_archive;
    LoadArchive(scaler_bytes, scaler_archive, "loss scaler state");
    scaler_->Load(scaler_archive);
  }
  SetCpuRngState(in.Bytes());
  in.ExpectEnd();
  progress_ = progress;
}

}  // namespace elastic::trainer
