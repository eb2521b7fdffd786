// What indexing a WebDataset costs, and what a joiner pays instead (not a
// test): the scan of every shard's tar headers and .cls members alone; the
// whole build (scan, normalisation from 1000 decoded images, the index
// written); and reading the pinned index, as a job's workers and joiners do.
// --cold first drops the shards' pages from the page cache (posix_fadvise
// DONTNEED; pages another process maps stay), so the scan reads the headers
// from disk. The index goes to a temporary directory, never beside the data.
//
//   bazel run //trainer/data:webdataset_bench -- --data-dir DIR [--cold]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>

#include "trainer/data/webdataset.h"

namespace {

namespace fs = std::filesystem;
using namespace elastic::trainer;

// Drops the page cache's copy of every shard of `splits`; returns their bytes.
double DropFromPageCache(const std::string& dir, const std::vector<ShardSplit>& splits) {
  double bytes = 0;
  for (const ShardSplit& split : splits) {
    for (const Shard& shard : split.shards) {
      const int fd = ::open((dir + "/" + shard.path).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
      bytes += static_cast<double>(shard.size);
    }
  }
  return bytes;
}

double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  bool cold = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cold") == 0) {
      cold = true;
    } else if (std::strcmp(argv[i], "--data-dir") == 0 && i + 1 < argc) {
      dir = argv[++i];
    } else {
      dir.clear();
      break;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "usage: %s --data-dir DIR [--cold]\n", argv[0]);
    return 2;
  }
  char temp[] = "/tmp/webdataset-bench-XXXXXX";
  if (::mkdtemp(temp) == nullptr) return 1;
  const ImageIndexOptions options{temp, ""};

  const std::vector<ShardSplit> listing = ListShards(dir);
  double bytes = 0;
  if (cold) bytes = DropFromPageCache(dir, listing);
  auto start = std::chrono::steady_clock::now();
  const WebDatasetIndex scanned = IndexShards(
      listing, nullptr, [&dir](const std::string& path) { return ScanShard(dir, path); });
  const double scan_ms = MsSince(start);
  size_t shards = 0, samples = 0;
  for (const ShardSplit& split : scanned.splits) {
    shards += split.shards.size();
    samples += split.samples.size();
    for (const Shard& shard : split.shards) bytes += cold ? 0 : static_cast<double>(shard.size);
  }
  const WebDatasetCounters after_scan = WebDatasetCountersNow();
  std::printf("%zu shards, %.1f MiB, %zu samples, %lld tar headers (%s)\n", shards,
              bytes / 1048576.0, samples, static_cast<long long>(after_scan.headers_read),
              cold ? "cold page cache" : "warm page cache");
  std::printf("scan (headers and .cls only):          %8.1f ms  (%.1f us per sample)\n", scan_ms,
              1000.0 * scan_ms / static_cast<double>(samples));
  std::fflush(stdout);

  if (cold) DropFromPageCache(dir, listing);
  try {
    start = std::chrono::steady_clock::now();
    const ObtainedWebDatasetIndex built = ObtainWebDatasetIndex(dir, 32, options, std::cerr);
    const double build_ms = MsSince(start);
    start = std::chrono::steady_clock::now();
    const ObtainedWebDatasetIndex pinned =
        ObtainWebDatasetIndex(dir, 32, {temp, built.index.key}, std::cerr);
    const double pinned_ms = MsSince(start);
    std::printf("build (scan, statistics of 1000, write): %6.1f ms; index %.1f KiB\n", build_ms,
                fs::file_size(built.path) / 1024.0);
    std::printf("pinned index read (workers, joiners):  %8.1f ms  (%s)\n", pinned_ms,
                ToString(pinned.source));
  } catch (const std::exception& e) {
    std::printf("build: %s\n", e.what());
  }
  fs::remove_all(temp);
  return 0;
}
