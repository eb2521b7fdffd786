// `--dataset image-folder`: JPEG and PNG files in torchvision's ImageFolder
// layout (root/class_x/xxx.png), decoded on the fly by the loader threads.
// LoadImageFolder (user_data.h) builds both splits from these parts.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainer/data/examples.h"
#include "trainer/data/image_index.h"
#include "trainer/data/pixels.h"

namespace elastic::trainer {

// One image of a split and the index of its class.
struct ImageFile {
  std::string path;
  int64_t label = 0;
};

// A file with an image extension whose header could not be read.
struct SkippedFile {
  std::string path;
  std::string why;
};

// What one split's folder holds.
struct ImageFolderSplit {
  std::vector<std::string> class_names;  // the sub-folders, sorted by name
  std::vector<ImageFile> files;          // the readable images; labels index class_names
  std::vector<SkippedFile> unreadable;   // .jpg/.jpeg/.png files that are not readable images
  std::vector<std::string> ignored;      // files with any other extension
};

// Lists the image folder `dir`: `dir`/train/, then `dir`/test/ (or `dir`/val/
// when there is no test/), each in ScanImageFolder's order, with every
// image's size; paths relative to `dir`. Reads directories and sizes, no image. Throws
// std::runtime_error, naming the folder, when `dir` or a split is missing, a split has no class
// folders, or a class folder has no .jpg, .jpeg or .png file.
FolderListing ListImageFolder(const std::string& dir);

// Reads the header of the image at `path` (ProbeImage): "" when it is a
// readable JPEG or PNG, otherwise why not. Counted (ImageFolderCounters).
std::string ProbeImageHeader(const std::string& path);

// The readable images of split `split` of `index`, paths under `dir`.
std::vector<ImageFile> ReadableImages(const std::string& dir, const ImageIndex& index,
                                      size_t split);

// Throws std::runtime_error naming the first class folder of `index` (of the
// folder `dir`) that has no readable image.
void CheckEveryClassReadable(const std::string& dir, const ImageIndex& index);

// What this process did to image folders since it started: a process that
// read its job's index (image_folder_index.h) lists, probes and decodes
// nothing at start. Tests read them, rather than log lines or timing.
struct ImageFolderCounters {
  int64_t folders_listed = 0;      // ListImageFolder calls
  int64_t headers_probed = 0;      // ProbeImageHeader calls
  int64_t statistics_decodes = 0;  // images decoded to measure a normalisation
  int64_t indexes_built = 0;       // indexes this process built (or re-built)
};

ImageFolderCounters ImageFolderCountersNow();

// Counts a built index (image_folder_index.cc).
void CountIndexBuilt();

// When the environment variable ELASTIC_IMAGE_FOLDER_COUNTERS names a
// directory, writes ImageFolderCountersNow(), how the index was obtained and
// how long LoadImageFolder took (for bench/image_folder_start_bench.py; no
// test reads a time) to DIR/<pid>.json (atomically): the multi-process
// tests' window into each worker. Called by LoadImageFolder; does nothing
// without the variable.
void WriteImageFolderCountersForTests(const std::string& index_source, double load_seconds);

// Lists `split_dir` as torchvision's ImageFolder does: every sub-folder is a
// class, classes sorted by name; a class's images are the files below its
// folder (recursively, following links) whose names end in .jpg, .jpeg or
// .png in any case, in the order (folder, file name), sorted. Each one's header
// is read (ProbeImage) and a file that is not a readable JPEG or PNG is put
// in `unreadable` instead. Throws std::runtime_error, naming the folder, when
// `split_dir` is missing or has no class folders, or a class folder has no
// readable image.
ImageFolderSplit ScanImageFolder(const std::string& split_dir);

// The per-channel mean and standard deviation of the RGB pixels (scaled to
// [0, 1]) of at most `max_images` of `files`, evenly spaced and so the same
// every time, each decoded and resized to image_size x image_size. Files that
// fail to decode are left out. Throws std::runtime_error when none decodes.
PixelNormalizer MeasureImageNormalization(const std::vector<ImageFile>& files, int64_t image_size,
                                          int64_t max_images = 1000);

// The files an ImageFolderExamples reads: each sample's path and label.
class ImageFileTable {
 public:
  virtual ~ImageFileTable() = default;
  virtual int64_t size() const = 0;
  virtual std::string path(int64_t i) const = 0;
  virtual int64_t label(int64_t i) const = 0;
};

// Files given one by one (ScanImageFolder's, a benchmark's, a built index's).
class ListedFileTable : public ImageFileTable {
 public:
  explicit ListedFileTable(std::vector<ImageFile> files) : files_(std::move(files)) {}
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  std::string path(int64_t i) const override { return files_[i].path; }
  int64_t label(int64_t i) const override { return files_[i].label; }

 private:
  std::vector<ImageFile> files_;
};

// Files of an index read in place (IndexView): a path is `root`/ followed by
// the bytes an ImageRef points to in `bytes`, which this table keeps alive
// (a mapped index file: the processes of a machine share its pages).
class IndexedFileTable : public ImageFileTable {
 public:
  IndexedFileTable(std::shared_ptr<const void> owner, const char* bytes, std::string root,
                   std::vector<ImageRef> images)
      : owner_(std::move(owner)),
        bytes_(bytes),
        root_(std::move(root)),
        images_(std::move(images)) {}
  int64_t size() const override { return static_cast<int64_t>(images_.size()); }
  std::string path(int64_t i) const override {
    const ImageRef& ref = images_[i];
    return root_ + "/" + std::string(bytes_ + ref.path_offset, ref.path_size);
  }
  int64_t label(int64_t i) const override { return images_[i].label; }

 private:
  std::shared_ptr<const void> owner_;
  const char* bytes_;
  std::string root_;
  std::vector<ImageRef> images_;
};

// Images decoded when a batch is built (in Get, on the loader threads), so a
// data set of any size costs only its list of files in memory. Inputs are
// float [B, 3, image_size, image_size]: decoded, resized, and, when
// augmenting, cropped with zero padding CropPaddingFor(image_size,
// image_size) and flipped (pixels.h); then normalised. Targets are the labels.
//
// A file that turns out to be corrupt in a full decode (its header was
// fine) does not stop training: its sample is all zeros (the mean image
// after normalisation), failed_decodes() counts it, and the first few are
// named on stderr.
class ImageFolderExamples : public Examples {
 public:
  // Throws std::invalid_argument when there are no files or image_size < 1.
  ImageFolderExamples(std::string name, std::shared_ptr<const ImageFileTable> files,
                      int64_t image_size, PixelNormalizer normalizer);
  ImageFolderExamples(std::string name, std::vector<ImageFile> files, int64_t image_size,
                      PixelNormalizer normalizer)
      : ImageFolderExamples(std::move(name), std::make_shared<ListedFileTable>(std::move(files)),
                            image_size, std::move(normalizer)) {}

  std::string name() const override { return name_; }
  int64_t size() const override { return files_->size(); }
  Batch Get(const std::vector<int64_t>& indices, const BatchRequest& request) const override;

  // Decodes that failed in Get since construction (one per sample built).
  int64_t failed_decodes() const { return failed_decodes_.load(); }
  const ImageFileTable& files() const { return *files_; }
  const PixelNormalizer& normalizer() const { return normalizer_; }

 private:
  // Writes sample `index`, normalised, into dst (3 x image_size^2 floats).
  void Build(int64_t index, const CropFlip& crop, float* dst, PixelLayout layout) const;

  std::string name_;
  std::shared_ptr<const ImageFileTable> files_;
  int64_t image_size_;
  PixelNormalizer normalizer_;
  int64_t padding_;
  mutable std::atomic<int64_t> failed_decodes_{0};
};

}  // namespace elastic::trainer
