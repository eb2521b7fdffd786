// `--dataset webdataset`: WebDataset shards (uncompressed tar files of
// KEY.jpg|jpeg|png + KEY.cls members) in `--data-dir`/train/ and test/ (or
// val/), read by random access through an index built once per job
// (webdataset_index.h), images decoded from the mapped shards by the loader
// threads. The index is found, pinned or built as an image folder's is
// (image_folder_index.h): the job's driver builds it, its workers and
// joiners read it. docs/data.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "trainer/data/examples.h"
#include "trainer/data/image_folder_index.h"
#include "trainer/data/pixels.h"
#include "trainer/data/user_data.h"
#include "trainer/data/webdataset_index.h"
#include "trainer/data/webdataset_shards.h"

namespace elastic::trainer {

struct ObtainedWebDatasetIndex {
  WebDatasetIndex index;  // with statistics for the image size asked for
  IndexSource source = IndexSource::kBuilt;
  std::string path;  // the file it came from or went to; "" when it could not be written
};

// The index of the shards in `dir`, with the normalisation statistics of
// `image_size`, as ObtainImageIndex does it for an image folder: with
// options.pinned_key, that index is read and nothing else (a machine without
// it indexes its copy and refuses to train if the key differs); otherwise,
// under the index's lock, the shards are listed and the index of that
// listing used, or built, scanning only the shards that an older index does
// not know with the same size, and `log` says why. Kept beside the data
// (DIR/.elastic-webdataset-index) or in the cache
// (image-index/NAME-HASH.webdataset.index), or in options.index_dir.
ObtainedWebDatasetIndex ObtainWebDatasetIndex(const std::string& dir, int64_t image_size,
                                              const ImageIndexOptions& options, std::ostream& log);

// The per-channel mean and standard deviation of at most `max_images` of
// `samples`, evenly spaced, decoded and resized to image_size x image_size.
// Samples that fail to decode are left out; throws std::runtime_error when
// none decodes.
PixelNormalizer MeasureShardNormalization(const ShardFiles& files,
                                          const std::vector<ShardSample>& samples,
                                          int64_t image_size, int64_t max_images = 1000);

// A split's samples, decoded in Get (on the loader threads) from the mapped
// shards: float [B, 3, image_size, image_size] inputs, resized, cropped and
// flipped when augmenting, normalised (pixels.h), as ImageFolderExamples
// builds them; int64 labels. A shard is mapped when one of its samples is
// first read. An image that fails to decode does not stop training: its
// sample is all zeros, failed_decodes() counts it, the first few are named
// on stderr.
class WebDatasetExamples : public Examples {
 public:
  // Throws std::invalid_argument when there are no samples or image_size < 1.
  WebDatasetExamples(std::string name, std::shared_ptr<const ShardFiles> files,
                     std::vector<ShardSample> samples, int64_t image_size,
                     PixelNormalizer normalizer);

  std::string name() const override { return name_; }
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  Batch Get(const std::vector<int64_t>& indices, const BatchRequest& request) const override;

  int64_t failed_decodes() const { return failed_decodes_.load(); }
  const ShardFiles& files() const { return *files_; }

 private:
  // Writes sample `index`, normalised, into dst (3 x image_size^2 floats).
  void Build(int64_t index, const CropFlip& crop, float* dst, PixelLayout layout) const;

  std::string name_;
  std::shared_ptr<const ShardFiles> files_;
  std::vector<ShardSample> samples_;
  int64_t image_size_;
  PixelNormalizer normalizer_;
  int64_t padding_;
  mutable std::atomic<int64_t> failed_decodes_{0};
};

// Both splits of the WebDataset in `dir`, every image resized to image_size
// x image_size RGB. Classes are 0 .. the largest training label (names "0",
// "1", ...). UserData::index_key is the index's key, which the job's driver
// pins its workers to. Throws std::runtime_error naming the folder or shard
// and the problem.
UserData LoadWebDataset(const std::string& dir, int64_t image_size,
                        const ImageIndexOptions& options = {});

}  // namespace elastic::trainer
