#include "trainer/data/webdataset.h"

#include <torch/types.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <utility>

#include "trainer/data/download.h"
#include "trainer/data/image_decode.h"
#include "trainer/data/image_index_store.h"

namespace elastic::trainer {
namespace {

namespace fs = std::filesystem;

// Where the index is kept: beside the data, or in the cache beside image
// folders' indexes under another suffix.
constexpr char kBesideName[] = ".elastic-webdataset-index";
constexpr char kCacheSuffix[] = ".webdataset.index";
// Failed decodes named on stderr; the rest are only counted.
constexpr int64_t kNamedFailures = 5;

[[noreturn]] void Fail(const std::string& what) { throw std::runtime_error("webdataset: " + what); }

std::string AbsoluteDir(const std::string& dir) {
  std::string out = fs::absolute(dir).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

std::string Joined(const std::vector<std::string>& paths) {
  std::string out;
  for (const std::string& p : paths) out += (out.empty() ? "" : " or ") + p;
  return out;
}

IndexPlaces PlacesOf(const std::string& absolute, const ImageIndexOptions& options,
                     std::ostream& log) {
  if (!options.index_dir.empty()) {
    return PlacesFor(absolute, false, options.index_dir, "", kBesideName, kCacheSuffix);
  }
  const bool writable = DirectoryWritable(absolute);
  std::string cache;
  try {
    cache = ElasticCacheDir();
  } catch (const std::exception& e) {
    if (!writable) log << "warning: webdataset: no cache for the index: " << e.what() << "\n";
  }
  IndexPlaces places = PlacesFor(absolute, writable, "", cache, kBesideName, kCacheSuffix);
  if (cache.empty()) places.read.resize(1);  // beside the data only
  return places;
}

struct StoredWebDatasetIndex {
  std::string path;
  std::optional<WebDatasetIndex> index;
  std::string problem;
};

std::vector<StoredWebDatasetIndex> ReadIndexes(const std::vector<std::string>& paths) {
  std::vector<StoredWebDatasetIndex> found;
  for (StoredBytes& file : ReadStoredFiles(paths)) {
    StoredWebDatasetIndex stored{std::move(file.path), std::nullopt, std::move(file.problem)};
    if (file.bytes) {
      try {
        stored.index = DecodeWebDatasetIndex(*file.bytes);
      } catch (const IndexFormatError& e) {
        stored.problem = e.what();
      }
    }
    found.push_back(std::move(stored));
  }
  return found;
}

// The builder's part: list, find or build, complete, write; under the lock.
ObtainedWebDatasetIndex FindOrBuild(const std::string& dir, int64_t image_size,
                                    const IndexPlaces& places, std::ostream& log) {
  std::optional<IndexLock> lock;
  try {
    lock.emplace(places.write);
  } catch (const std::exception& e) {
    log << "warning: webdataset " << dir << ": " << e.what()
        << "; indexing without the lock (processes starting together may each index)\n";
  }
  std::vector<ShardSplit> listing = ListShards(dir);
  const std::string key = ShardListingKey(listing);
  std::vector<StoredWebDatasetIndex> stored = ReadIndexes(places.read);

  ObtainedWebDatasetIndex out;
  bool changed = false;
  StoredWebDatasetIndex* current = nullptr;
  StoredWebDatasetIndex* previous = nullptr;  // the one to learn from: where a new one goes
  for (StoredWebDatasetIndex& s : stored) {
    if (!s.index) continue;
    if (s.index->key == key && current == nullptr) current = &s;
    if (previous == nullptr || s.path == places.write) previous = &s;
  }
  if (current != nullptr) {
    out.index = std::move(*current->index);
    out.source = IndexSource::kCurrent;
    out.path = current->path;
  } else {
    for (const StoredWebDatasetIndex& s : stored) {
      if (!s.index) {
        log << "webdataset " << dir << ": the index " << s.path << " cannot be used (" << s.problem
            << "); re-indexing\n";
      }
    }
    size_t shards = 0;
    for (const ShardSplit& split : listing) shards += split.shards.size();
    if (previous != nullptr) {
      log << "webdataset " << dir << ": the shards changed since they were indexed ("
          << DescribeShardChange(previous->index->splits, listing) << "); re-indexing " << shards
          << " shards, scanning only the new and changed ones\n";
    } else if (stored.empty()) {
      log << "webdataset " << dir << ": indexing " << shards
          << " shards, once: later processes read the index " << places.write << "\n";
    }
    try {
      out.index = IndexShards(std::move(listing), previous != nullptr ? &*previous->index : nullptr,
                              [&dir](const std::string& path) { return ScanShard(dir, path); });
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("webdataset " + dir + ": " + e.what());
    }
    out.source = IndexSource::kBuilt;
    CountWebDatasetIndexBuilt();
    changed = true;
  }
  if (out.index.StatisticsFor(image_size) == nullptr) {
    const ShardFiles train(dir, out.index.splits.at(0).shards);
    const PixelNormalizer normalizer =
        MeasureShardNormalization(train, out.index.splits[0].samples, image_size);
    out.index.SetStatistics(ChannelStatistics{image_size, normalizer.mean(), normalizer.std()});
    changed = true;
  }
  if (changed) {
    try {
      WriteFileAtomically(places.write, EncodeWebDatasetIndex(out.index));
      out.path = places.write;
    } catch (const std::exception& e) {
      log << "warning: webdataset " << dir << ": the index could not be kept (" << e.what()
          << "); every process of the job scans the shards itself (--image-index-dir names a "
             "writable place)\n";
      out.path.clear();
    }
  }
  return out;
}

// One warning for the members that belong to no sample.
void WarnAboutIgnored(const std::string& dir, const WebDatasetIndex& index) {
  uint64_t ignored = 0;
  std::string first;
  for (const ShardSplit& split : index.splits) {
    for (const Shard& shard : split.shards) {
      if (shard.ignored > 0 && first.empty()) first = shard.path;
      ignored += shard.ignored;
    }
  }
  if (ignored == 0) return;
  std::cerr << "warning: webdataset " << dir << ": ignored " << ignored
            << " tar members that are neither a sample's image (.jpg, .jpeg, .png) nor its "
               "label (.cls), the first in "
            << first << "\n";
}

}  // namespace

ObtainedWebDatasetIndex ObtainWebDatasetIndex(const std::string& dir, int64_t image_size,
                                              const ImageIndexOptions& options, std::ostream& log) {
  const IndexPlaces places = PlacesOf(AbsoluteDir(dir), options, log);
  if (!options.pinned_key.empty()) {
    std::string seen;
    for (StoredWebDatasetIndex& s : ReadIndexes(places.read)) {
      if (s.index && s.index->key == options.pinned_key &&
          s.index->StatisticsFor(image_size) != nullptr) {
        return ObtainedWebDatasetIndex{std::move(*s.index), IndexSource::kPinned, s.path};
      }
      seen += "; " + s.path + (s.index ? " is the index " + s.index->key : ": " + s.problem);
    }
    log << "webdataset " << dir << ": the job's index " << options.pinned_key << " is not in "
        << Joined(places.read) << seen << "; indexing the shards on this machine\n";
  }
  ObtainedWebDatasetIndex obtained = FindOrBuild(dir, image_size, places, log);
  if (!options.pinned_key.empty() && obtained.index.key != options.pinned_key) {
    Fail(dir + " here is not the data set the job indexed: its listing's key is " +
         obtained.index.key + ", the job's index is " + options.pinned_key +
         " (shards changed since the job started, or this machine holds another copy); every "
         "process of a job must read the same samples");
  }
  return obtained;
}

PixelNormalizer MeasureShardNormalization(const ShardFiles& files,
                                          const std::vector<ShardSample>& samples,
                                          int64_t image_size, int64_t max_images) {
  const auto n = static_cast<int64_t>(samples.size());
  const int64_t k = std::min(n, max_images);
  ChannelMoments moments(3);
  for (int64_t j = 0; j < k; ++j) {
    const ShardSample& sample = samples[j * n / k];  // evenly spaced: every shard is sampled
    CountWebDatasetStatisticsDecode();
    const MappedFile& shard = files.Open(sample.shard);
    try {
      const RgbImage image = LoadRgbImage(EncodedImage{files.shards()[sample.shard].path,
                                                       shard.data() + sample.offset, sample.size},
                                          image_size, image_size);
      moments.Add(image.pixels.data(), PixelLayout::kHWC, image_size, image_size);
    } catch (const ImageDecodeError&) {
      // Counted by the examples when a batch reads it; here it is simply left out.
    }
  }
  if (moments.images() == 0) {
    Fail("none of the " + std::to_string(k) + " images sampled in " + files.dir() +
         " to measure the normalisation could be decoded");
  }
  return moments.Normalizer();
}

WebDatasetExamples::WebDatasetExamples(std::string name, std::shared_ptr<const ShardFiles> files,
                                       std::vector<ShardSample> samples, int64_t image_size,
                                       PixelNormalizer normalizer)
    : name_(std::move(name)),
      files_(std::move(files)),
      samples_(std::move(samples)),
      image_size_(image_size),
      normalizer_(std::move(normalizer)),
      padding_(CropPaddingFor(image_size, image_size)) {
  if (samples_.empty()) throw std::invalid_argument(name_ + ": no samples");
  if (image_size_ < 1) throw std::invalid_argument(name_ + ": image size must be >= 1");
  if (normalizer_.channels() != 3) throw std::invalid_argument(name_ + ": need an RGB normaliser");
}

void WebDatasetExamples::Build(int64_t index, const CropFlip& crop, float* dst,
                               PixelLayout layout) const {
  const ShardSample& sample = samples_[index];
  const MappedFile& shard = files_->Open(sample.shard);
  const EncodedImage encoded{
      files_->shards()[sample.shard].path + " at byte " + std::to_string(sample.offset),
      shard.data() + sample.offset, sample.size};
  try {
    const RgbImage image = LoadRgbImage(encoded, image_size_, image_size_);
    normalizer_.Apply(image.pixels.data(), PixelLayout::kHWC, image_size_, image_size_, crop, dst,
                      layout);
  } catch (const ImageDecodeError& e) {
    std::fill_n(dst, 3 * image_size_ * image_size_, 0.0f);
    const int64_t failures = failed_decodes_.fetch_add(1) + 1;
    if (failures <= kNamedFailures) {
      // One write per message: loader threads share stderr.
      std::cerr << ("warning: " + name_ + ": sample " + std::to_string(index) +
                    " is all zeros: " + e.what() +
                    (failures == kNamedFailures ? " (further failed decodes are only counted)"
                                                : "") +
                    "\n");
    }
  }
}

Batch WebDatasetExamples::Get(const std::vector<int64_t>& indices,
                              const BatchRequest& request) const {
  const auto b = static_cast<int64_t>(indices.size());
  const int64_t s = image_size_;
  Batch batch;
  batch.indices = indices;
  batch.inputs = torch::empty(
      {b, 3, s, s}, torch::TensorOptions(torch::kFloat32)
                        .memory_format(request.channels_last ? torch::MemoryFormat::ChannelsLast
                                                             : torch::MemoryFormat::Contiguous));
  batch.targets = torch::empty({b}, torch::kInt64);
  float* out = batch.inputs.data_ptr<float>();
  int64_t* targets = batch.targets.data_ptr<int64_t>();
  const PixelLayout layout = request.channels_last ? PixelLayout::kHWC : PixelLayout::kCHW;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t sample = indices[i];
    const CropFlip crop = request.augment
                              ? RandomCropFlip(request.seed, request.epoch, sample, padding_)
                              : CentredCrop(padding_);
    Build(sample, crop, out + i * 3 * s * s, layout);
    targets[i] = samples_[sample].label;
  }
  return batch;
}

UserData LoadWebDataset(const std::string& dir, int64_t image_size,
                        const ImageIndexOptions& options) {
  if (image_size < 1) Fail("image size must be >= 1, got " + std::to_string(image_size));
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) Fail(dir + " is not a directory");
  ObtainedWebDatasetIndex obtained = ObtainWebDatasetIndex(dir, image_size, options, std::cerr);
  WebDatasetIndex& index = obtained.index;
  WarnAboutIgnored(dir, index);
  const ChannelStatistics* stats = index.StatisticsFor(image_size);
  if (stats == nullptr) throw std::logic_error("webdataset: the index has no statistics");
  // --normalize, when given, is used as it stands; the measured statistics stay in the index.
  PixelNormalizer normalizer = options.mean.empty() ? PixelNormalizer(stats->mean, stats->std)
                                                    : PixelNormalizer(options.mean, options.std);
  UserData data;
  data.channels = 3;
  data.height = image_size;
  data.width = image_size;
  for (int64_t k = 0; k < index.num_classes(); ++k) data.class_names.push_back(std::to_string(k));
  data.mean = normalizer.mean();
  data.std = normalizer.std();
  data.index_key = index.key;
  ShardSplit& train = index.splits.at(0);
  ShardSplit& test = index.splits.at(1);
  data.train = std::make_shared<WebDatasetExamples>(
      "webdataset-train", std::make_shared<ShardFiles>(dir, train.shards), std::move(train.samples),
      image_size, normalizer);
  data.test = std::make_shared<WebDatasetExamples>("webdataset-test",
                                                   std::make_shared<ShardFiles>(dir, test.shards),
                                                   std::move(test.samples), image_size, normalizer);
  WriteWebDatasetCountersForTests(ToString(obtained.source));
  return data;
}

}  // namespace elastic::trainer
