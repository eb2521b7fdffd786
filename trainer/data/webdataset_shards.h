// A WebDataset's shard files (webdataset_index.h): listing them, scanning one
// to index it, and the shards of a split as a training process reads them,
// each mapped the first time one of its samples is asked for and then kept.
// Process-wide counters say what this process did, for the tests.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "trainer/data/mapped_file.h"
#include "trainer/data/webdataset_index.h"

namespace elastic::trainer {

// Lists `dir`/train/*.tar, then `dir`/test/*.tar (or `dir`/val/*.tar when
// there is no test/), each split's shards sorted by name (byte order), with
// their sizes; paths relative to `dir`. Reads directories, not shards.
// Other files are not shards and are skipped. Throws std::runtime_error
// naming the folder when `dir` or a split is missing or a split has no .tar.
std::vector<ShardSplit> ListShards(const std::string& dir);

// Maps `dir`/`relative_path` and groups its members (GroupShardMembers).
// Counted (WebDatasetCounters::headers_read).
ShardContents ScanShard(const std::string& dir, const std::string& relative_path);

// The shards of one split. Open(s) maps shard s the first time it is asked
// for, from any thread, and keeps the mapping: a process maps only the
// shards its samples are in, each once.
class ShardFiles {
 public:
  ShardFiles(std::string dir, std::vector<Shard> shards);
  ~ShardFiles();
  ShardFiles(const ShardFiles&) = delete;
  ShardFiles& operator=(const ShardFiles&) = delete;

  // Throws std::runtime_error naming the shard when it cannot be mapped or
  // its size is not the size it was indexed with (it changed since: its
  // offsets would point at other bytes).
  const MappedFile& Open(uint32_t shard) const;

  const std::vector<Shard>& shards() const { return shards_; }
  const std::string& dir() const { return dir_; }

 private:
  // Open's fast path reads `ready`; the first caller maps under `mutex`.
  struct Slot {
    std::mutex mutex;
    std::unique_ptr<MappedFile> file;
    std::atomic<const MappedFile*> ready{nullptr};
  };

  std::string dir_;
  std::vector<Shard> shards_;
  std::unique_ptr<Slot[]> slots_;
};

// What this process did to WebDataset shards since it started. A process
// that read its job's index (webdataset.h) lists and scans nothing, and maps
// a shard only when it reads one of its samples.
struct WebDatasetCounters {
  int64_t listings = 0;             // ListShards calls
  int64_t shards_scanned = 0;       // ScanShard calls
  int64_t headers_read = 0;         // tar headers read by ScanShard
  int64_t statistics_decodes = 0;   // images decoded to measure a normalisation
  int64_t indexes_built = 0;        // indexes this process built (or re-built)
  int64_t shard_opens = 0;          // shards mapped by ShardFiles::Open
  std::vector<std::string> opened;  // their paths, relative to the data directory, in order
};

WebDatasetCounters WebDatasetCountersNow();
void CountWebDatasetIndexBuilt();
void CountWebDatasetStatisticsDecode();

// When the environment variable ELASTIC_WEBDATASET_COUNTERS names a
// directory, writes WebDatasetCountersNow() and how the index was obtained
// (`index_source`, kept for the later writes) to DIR/<pid>.json, atomically:
// the multi-process tests' window into each worker. Called when the data set
// is loaded and again after every shard a process maps. Does nothing
// without the variable.
void WriteWebDatasetCountersForTests(const std::string& index_source = "");

}  // namespace elastic::trainer
