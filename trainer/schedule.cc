#include "trainer/schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "trainer/bytes.h"

namespace elastic::trainer {
namespace {

constexpr double kPi = 3.14159265358979323846;
// torch.optim.lr_scheduler.ReduceLROnPlateau's default: threshold 1e-4, mode "rel".
constexpr double kRelativeThreshold = 1e-4;

bool Improves(double value, bool has_best, double best) {
  return !has_best || value < best * (1 - kRelativeThreshold);
}

}  // namespace

ScheduleKind ParseScheduleKind(const std::string& name) {
  if (name == "constant") return ScheduleKind::kConstant;
  if (name == "cosine") return ScheduleKind::kCosine;
  if (name == "step") return ScheduleKind::kStep;
  if (name == "plateau") return ScheduleKind::kPlateau;
  throw std::invalid_argument("unknown learning-rate schedule '" + name +
                              "' (constant, cosine, step, plateau)");
}

LrSchedule::LrSchedule(ScheduleOptions options) : options_(options) {
  if (options_.base_lr <= 0) throw std::invalid_argument("schedule: base_lr must be > 0");
  if (options_.warmup_epochs < 0) throw std::invalid_argument("schedule: warmup_epochs < 0");
  if (options_.warmup_steps < 0) throw std::invalid_argument("schedule: warmup_steps < 0");
  if (options_.total_epochs <= 0) throw std::invalid_argument("schedule: total_epochs must be > 0");
  if (options_.step_size <= 0) throw std::invalid_argument("schedule: step_size must be > 0");
  if (options_.decay_steps < 0) throw std::invalid_argument("schedule: decay_steps < 0");
  if (options_.decay_steps > 0 && options_.decay_steps <= options_.warmup_steps)
    throw std::invalid_argument("schedule: decay_steps must be above warmup_steps");
}

double LrSchedule::Decayed(double epochs_done, int64_t steps_done) const {
  const ScheduleOptions& o = options_;
  switch (o.kind) {
    case ScheduleKind::kConstant:
      return o.base_lr;
    case ScheduleKind::kCosine: {
      // Cosine annealing over the steps or the epochs after warm-up.
      double t = 1;
      if (o.decay_steps > 0) {
        t = static_cast<double>(steps_done - o.warmup_steps) /
            static_cast<double>(o.decay_steps - o.warmup_steps);
      } else if (o.total_epochs > o.warmup_epochs) {
        t = (epochs_done - o.warmup_epochs) / (o.total_epochs - o.warmup_epochs);
      }
      t = std::clamp(t, 0.0, 1.0);
      return o.min_lr + (o.base_lr - o.min_lr) * 0.5 * (1 + std::cos(kPi * t));
    }
    case ScheduleKind::kStep:
      return o.base_lr * std::pow(o.gamma, std::floor(epochs_done / o.step_size));
    case ScheduleKind::kPlateau:
      return std::max(o.min_lr, o.base_lr * plateau_scale_);
  }
  return o.base_lr;
}

double LrSchedule::WarmupFactor(double epochs_done, int64_t steps_done) const {
  double factor = 1;
  if (options_.warmup_epochs > 0)
    factor = std::min(factor, std::max(0.0, epochs_done) / options_.warmup_epochs);
  if (options_.warmup_steps > 0)
    factor = std::min(factor, static_cast<double>(std::max<int64_t>(0, steps_done)) /
                                  static_cast<double>(options_.warmup_steps));
  return factor;
}

double LrSchedule::LearningRate(double epochs_done, int64_t steps_done) const {
  return Decayed(epochs_done, steps_done) * WarmupFactor(epochs_done, steps_done);
}

void LrSchedule::EndEpoch(double validation_loss) {
  if (options_.kind != ScheduleKind::kPlateau) return;
  if (Improves(validation_loss, has_best_, best_)) {
    best_ = validation_loss;
    has_best_ = true;
    bad_epochs_ = 0;
    return;
  }
  if (++bad_epochs_ > options_.plateau_patience) {
    plateau_scale_ *= options_.plateau_factor;
    bad_epochs_ = 0;
  }
}

std::string LrSchedule::Save() const {
  ByteWriter out;
  out.U64(static_cast<uint64_t>(options_.kind));
  out.F64(best_);
  out.U64(has_best_ ? 1 : 0);
  out.I64(bad_epochs_);
  out.F64(plateau_scale_);
  return out.Take();
}

void LrSchedule::Load(std::string_view bytes) {
  ByteReader in(bytes, "learning-rate schedule state");
  const uint64_t kind = in.U64();
  if (kind != static_cast<uint64_t>(options_.kind))
    throw StateFormatError("learning-rate schedule state was saved by a different --schedule");
  best_ = in.F64();
  has_best_ = in.U64() != 0;
  bad_epochs_ = in.I64();
  plateau_scale_ = in.F64();
  in.ExpectEnd();
}

bool EarlyStopping::Update(double validation_loss) {
  if (Improves(validation_loss, has_best_, best_)) {
    best_ = validation_loss;
    has_best_ = true;
    bad_epochs_ = 0;
  } else {
    ++bad_epochs_;
  }
  return should_stop();
}

std::string EarlyStopping::Save() const {
  ByteWriter out;
  out.F64(best_);
  out.U64(has_best_ ? 1 : 0);
  out.I64(bad_epochs_);
  return out.Take();
}

void EarlyStopping::Load(std::string_view bytes) {
  ByteReader in(bytes, "early-stopping state");
  best_ = in.F64();
  has_best_ = in.U64() != 0;
  bad_epochs_ = in.I64();
  in.ExpectEnd();
}

}  // namespace elastic::trainer
