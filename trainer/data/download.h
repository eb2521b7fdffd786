// Fetching CIFAR-10 when it is not on disk: download the official archive into
// a cache directory (with a progress bar), check its MD5, unpack the six batch
// files, and reuse them on every later run. Nothing half-written is ever taken
// for a good file: downloads and unpacking go to temporary names and are
// renamed into place only once complete and verified.
#pragma once

#include <string>

namespace elastic::trainer {

inline constexpr char kCifar10Url[] = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz";
inline constexpr char kCifar10Md5[] = "c32a1d4ab5d03f1284b67883e8d87530";

// Where the archive comes from; tests point it at a local file:// URL.
struct DownloadSource {
  std::string url = kCifar10Url;
  std::string md5 = kCifar10Md5;  // lower-case hex
};

// $ELASTIC_CACHE when it is set, else ~/.cache/elastic: the root of every cache.
std::string ElasticCacheDir();

// ElasticCacheDir()/cifar10.
std::string CifarCacheDir();

// Returns a directory holding data_batch_1..5.bin and test_batch.bin under
// cache_dir (cache_dir/cifar-10-batches-bin), downloading, checking and
// unpacking the archive first if they are not there yet. Throws
// std::runtime_error when the download fails (the message names the two ways
// out: --data-dir or --dataset fashion-mnist), on an MD5 mismatch (the bad
// archive is deleted) or when the archive lacks a batch file.
std::string EnsureCifar10(const std::string& cache_dir, const DownloadSource& source = {},
                          bool show_progress = true);

// Downloads url to path: into a temporary file next to it, fsync'd, then
// renamed. Throws std::runtime_error with curl's reason on failure.
void DownloadFile(const std::string& url, const std::string& path, bool show_progress);

// Lower-case hex MD5 of a file's contents.
std::string Md5OfFile(const std::string& path);

}  // namespace elastic::trainer
