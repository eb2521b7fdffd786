#include "trainer/data/image_folder.h"

#include <torch/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>
#include <utility>

#include "trainer/data/image_decode.h"
#include "trainer/data/user_data.h"

namespace elastic::trainer {
namespace {

namespace fs = std::filesystem;

// Failed decodes named on stderr; the rest are only counted.
constexpr int64_t kNamedFailures = 5;
// Files named in a warning about a list of them.
constexpr size_t kNamedFiles = 5;

// The process-wide counters (ImageFolderCounters).
std::atomic<int64_t> folders_listed{0};
std::atomic<int64_t> headers_probed{0};
std::atomic<int64_t> statistics_decodes{0};
std::atomic<int64_t> indexes_built{0};

bool HasImageExtension(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// The reason of an ImageDecodeError without the path it starts with.
std::string ReasonOf(const ImageDecodeError& e, const std::string& path) {
  const std::string what = e.what();
  return what.rfind(path + ": ", 0) == 0 ? what.substr(path.size() + 2) : what;
}

[[noreturn]] void Fail(const std::string& what) {
  throw std::runtime_error("image-folder: " + what);
}

// `dir` without trailing slashes ("/" stays "/").
std::string WithoutTrailingSlash(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

// Lists split `name` of `root`, paths relative to `root` (ScanImageFolder's
// order and rules, no probes).
ListedSplit ListSplit(const std::string& root, const std::string& name) {
  const std::string split_dir = root + "/" + name;
  std::error_code ec;
  if (!fs::is_directory(split_dir, ec)) Fail(split_dir + " is not a directory");
  ListedSplit split;
  split.name = name;
  // Class folders, sorted by name as torchvision's find_classes sorts them.
  for (const fs::directory_entry& entry : fs::directory_iterator(split_dir)) {
    if (entry.is_directory()) {
      split.class_names.push_back(entry.path().filename().string());
    } else {
      split.ignored.push_back(name + "/" + entry.path().filename().string());  // not in a class
    }
  }
  std::sort(split.class_names.begin(), split.class_names.end());
  if (split.class_names.empty()) {
    Fail(split_dir + " has no class folders (expected " + split_dir + "/<class>/<image>.jpg)");
  }
  const size_t prefix = root.size() + 1;
  for (size_t label = 0; label < split.class_names.size(); ++label) {
    const fs::path class_dir = fs::path(split_dir) / split.class_names[label];
    // (folder, file name) pairs: torchvision sorts os.walk's folders, then the names in each.
    std::vector<std::pair<std::string, std::string>> names;
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(
             class_dir, fs::directory_options::follow_directory_symlink)) {
      if (entry.is_directory()) continue;
      const fs::path& p = entry.path();
      if (!HasImageExtension(p)) {
        split.ignored.push_back(p.string().substr(prefix));
        continue;
      }
      names.emplace_back(p.parent_path().string(), p.filename().string());
    }
    if (names.empty()) {
      Fail("class folder " + class_dir.string() + " has no .jpg, .jpeg or .png file");
    }
    std::sort(names.begin(), names.end());
    for (const auto& [folder, file] : names) {
      ListedImage image;
      image.path = (folder + "/" + file).substr(prefix);
      // A file that cannot be stat'ed (a dangling link) is listed with size
      // 0; its probe then says why it cannot be read.
      image.size = fs::file_size(root + "/" + image.path, ec);
      if (ec) image.size = 0;
      image.label = static_cast<int64_t>(label);
      split.images.push_back(std::move(image));
    }
  }
  std::sort(split.ignored.begin(), split.ignored.end());
  return split;
}

// Warns about the files of the index that are skipped or ignored.
void WarnAboutSkipped(const std::string& dir, const IndexView& view) {
  int64_t unreadable = 0, ignored = 0, candidates = 0;
  size_t named_unreadable = 0, named_ignored = 0;
  std::string unreadable_list, ignored_list;
  for (const IndexView::Split& split : view.splits) {
    candidates += split.images;
    unreadable += split.unreadable_count;
    ignored += split.ignored_count;
    for (const auto& [path, why] : split.unreadable) {
      if (named_unreadable++ < kNamedFiles) {
        unreadable_list += (named_unreadable > 1 ? ", " : "") + path + " (" + why + ")";
      }
    }
    for (const std::string& f : split.ignored) {
      if (named_ignored++ < kNamedFiles) ignored_list += (named_ignored > 1 ? ", " : "") + f;
    }
  }
  if (unreadable > 0) {
    std::cerr << "warning: image-folder " << dir << ": skipped " << unreadable << " of "
              << candidates << " files that are not readable JPEG/PNG images: " << unreadable_list
              << (unreadable > static_cast<int64_t>(kNamedFiles) ? ", ..." : "") << "\n";
  }
  if (ignored > 0) {
    std::cerr << "warning: image-folder " << dir << ": ignored " << ignored
              << " files without a .jpg, .jpeg or .png extension: " << ignored_list
              << (ignored > static_cast<int64_t>(kNamedFiles) ? ", ..." : "") << "\n";
  }
}

}  // namespace

FolderListing ListImageFolder(const std::string& dir_in) {
  const std::string dir = WithoutTrailingSlash(dir_in);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) Fail(dir + " is not a directory");
  if (!fs::is_directory(dir + "/train", ec)) {
    Fail(dir + " has no train/ folder (expected train/ and test/ or val/, one folder per class)");
  }
  const char* test = fs::is_directory(dir + "/test", ec) ? "test" : "val";
  if (!fs::is_directory(dir + "/" + test, ec)) {
    Fail(dir +
         " has neither test/ nor val/ (expected train/ and test/ or val/, one folder per "
         "class)");
  }
  folders_listed.fetch_add(1);
  FolderListing listing;
  listing.splits.push_back(ListSplit(dir, "train"));
  listing.splits.push_back(ListSplit(dir, test));
  return listing;
}

std::string ProbeImageHeader(const std::string& path) {
  headers_probed.fetch_add(1);
  try {
    ProbeImage(path);
    return "";
  } catch (const ImageDecodeError& e) {
    return ReasonOf(e, path);
  }
}

std::vector<ImageFile> ReadableImages(const std::string& dir_in, const ImageIndex& index,
                                      size_t split) {
  const std::string dir = WithoutTrailingSlash(dir_in);
  std::vector<ImageFile> files;
  const std::vector<ListedImage>& images = index.listing.splits.at(split).images;
  files.reserve(images.size());
  for (size_t i = 0; i < images.size(); ++i) {
    if (index.unreadable[split][i].empty()) {
      files.push_back(ImageFile{dir + "/" + images[i].path, images[i].label});
    }
  }
  return files;
}

void CheckEveryClassReadable(const std::string& dir_in, const ImageIndex& index) {
  const std::string dir = WithoutTrailingSlash(dir_in);
  for (size_t s = 0; s < index.listing.splits.size(); ++s) {
    const ListedSplit& split = index.listing.splits[s];
    std::vector<int64_t> readable(split.class_names.size()), listed(split.class_names.size());
    for (size_t i = 0; i < split.images.size(); ++i) {
      ++listed[split.images[i].label];
      readable[split.images[i].label] += index.unreadable[s][i].empty() ? 1 : 0;
    }
    for (size_t k = 0; k < split.class_names.size(); ++k) {
      if (readable[k] > 0) continue;
      const std::string class_dir = dir + "/" + split.name + "/" + split.class_names[k];
      Fail("class folder " + class_dir +
           (listed[k] == 0 ? " has no .jpg, .jpeg or .png file"
                           : " has no readable image (" + std::to_string(listed[k]) +
                                 " files are not readable JPEG/PNG images)"));
    }
  }
}

ImageFolderCounters ImageFolderCountersNow() {
  ImageFolderCounters c;
  c.folders_listed = folders_listed.load();
  c.headers_probed = headers_probed.load();
  c.statistics_decodes = statistics_decodes.load();
  c.indexes_built = indexes_built.load();
  return c;
}

void CountIndexBuilt() { indexes_built.fetch_add(1); }

void WriteImageFolderCountersForTests(const std::string& index_source, double load_seconds) {
  const char* dir = std::getenv("ELASTIC_IMAGE_FOLDER_COUNTERS");
  if (dir == nullptr || *dir == '\0') return;
  const ImageFolderCounters c = ImageFolderCountersNow();
  const std::string path = std::string(dir) + "/" + std::to_string(::getpid()) + ".json";
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp);
    out << "{\"pid\": " << ::getpid() << ", \"index\": \"" << index_source
        << "\", \"folders_listed\": " << c.folders_listed
        << ", \"headers_probed\": " << c.headers_probed
        << ", \"statistics_decodes\": " << c.statistics_decodes
        << ", \"indexes_built\": " << c.indexes_built << ", \"load_seconds\": " << load_seconds
        << "}\n";
    if (!out) {
      std::cerr << "warning: cannot write " << temp << "\n";
      return;
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
}

ImageFolderSplit ScanImageFolder(const std::string& split_dir_in) {
  const fs::path split_dir(WithoutTrailingSlash(split_dir_in));
  const std::string root = split_dir.has_parent_path() ? split_dir.parent_path().string() : ".";
  ImageIndex index;
  index.listing.splits.push_back(ListSplit(root, split_dir.filename().string()));
  index.unreadable.emplace_back();
  for (const ListedImage& image : index.listing.splits[0].images) {
    index.unreadable[0].push_back(ProbeImageHeader(root + "/" + image.path));
  }
  CheckEveryClassReadable(root, index);
  ListedSplit& listed = index.listing.splits[0];
  ImageFolderSplit split;
  split.class_names = std::move(listed.class_names);
  for (size_t i = 0; i < listed.images.size(); ++i) {
    const std::string file = root + "/" + listed.images[i].path;
    if (index.unreadable[0][i].empty()) {
      split.files.push_back(ImageFile{file, listed.images[i].label});
    } else {
      split.unreadable.push_back(SkippedFile{file, index.unreadable[0][i]});
    }
  }
  for (const std::string& f : listed.ignored) split.ignored.push_back(root + "/" + f);
  return split;
}

PixelNormalizer MeasureImageNormalization(const std::vector<ImageFile>& files, int64_t image_size,
                                          int64_t max_images) {
  const auto n = static_cast<int64_t>(files.size());
  const int64_t k = std::min(n, max_images);
  ChannelMoments moments(3);
  for (int64_t j = 0; j < k; ++j) {
    const ImageFile& file = files[j * n / k];  // evenly spaced: every class is sampled
    statistics_decodes.fetch_add(1);
    try {
      const RgbImage image = LoadRgbImage(file.path, image_size, image_size);
      moments.Add(image.pixels.data(), PixelLayout::kHWC, image_size, image_size);
    } catch (const ImageDecodeError&) {
      // Counted by the examples when a batch reads it; here it is simply left out.
    }
  }
  if (moments.images() == 0) {
    Fail("none of the " + std::to_string(k) + " images sampled to measure the normalisation " +
         "could be decoded");
  }
  return moments.Normalizer();
}

ImageFolderExamples::ImageFolderExamples(std::string name,
                                         std::shared_ptr<const ImageFileTable> files,
                                         int64_t image_size, PixelNormalizer normalizer)
    : name_(std::move(name)),
      files_(std::move(files)),
      image_size_(image_size),
      normalizer_(std::move(normalizer)),
      padding_(CropPaddingFor(image_size, image_size)) {
  if (!files_ || files_->size() == 0) throw std::invalid_argument(name_ + ": no image files");
  if (image_size_ < 1) throw std::invalid_argument(name_ + ": image size must be >= 1");
  if (normalizer_.channels() != 3) throw std::invalid_argument(name_ + ": need an RGB normaliser");
}

void ImageFolderExamples::Build(int64_t index, const CropFlip& crop, float* dst,
                                PixelLayout layout) const {
  try {
    const RgbImage image = LoadRgbImage(files_->path(index), image_size_, image_size_);
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

Batch ImageFolderExamples::Get(const std::vector<int64_t>& indices,
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
    targets[i] = files_->label(sample);
  }
  return batch;
}

UserData LoadImageFolder(const std::string& dir, int64_t image_size,
                         const ImageIndexOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  if (image_size < 1) Fail("image size must be >= 1, got " + std::to_string(image_size));
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) Fail(dir + " is not a directory");
  ViewedIndex index = LoadImageIndex(dir, image_size, options, std::cerr);
  IndexView& view = index.view;
  WarnAboutSkipped(dir, view);

  // The test split's classes must be training classes; its labels are the
  // training split's indices of the same names (torchvision would number
  // each split's folders on its own, which silently mislabels a subset).
  IndexView::Split& train = view.splits.at(0);
  IndexView::Split& test = view.splits.at(1);
  std::map<std::string, int32_t> train_index;
  for (size_t k = 0; k < train.class_names.size(); ++k) {
    train_index[train.class_names[k]] = static_cast<int32_t>(k);
  }
  std::vector<int32_t> relabel;
  for (const std::string& name : test.class_names) {
    const auto it = train_index.find(name);
    if (it == train_index.end()) {
      Fail("class " + dir + "/" + test.name + "/" + name + " has no folder in " + dir +
           "/train; the test split's classes must be training classes");
    }
    relabel.push_back(it->second);
  }
  for (ImageRef& image : test.readable) image.label = relabel[image.label];

  const ChannelStatistics* stats = view.StatisticsFor(image_size);
  if (stats == nullptr) throw std::logic_error("image-folder: the index has no statistics");
  // --normalize, when given, is used as it stands; the measured statistics stay in the index.
  PixelNormalizer normalizer = options.mean.empty() ? PixelNormalizer(stats->mean, stats->std)
                                                    : PixelNormalizer(options.mean, options.std);
  const std::string root = WithoutTrailingSlash(dir);
  UserData data;
  data.channels = 3;
  data.height = image_size;
  data.width = image_size;
  data.class_names = train.class_names;
  data.mean = normalizer.mean();
  data.std = normalizer.std();
  data.index_key = view.key;
  data.train = std::make_shared<ImageFolderExamples>(
      "image-folder-train",
      std::make_shared<IndexedFileTable>(index.owner, index.bytes, root, std::move(train.readable)),
      image_size, normalizer);
  data.test = std::make_shared<ImageFolderExamples>(
      "image-folder-test",
      std::make_shared<IndexedFileTable>(index.owner, index.bytes, root, std::move(test.readable)),
      image_size, normalizer);
  WriteImageFolderCountersForTests(
      ToString(index.source),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return data;
}

}  // namespace elastic::trainer
