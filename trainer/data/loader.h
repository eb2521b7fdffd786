// The input pipeline: loader threads cut a pass over a list of sample indices
// into batches, have the Examples build them (examples.h; for images:
// augment and normalise), and keep up to `prefetch` batches ready so the
// training step never waits for data.
//
// Determinism: a batch is a function of (seed, epoch, its indices) only, and
// batches are handed out in order, so the output is identical whatever the
// number of threads or their timing.
#pragma once

#include <torch/types.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "trainer/data/dataset.h"
#include "trainer/data/examples.h"

namespace elastic::trainer {

// An image data set (dataset.h) as Examples: inputs float [B, 3, 32, 32],
// normalised (random crop with 4-pixel zero padding and horizontal flip when
// augmenting), targets its int64 labels.
class ImageExamples : public Examples {
 public:
  // Throws std::invalid_argument for a null data set.
  explicit ImageExamples(std::shared_ptr<const Dataset> dataset);
  std::string name() const override { return dataset_->name(); }
  int64_t size() const override { return dataset_->size(); }
  Batch Get(const std::vector<int64_t>& indices, const BatchRequest& request) const override;

 private:
  std::shared_ptr<const Dataset> dataset_;
};

struct LoaderOptions {
  int64_t batch_size = 128;
  bool augment = true;  // false for evaluation: normalisation only
  int threads = 2;
  int prefetch = 4;  // batches built ahead of the consumer, at most
  uint64_t seed = 0;
  bool drop_last = false;  // drop a short last batch
  // Batches in torch's channels-last memory format (NHWC in memory), for a
  // model whose convolutions run channels-last: no conversion in the step.
  bool channels_last = false;
};

class Loader {
 public:
  // Throws std::invalid_argument for batch_size, threads or prefetch < 1.
  Loader(std::shared_ptr<const Examples> examples, LoaderOptions options);
  // An image data set through ImageExamples.
  Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  ~Loader();  // joins the threads
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts a pass over exactly these dataset indices, in this order (the
  // elastic sampler decides them); batches are cut in order. Abandons any pass
  // still running. Throws std::out_of_range for an index outside the dataset.
  void Start(std::vector<int64_t> indices, uint64_t epoch);

  // The next batch of the pass, waiting for it if needed; nullopt at the end
  // of the pass (or before any Start). Rethrows an error raised while building it.
  std::optional<Batch> Next();

  // The number of batches in the current pass.
  int64_t num_batches() const;

 private:
  struct Pass;
  void WorkerLoop();
  Batch BuildBatch(const Pass& pass, int64_t batch_index) const;

  const std::shared_ptr<const Examples> examples_;
  const LoaderOptions options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<const Pass> pass_;  // guarded by mu_
  uint64_t pass_id_ = 0;              // bumped by Start; stale work is discarded
  int64_t next_claim_ = 0;            // next batch a worker may build
  int64_t next_out_ = 0;              // next batch Next() hands out
  std::map<int64_t, Batch> ready_;
  std::map<int64_t, std::exception_ptr> failed_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace elastic::trainer
