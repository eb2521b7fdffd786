#include "trainer/data/webdataset_shards.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <utility>

namespace elastic::trainer {
namespace {

namespace fs = std::filesystem;

// The process-wide counters (WebDatasetCounters).
std::atomic<int64_t> listings{0};
std::atomic<int64_t> shards_scanned{0};
std::atomic<int64_t> headers_read{0};
std::atomic<int64_t> statistics_decodes{0};
std::atomic<int64_t> indexes_built{0};
std::mutex opened_mutex;  // guards opened_shards and the counters file
std::vector<std::string> opened_shards;
std::string counters_index_source;

[[noreturn]] void Fail(const std::string& what) { throw std::runtime_error("webdataset: " + what); }

std::string WithoutTrailingSlash(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

constexpr char kLayout[] =
    "expected train/*.tar and test/*.tar (or val/*.tar): WebDataset shards whose members are "
    "KEY.jpg, KEY.jpeg or KEY.png with KEY.cls";

ShardSplit ListSplit(const std::string& root, const std::string& name) {
  const std::string split_dir = root + "/" + name;
  ShardSplit split;
  split.name = name;
  int64_t others = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(split_dir)) {
    const std::string file = entry.path().filename().string();
    if (!entry.is_regular_file() || entry.path().extension() != ".tar") {
      ++others;
      continue;
    }
    split.shards.push_back(Shard{name + "/" + file, entry.file_size(), 0, 0});
  }
  if (split.shards.empty()) {
    Fail(split_dir + " has no .tar shard (" + std::to_string(others) +
         " other entries; compressed shards such as .tar.gz are not read: a sample is read in "
         "place, at its offset; " +
         kLayout + ")");
  }
  std::sort(split.shards.begin(), split.shards.end(),
            [](const Shard& a, const Shard& b) { return a.path < b.path; });
  return split;
}

void WriteCountersLocked() {
  const char* dir = std::getenv("ELASTIC_WEBDATASET_COUNTERS");
  if (dir == nullptr || *dir == '\0') return;
  const WebDatasetCounters c = [] {
    WebDatasetCounters out;
    out.listings = listings.load();
    out.shards_scanned = shards_scanned.load();
    out.headers_read = headers_read.load();
    out.statistics_decodes = statistics_decodes.load();
    out.indexes_built = indexes_built.load();
    out.shard_opens = static_cast<int64_t>(opened_shards.size());
    return out;
  }();
  const std::string path = std::string(dir) + "/" + std::to_string(::getpid()) + ".json";
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp);
    out << "{\"pid\": " << ::getpid() << ", \"index\": \"" << counters_index_source
        << "\", \"listings\": " << c.listings << ", \"shards_scanned\": " << c.shards_scanned
        << ", \"headers_read\": " << c.headers_read
        << ", \"statistics_decodes\": " << c.statistics_decodes
        << ", \"indexes_built\": " << c.indexes_built << ", \"shard_opens\": " << c.shard_opens
        << ", \"opened\": [";
    for (size_t i = 0; i < opened_shards.size(); ++i) {
      out << (i ? ", " : "") << "\"" << opened_shards[i] << "\"";
    }
    out << "]}\n";
    if (!out) {
      std::cerr << ("warning: cannot write " + temp + "\n");
      return;
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
}

}  // namespace

std::vector<ShardSplit> ListShards(const std::string& dir_in) {
  const std::string dir = WithoutTrailingSlash(dir_in);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) Fail(dir + " is not a directory");
  if (!fs::is_directory(dir + "/train", ec)) Fail(dir + " has no train/ folder (" + kLayout + ")");
  const char* test = fs::is_directory(dir + "/test", ec) ? "test" : "val";
  if (!fs::is_directory(dir + "/" + test, ec)) {
    Fail(dir + " has neither test/ nor val/ (" + kLayout + ")");
  }
  listings.fetch_add(1);
  return {ListSplit(dir, "train"), ListSplit(dir, test)};
}

ShardContents ScanShard(const std::string& dir, const std::string& relative_path) {
  shards_scanned.fetch_add(1);
  // One pass in order over the headers: the kernel reads ahead, so the scan
  // reads the whole shard at the disk's sequential speed. Without readahead
  // (MADV_RANDOM) it would read only the headers' pages, but one small read
  // per member: 10x slower on shards of 2.5 KB images, 15% faster on 110 KB
  // ones (webdataset_bench, cold; docs/data.md).
  const MappedFile file(WithoutTrailingSlash(dir) + "/" + relative_path,
                        MappedFile::Access::kSequential);
  TarScanner scanner(relative_path, file.data(), file.size());
  try {
    ShardContents contents = GroupShardMembers(scanner);
    headers_read.fetch_add(contents.headers_read);
    return contents;
  } catch (...) {
    headers_read.fetch_add(scanner.headers_read());
    throw;
  }
}

ShardFiles::ShardFiles(std::string dir, std::vector<Shard> shards)
    : dir_(WithoutTrailingSlash(std::move(dir))),
      shards_(std::move(shards)),
      slots_(std::make_unique<Slot[]>(shards_.size())) {}

ShardFiles::~ShardFiles() = default;

const MappedFile& ShardFiles::Open(uint32_t shard) const {
  Slot& slot = slots_[shard];
  if (const MappedFile* ready = slot.ready.load(std::memory_order_acquire)) return *ready;
  std::lock_guard<std::mutex> lock(slot.mutex);
  if (!slot.file) {
    const Shard& listed = shards_.at(shard);
    // Samples come in shuffled order: readahead would fetch what nobody reads yet.
    auto file = std::make_unique<MappedFile>(dir_ + "/" + listed.path, MappedFile::Access::kRandom);
    if (file->size() != listed.size) {
      Fail(file->path() + " is " + std::to_string(file->size()) + " bytes, but the job's index " +
           "was built when it was " + std::to_string(listed.size) +
           ": a shard must not change while a job reads it");
    }
    slot.file = std::move(file);
    std::lock_guard<std::mutex> counters(opened_mutex);
    opened_shards.push_back(listed.path);
    WriteCountersLocked();
  }
  slot.ready.store(slot.file.get(), std::memory_order_release);
  return *slot.file;
}

WebDatasetCounters WebDatasetCountersNow() {
  WebDatasetCounters c;
  c.listings = listings.load();
  c.shards_scanned = shards_scanned.load();
  c.headers_read = headers_read.load();
  c.statistics_decodes = statistics_decodes.load();
  c.indexes_built = indexes_built.load();
  std::lock_guard<std::mutex> lock(opened_mutex);
  c.shard_opens = static_cast<int64_t>(opened_shards.size());
  c.opened = opened_shards;
  return c;
}

void CountWebDatasetIndexBuilt() { indexes_built.fetch_add(1); }
void CountWebDatasetStatisticsDecode() { statistics_decodes.fetch_add(1); }

void WriteWebDatasetCountersForTests(const std::string& index_source) {
  std::lock_guard<std::mutex> lock(opened_mutex);
  if (!index_source.empty()) counters_index_source = index_source;
  WriteCountersLocked();
}

}  // namespace elastic::trainer
