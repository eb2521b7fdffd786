// Where an image folder's index (image_index.h) is kept, and how it is read
// and written so that no process ever reads half of one.
//
// Beside the data (DIR/.elastic-image-index) when the data directory is
// writable, so that every machine that mounts the data finds it; otherwise in
// the cache (ELASTIC_CACHE, default ~/.cache/elastic: image-index/NAME-HASH,
// HASH a digest of DIR's absolute path); --image-index-dir puts it in a
// directory of the user's choosing instead. An index is written to a
// temporary file, fsync'd and renamed over the old one; builders serialise on
// a lock file beside it (IndexLock). docs/data.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainer/data/image_index.h"

namespace elastic::trainer {

// The files an index of one data directory may be in: `read`, in the order
// they are read, and `write`, where a new one goes.
struct IndexPlaces {
  std::vector<std::string> read;
  std::string write;
};

// The index's file name beside the data.
inline constexpr char kIndexFileName[] = ".elastic-image-index";

// The places for `data_dir` (an absolute path). With `index_dir` (the flag)
// only index_dir/NAME-HASH. Otherwise beside the data first, then
// cache_root/image-index/NAME-HASH; a new one is written beside the data when
// `data_dir_writable`, else in the cache. NAME is the directory's base name
// (for a reader of the cache), HASH 16 hex digits of its path's SHA-256.
// `beside` and `suffix` name another kind of index of the same directory
// (a WebDataset's: ".elastic-webdataset-index", NAME-HASH.webdataset.index).
IndexPlaces PlacesFor(const std::string& data_dir, bool data_dir_writable,
                      const std::string& index_dir, const std::string& cache_root,
                      const std::string& beside = kIndexFileName,
                      const std::string& suffix = ".index");

// Whether this process may add files to `dir`. Root passes every permission
// check, but a directory whose mode grants nobody write access (dr-xr-xr-x, as
// a shared data set is) is taken as read-only for root too: its owner said so.
bool DirectoryWritable(const std::string& dir);

// An index file read back: the index, or why it cannot be used.
struct StoredIndex {
  std::string path;
  std::optional<ImageIndex> index;
  std::string problem;  // when !index: "truncated: ...", "cannot read: ..."
};

// Each of `paths` that exists, read and decoded, in the same order.
std::vector<StoredIndex> ReadIndexFiles(const std::vector<std::string>& paths);

// A file read whole: its bytes, or why it could not be read.
struct StoredBytes {
  std::string path;
  std::optional<std::string> bytes;
  std::string problem;  // when !bytes: "cannot read: ..."
};

// Each of `paths` that exists, read whole, in the same order.
std::vector<StoredBytes> ReadStoredFiles(const std::vector<std::string>& paths);

// Writes `bytes` to `path` as WriteIndexFile writes an index.
void WriteFileAtomically(const std::string& path, const std::string& bytes);

// Writes `index` to `path` atomically: a temporary file beside it, fsync'd,
// renamed over `path`, the directory fsync'd. Creates the directory. Throws
// std::runtime_error naming the file when it cannot.
void WriteIndexFile(const std::string& path, const ImageIndex& index);

// An exclusive flock on `index_path`.lock, held while the object lives: one
// process builds an index while the others of the machine wait, then find it.
// Throws std::runtime_error when the lock file cannot be created.
class IndexLock {
 public:
  explicit IndexLock(const std::string& index_path);
  ~IndexLock();
  IndexLock(const IndexLock&) = delete;
  IndexLock& operator=(const IndexLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace elastic::trainer
