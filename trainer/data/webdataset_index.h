// The index of a WebDataset (`--dataset webdataset`): shards of uncompressed
// tar files whose members KEY.jpg|jpeg|png and KEY.cls (the class index as
// decimal text) make one sample per KEY, as WebDataset groups them. The
// index says, for every sample, which shard holds its image, at which byte
// offset and how long, and its label: the elastic sampler then reads sample
// i in place, whatever order it asks for, and a process maps only the shards
// its samples are in.
//
// It is built once per job, in one pass over the shards' tar headers and
// their small .cls members (no image is decoded), and read back by every
// other process (webdataset.h). This header holds the pure parts: grouping a
// shard's members into samples, the listing's key, re-indexing only the
// shards that changed, and the index's bytes on disk. docs/data.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/data/image_index.h"
#include "trainer/data/tar.h"

namespace elastic::trainer {

// Class indices are below this. A label is the size of the model's last
// layer, so a damaged .cls ("4294967295") must be an error, not a layer of
// billions of outputs; a million is far above any public classification set
// (ImageNet-21k has 21,841 classes).
inline constexpr int64_t kMaxWebDatasetClasses = 1000000;

// One sample: where its image's bytes are in its shard, and its label.
struct ShardSample {
  uint32_t shard = 0;   // index into its split's shards
  uint64_t offset = 0;  // of the image member's data in the shard file
  uint32_t size = 0;    // bytes of the encoded image
  uint32_t label = 0;   // the .cls member's class index
  bool operator==(const ShardSample& o) const {
    return shard == o.shard && offset == o.offset && size == o.size && label == o.label;
  }
};

struct Shard {
  std::string path;      // relative to the data directory: "train/shard-000000.tar"
  uint64_t size = 0;     // bytes, when it was listed
  uint64_t samples = 0;  // found by indexing
  uint64_t ignored = 0;  // members of no sample (neither its image nor its label), by indexing
};

struct ShardSplit {
  std::string name;                  // "train", "test" or "val"
  std::vector<Shard> shards;         // sorted by name
  std::vector<ShardSample> samples;  // shard by shard; in a shard, in member order
};

struct WebDatasetIndex {
  std::string key;                 // ShardListingKey(splits)
  std::vector<ShardSplit> splits;  // the training split first
  // At most one entry per image size, as an image folder's index keeps them.
  std::vector<ChannelStatistics> statistics;

  // 1 + the largest training label: classes are numbered, not named.
  int64_t num_classes() const;
  const ChannelStatistics* StatisticsFor(int64_t image_size) const;
  void SetStatistics(ChannelStatistics stats);
};

// The key of a listing (each split's name and its shards' paths and sizes,
// not their samples): 32 hex digits of SHA-256. A shard added, removed,
// renamed or changed in size changes it; the same tree elsewhere keeps it.
std::string ShardListingKey(const std::vector<ShardSplit>& splits);

// How a listing differs from an older one, by shard path:
// "1 shard added, 2 removed, 0 changed in size".
std::string DescribeShardChange(const std::vector<ShardSplit>& before,
                                const std::vector<ShardSplit>& after);

// WebDataset's rule for a member's name: the key is everything up to the
// first dot of the base name (with the folders before it), the extension the
// rest, lower-cased ("a/b.seg.JPG" -> "a/b", "seg.jpg"). False when the base
// name has no dot: WebDataset skips such a member.
bool SplitMemberName(const std::string& name, std::string* key, std::string* extension);

// The class index a .cls member holds: decimal digits, with surrounding
// whitespace (a trailing newline) allowed. "" on success, else why not
// ("is not a decimal integer", "is out of range 0..999999").
std::string ParseClassIndex(std::string_view text, uint32_t* label);

// What one shard holds.
struct ShardContents {
  std::vector<ShardSample> samples;  // shard field 0
  uint64_t ignored = 0;
  int64_t headers_read = 0;
};

// Walks the shard's members (TarScanner, named by its relative path) and
// groups consecutive members with the same key into a sample, as
// WebDataset's group_by_keys does. A sample is one image (.jpg, .jpeg or
// .png) and one .cls; members of other extensions are ignored, and so is a
// group with neither an image nor a label (metadata). Throws
// std::runtime_error naming the shard and the byte offset for: an image
// without a label; a label without an image; two images or two labels under
// one key; a label that is not a number or out of range; a truncated shard
// (with how many of its samples are whole and what is lost); a corrupt tar
// header.
ShardContents GroupShardMembers(TarScanner& scanner);

// Scans a shard, given its path relative to the data directory.
using ShardScan = std::function<ShardContents(const std::string& relative_path)>;

// The index of `listing` (splits of listed shards: paths and sizes). A shard
// that `previous` (may be null) lists with the same path and size keeps its
// samples; only the others are scanned. The statistics carry over when the
// training shards are the same. Throws std::runtime_error when a split has
// no sample, or a test sample's label is not a training class.
WebDatasetIndex IndexShards(std::vector<ShardSplit> listing, const WebDatasetIndex* previous,
                            const ShardScan& scan);

// The index as bytes (index_codec.h's envelope, magic ELWDSIDX): about 20
// bytes per sample.
std::string EncodeWebDatasetIndex(const WebDatasetIndex& index);

// Throws IndexFormatError for anything but an intact index of this version,
// or one whose samples name no shard or do not add up to the shards' counts.
WebDatasetIndex DecodeWebDatasetIndex(std::string_view bytes);

}  // namespace elastic::trainer
