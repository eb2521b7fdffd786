// The index of an image folder (`--dataset image-folder`): what can only be
// learnt from the whole tree (its listing, the labels, which files have a
// readable image header, the normalisation statistics), computed once per job
// and read back by every other process of it, so that a joiner on a cold node
// reads one file instead of a million headers.
//
// This header holds the pure parts: a listing's key, the index built from a
// listing (reusing what an older index already knows), how two listings
// differ, and the index's bytes on disk. Where an index is kept, and who
// builds it: image_index_store.h and image_folder_index.h. docs/data.md.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace elastic::trainer {

// A file below a class folder whose name ends in .jpg, .jpeg or .png.
struct ListedImage {
  std::string path;   // relative to the data directory: "train/cat/0001.jpg"
  uint64_t size = 0;  // bytes
  int64_t label = 0;  // index into its split's class_names
};

// One split's folder as listed, in torchvision's order.
struct ListedSplit {
  std::string name;                      // "train", "test" or "val"
  std::vector<std::string> class_names;  // the sub-folders, sorted by name
  std::vector<ListedImage> images;       // by class, then (folder, file name)
  std::vector<std::string> ignored;      // other files (relative paths), not images
};

// An image folder's listing: the training split first, then test/ (or val/).
struct FolderListing {
  std::vector<ListedSplit> splits;
};

// The key of a listing: 32 hex digits (128 bits of SHA-256) over every
// split's name, class names, images (path, size, label) and ignored files.
// A file added, removed, renamed or resized changes it; the same tree copied
// elsewhere (paths are relative) keeps it.
std::string ListingKey(const FolderListing& listing);

// How a listing differs from an older one, counting files (images and
// ignored ones) by relative path.
struct ListingChange {
  int64_t added = 0;    // in the new listing only
  int64_t removed = 0;  // in the old one only
  int64_t resized = 0;  // in both, with another size
  bool empty() const { return added == 0 && removed == 0 && resized == 0; }
};

ListingChange DiffListings(const FolderListing& before, const FolderListing& after);

// "2 files added, 1 removed, 0 changed in size".
std::string Describe(const ListingChange& change);

// Per-channel mean and standard deviation of the training images resized to
// image_size x image_size (image_folder.h, MeasureImageNormalization).
struct ChannelStatistics {
  int64_t image_size = 0;
  std::vector<float> mean;
  std::vector<float> std;
};

struct ImageIndex {
  std::string key;  // ListingKey(listing)
  FolderListing listing;
  // Parallel to listing.splits[s].images: "" when the image's header was read,
  // otherwise why the file is not a readable JPEG or PNG image.
  std::vector<std::vector<std::string>> unreadable;
  // At most one entry per image size: a job at another --image-size adds its own.
  std::vector<ChannelStatistics> statistics;

  // The statistics for `image_size`, or nullptr.
  const ChannelStatistics* StatisticsFor(int64_t image_size) const;
  // Replaces (or adds) the statistics of stats.image_size.
  void SetStatistics(ChannelStatistics stats);
};

// Reads an image's header: "" when it is a readable JPEG or PNG, otherwise
// why not. Takes the path relative to the data directory.
using HeaderProbe = std::function<std::string(const std::string& relative_path)>;

// The index of `listing`. An image that `previous` (may be null) lists with
// the same path and size keeps its verdict; only the others are probed, each
// once, by up to `threads` threads at a time (a probe is one small read,
// waiting on the disk when the page cache is cold; `probe` must then be
// thread-safe). The statistics carry over when the readable training images
// are the same files in the same order (they are measured on those alone).
ImageIndex IndexListing(FolderListing listing, const ImageIndex* previous, const HeaderProbe& probe,
                        int threads = 1);

// A file that is not an intact index of this version; what() says why.
class IndexFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The index as bytes: a magic string and version, the length and SHA-256 of
// the body, then the body (length-prefixed strings, little-endian integers).
std::string EncodeIndex(const ImageIndex& index);

// Throws IndexFormatError for anything but an intact index of this version:
// another magic or version, a file cut short or with bytes after the end, a
// checksum that does not match, a label that names no class.
ImageIndex DecodeIndex(std::string_view bytes);

// An image of an encoded index, read in place (IndexView): where its path
// lies in the index's bytes, and its label. 16 bytes, no allocation.
struct ImageRef {
  uint64_t path_offset = 0;  // into the bytes the view was made of
  uint32_t path_size = 0;
  int32_t label = 0;  // index into its split's class_names
};

// What training needs of an encoded index, without a string per image: each
// split's readable images by reference into the bytes (which must outlive
// the view), and the rest of the index, with the first few unreadable and
// ignored files (for the warning) and their counts. A million images cost
// 16 MB of references instead of a hundred of strings, and no allocation
// each: what a joiner reads.
struct IndexView {
  struct Split {
    std::string name;
    std::vector<std::string> class_names;
    std::vector<ImageRef> readable;
    int64_t images = 0;                                           // readable or not
    std::vector<std::pair<std::string, std::string>> unreadable;  // (path, why), the first few
    int64_t unreadable_count = 0;
    std::vector<std::string> ignored;  // the first few
    int64_t ignored_count = 0;
  };
  std::string key;
  std::vector<Split> splits;
  std::vector<ChannelStatistics> statistics;

  const ChannelStatistics* StatisticsFor(int64_t image_size) const;
};

// The view of an encoded index, naming at most `named` unreadable and ignored
// files per split. Checks what DecodeIndex checks and throws IndexFormatError
// alike.
IndexView ViewIndex(std::string_view bytes, size_t named = 5);

}  // namespace elastic::trainer
