// How a process of an image-folder job gets the folder's index
// (image_index.h): the one the job pinned, read without looking at the
// folder; the current one, found after listing the folder; or a new one,
// built under a lock by the first process that needs it. docs/data.md.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "trainer/data/image_index.h"

namespace elastic::trainer {

struct ImageIndexOptions {
  // --image-index-dir: where the index is kept; empty: beside the data when
  // that directory is writable, else the cache (image_index_store.h).
  std::string index_dir;
  // --image-index: the key of the index the job's driver built. Its holder
  // reads that index and neither lists nor probes anything; empty: list the
  // folder and use (or build) the index of what is there now.
  std::string pinned_key;
  // --normalize: the channel means and standard deviations the loader
  // normalises with instead of the index's measured statistics (which are
  // still measured and kept); empty: the index's.
  std::vector<float> mean;
  std::vector<float> std;
};

enum class IndexSource {
  kPinned,   // the pinned index, read without listing the folder
  kCurrent,  // the folder listed, its index found
  kBuilt,    // the folder listed and (re-)indexed by this process
};

const char* ToString(IndexSource source);

struct ObtainedIndex {
  ImageIndex index;  // with statistics for the image size asked for
  IndexSource source = IndexSource::kBuilt;
  std::string path;  // the file it came from or went to; "" when it could not be written
};

// The index of the image folder `dir` (an absolute path), with the
// normalisation statistics of `image_size`.
//
// With options.pinned_key, the index of that key is read from where indexes
// are kept: nothing else is read. When it is not there (another machine that
// keeps its own cache), the process indexes the folder itself as below, and
// throws std::runtime_error if the folder's key is not the pinned one: every
// process of a job must read the same files in the same order.
//
// Otherwise, holding the index's lock: the folder is listed; an index with
// the listing's key is used as it is. If there is none, one is built, probing
// only the images an older index did not know with the same size, and `log`
// gets one line saying why: none yet, the folder changed ("N files added, M
// removed, K changed in size"), or the index found was unusable (and why).
// Statistics missing for `image_size` are measured. A new or completed index
// is written (a failure to write is a warning on `log`, not an error).
// Layout errors of the folder are std::runtime_error, as LoadImageFolder's.
ObtainedIndex ObtainImageIndex(const std::string& dir, int64_t image_size,
                               const ImageIndexOptions& options, std::ostream& log);

// An index as training reads it: its bytes (a mapped file, or the encoding
// of an index built or found in this process) and the view of them.
struct ViewedIndex {
  std::shared_ptr<const void> owner;  // keeps `bytes` alive
  const char* bytes = nullptr;
  IndexView view;  // with statistics for the image size asked for
  IndexSource source = IndexSource::kBuilt;
  std::string path;  // as ObtainedIndex::path
};

// What LoadImageFolder reads. With options.pinned_key, the pinned index is
// mapped (MappedFile: the workers of a machine share its pages) and viewed
// in place: no string per image, no copy, nothing listed or probed. When no
// place holds it, or otherwise, ObtainImageIndex's index, encoded and viewed.
ViewedIndex LoadImageIndex(const std::string& dir, int64_t image_size,
                           const ImageIndexOptions& options, std::ostream& log);

}  // namespace elastic::trainer
