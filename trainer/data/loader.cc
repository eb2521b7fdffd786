#include "trainer/data/loader.h"

#include <stdexcept>
#include <utility>

#include "trainer/data/augment.h"

namespace elastic::trainer {

struct Loader::Pass {
  std::vector<int64_t> indices;
  uint64_t epoch = 0;
  int64_t num_batches = 0;
};

ImageExamples::ImageExamples(std::shared_ptr<const Dataset> dataset)
    : dataset_(std::move(dataset)) {
  if (!dataset_) throw std::invalid_argument("ImageExamples: no data set");
}

Batch ImageExamples::Get(const std::vector<int64_t>& indices, const BatchRequest& request) const {
  const auto b = static_cast<int64_t>(indices.size());
  constexpr int64_t kImageBytes = 3 * 32 * 32;
  Batch batch;
  batch.indices = indices;
  batch.inputs = torch::empty(
      {b, 3, 32, 32}, torch::TensorOptions(torch::kFloat32)
                          .memory_format(request.channels_last ? torch::MemoryFormat::ChannelsLast
                                                               : torch::MemoryFormat::Contiguous));
  batch.targets = torch::empty({b}, torch::kInt64);
  float* out = batch.inputs.data_ptr<float>();
  int64_t* out_labels = batch.targets.data_ptr<int64_t>();
  const Normalization norm = dataset_->normalization();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t sample = indices[i];
    const Augmentation aug =
        request.augment ? AugmentationFor(request.seed, request.epoch, sample) : kNoAugmentation;
    // Straight from where the data set keeps the pixels (for CIFAR-10, its
    // mapped file) into the float batch: no copy of the image in between.
    AugmentAndNormalize(dataset_->image(sample), aug, norm, out + i * kImageBytes,
                        request.channels_last);
    out_labels[i] = dataset_->label(sample);
  }
  return batch;
}

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : Loader(std::make_shared<ImageExamples>(std::move(dataset)), options) {}

Loader::Loader(std::shared_ptr<const Examples> examples, LoaderOptions options)
    : examples_(std::move(examples)), options_(options) {
  if (!examples_) throw std::invalid_argument("Loader: no data set");
  if (options_.batch_size < 1) throw std::invalid_argument("Loader: batch_size must be >= 1");
  if (options_.threads < 1) throw std::invalid_argument("Loader: threads must be >= 1");
  if (options_.prefetch < 1) throw std::invalid_argument("Loader: prefetch must be >= 1");
  threads_.reserve(options_.threads);
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void Loader::Start(std::vector<int64_t> indices, uint64_t epoch) {
  const int64_t n = examples_->size();
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= n) {
      throw std::out_of_range("Loader::Start: index " + std::to_string(indices[i]) +
                              " at position " + std::to_string(i) + " is outside the data set " +
                              examples_->name() + " of " + std::to_string(n) + " samples");
    }
  }
  auto pass = std::make_shared<Pass>();
  const auto count = static_cast<int64_t>(indices.size());
  pass->num_batches = options_.drop_last ? count / options_.batch_size
                                         : (count + options_.batch_size - 1) / options_.batch_size;
  pass->indices = std::move(indices);
  pass->epoch = epoch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pass_ = std::move(pass);
    ++pass_id_;
    next_claim_ = 0;
    next_out_ = 0;
    ready_.clear();
    failed_.clear();
  }
  cv_.notify_all();
}

int64_t Loader::num_batches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pass_ ? pass_->num_batches : 0;
}

std::optional<Batch> Loader::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!pass_ || next_out_ >= pass_->num_batches) return std::nullopt;
  const int64_t want = next_out_;
  cv_.wait(lock, [&] { return ready_.count(want) > 0 || failed_.count(want) > 0; });
  ++next_out_;  // frees a prefetch slot either way
  cv_.notify_all();
  if (auto failed = failed_.find(want); failed != failed_.end()) {
    std::exception_ptr error = failed->second;
    failed_.erase(failed);
    std::rethrow_exception(error);
  }
  auto node = ready_.extract(want);
  return std::move(node.mapped());
}

void Loader::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Build ahead of the consumer, but never more than `prefetch` batches.
    cv_.wait(lock, [&] {
      return stopping_ || (pass_ && next_claim_ < pass_->num_batches &&
                           next_claim_ < next_out_ + options_.prefetch);
    });
    if (stopping_) return;
    const std::shared_ptr<const Pass> pass = pass_;
    const uint64_t id = pass_id_;
    const int64_t index = next_claim_++;
    lock.unlock();

    std::optional<Batch> batch;
    std::exception_ptr error;
    try {
      batch = BuildBatch(*pass, index);
    } catch (...) {
      error = std::current_exception();
    }

    lock.lock();
    if (id != pass_id_) continue;  // Start() abandoned that pass meanwhile
    if (error) {
      failed_.emplace(index, error);
    } else {
      ready_.emplace(index, std::move(*batch));
    }
    cv_.notify_all();
  }
}

Batch Loader::BuildBatch(const Pass& pass, int64_t batch_index) const {
  const int64_t begin = batch_index * options_.batch_size;
  const int64_t end =
      std::min<int64_t>(begin + options_.batch_size, static_cast<int64_t>(pass.indices.size()));
  BatchRequest request;
  request.epoch = pass.epoch;
  request.augment = options_.augment;
  request.seed = options_.seed;
  request.channels_last = options_.channels_last;
  return examples_->Get(
      std::vector<int64_t>(pass.indices.begin() + begin, pass.indices.begin() + end), request);
}

}  // namespace elastic::trainer
