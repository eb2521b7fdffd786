#include "trainer/data/image_folder.h"

#include <torch/types.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
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

// `path` relative to `dir` when it lies below it (for shorter messages).
std::string Relative(const std::string& path, const std::string& dir) {
  const std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  return path.rfind(prefix, 0) == 0 ? path.substr(prefix.size()) : path;
}

[[noreturn]] void Fail(const std::string& what) {
  throw std::runtime_error("image-folder: " + what);
}

// Warns about the files of both splits that were skipped or ignored.
void WarnAboutSkipped(const std::string& dir, const std::vector<const ImageFolderSplit*>& splits) {
  size_t unreadable = 0, ignored = 0, candidates = 0;
  std::string unreadable_list, ignored_list;
  for (const ImageFolderSplit* split : splits) {
    candidates += split->files.size() + split->unreadable.size();
    for (const SkippedFile& f : split->unreadable) {
      if (unreadable++ < kNamedFiles) {
        unreadable_list +=
            (unreadable > 1 ? ", " : "") + Relative(f.path, dir) + " (" + f.why + ")";
      }
    }
    for (const std::string& f : split->ignored) {
      if (ignored++ < kNamedFiles) ignored_list += (ignored > 1 ? ", " : "") + Relative(f, dir);
    }
  }
  if (unreadable > 0) {
    std::cerr << "warning: image-folder " << dir << ": skipped " << unreadable << " of "
              << candidates << " files that are not readable JPEG/PNG images: " << unreadable_list
              << (unreadable > kNamedFiles ? ", ..." : "") << "\n";
  }
  if (ignored > 0) {
    std::cerr << "warning: image-folder " << dir << ": ignored " << ignored
              << " files without a .jpg, .jpeg or .png extension: " << ignored_list
              << (ignored > kNamedFiles ? ", ..." : "") << "\n";
  }
}

}  // namespace

ImageFolderSplit ScanImageFolder(const std::string& split_dir) {
  std::error_code ec;
  if (!fs::is_directory(split_dir, ec)) Fail(split_dir + " is not a directory");
  ImageFolderSplit split;
  // Class folders, sorted by name as torchvision's find_classes sorts them.
  for (const fs::directory_entry& entry : fs::directory_iterator(split_dir)) {
    if (entry.is_directory()) {
      split.class_names.push_back(entry.path().filename().string());
    } else {
      split.ignored.push_back(entry.path().string());  // not in a class folder
    }
  }
  std::sort(split.class_names.begin(), split.class_names.end());
  if (split.class_names.empty()) {
    Fail(split_dir + " has no class folders (expected " + split_dir + "/<class>/<image>.jpg)");
  }

  for (size_t label = 0; label < split.class_names.size(); ++label) {
    const fs::path class_dir = fs::path(split_dir) / split.class_names[label];
    // (folder, file name) pairs: torchvision sorts os.walk's folders, then the names in each.
    std::vector<std::pair<std::string, std::string>> names;
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(
             class_dir, fs::directory_options::follow_directory_symlink)) {
      if (entry.is_directory()) continue;
      const fs::path& p = entry.path();
      if (!HasImageExtension(p)) {
        split.ignored.push_back(p.string());
        continue;
      }
      names.emplace_back(p.parent_path().string(), p.filename().string());
    }
    std::sort(names.begin(), names.end());
    size_t readable = 0;
    for (const auto& [folder, name] : names) {
      const std::string path = folder + "/" + name;
      try {
        ProbeImage(path);
        split.files.push_back(ImageFile{path, static_cast<int64_t>(label)});
        ++readable;
      } catch (const ImageDecodeError& e) {
        split.unreadable.push_back(SkippedFile{path, ReasonOf(e, path)});
      }
    }
    if (readable == 0) {
      Fail("class folder " + class_dir.string() +
           (names.empty() ? " has no .jpg, .jpeg or .png file"
                          : " has no readable image (" + std::to_string(names.size()) +
                                " files are not readable JPEG/PNG images)"));
    }
  }
  return split;
}

PixelNormalizer MeasureImageNormalization(const std::vector<ImageFile>& files, int64_t image_size,
                                          int64_t max_images) {
  const auto n = static_cast<int64_t>(files.size());
  const int64_t k = std::min(n, max_images);
  ChannelMoments moments(3);
  for (int64_t j = 0; j < k; ++j) {
    const ImageFile& file = files[j * n / k];  // evenly spaced: every class is sampled
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

ImageFolderExamples::ImageFolderExamples(std::string name, std::vector<ImageFile> files,
                                         int64_t image_size, PixelNormalizer normalizer)
    : name_(std::move(name)),
      files_(std::move(files)),
      image_size_(image_size),
      normalizer_(std::move(normalizer)),
      padding_(CropPaddingFor(image_size, image_size)) {
  if (files_.empty()) throw std::invalid_argument(name_ + ": no image files");
  if (image_size_ < 1) throw std::invalid_argument(name_ + ": image size must be >= 1");
  if (normalizer_.channels() != 3) throw std::invalid_argument(name_ + ": need an RGB normaliser");
}

void ImageFolderExamples::Build(int64_t index, const CropFlip& crop, float* dst,
                                PixelLayout layout) const {
  const ImageFile& file = files_[index];
  try {
    const RgbImage image = LoadRgbImage(file.path, image_size_, image_size_);
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
    targets[i] = files_[sample].label;
  }
  return batch;
}

UserData LoadImageFolder(const std::string& dir, int64_t image_size) {
  if (image_size < 1) Fail("image size must be >= 1, got " + std::to_string(image_size));
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) Fail(dir + " is not a directory");
  const std::string train_dir = dir + "/train";
  if (!fs::is_directory(train_dir, ec)) {
    Fail(dir + " has no train/ folder (expected train/ and test/ or val/, one folder per class)");
  }
  std::string test_dir = dir + "/test";
  if (!fs::is_directory(test_dir, ec)) test_dir = dir + "/val";
  if (!fs::is_directory(test_dir, ec)) {
    Fail(dir +
         " has neither test/ nor val/ (expected train/ and test/ or val/, one folder per "
         "class)");
  }
  ImageFolderSplit train = ScanImageFolder(train_dir);
  ImageFolderSplit test = ScanImageFolder(test_dir);
  WarnAboutSkipped(dir, {&train, &test});

  // The test split's classes must be training classes; its labels are the
  // training split's indices of the same names (torchvision would number
  // each split's folders on its own, which silently mislabels a subset).
  std::map<std::string, int64_t> train_index;
  for (size_t k = 0; k < train.class_names.size(); ++k) train_index[train.class_names[k]] = k;
  std::vector<int64_t> relabel;
  for (const std::string& name : test.class_names) {
    const auto it = train_index.find(name);
    if (it == train_index.end()) {
      Fail("class " + test_dir + "/" + name + " has no folder in " + train_dir +
           "; the test split's classes must be training classes");
    }
    relabel.push_back(it->second);
  }
  for (ImageFile& f : test.files) f.label = relabel[f.label];

  PixelNormalizer normalizer = MeasureImageNormalization(train.files, image_size);
  UserData data;
  data.channels = 3;
  data.height = image_size;
  data.width = image_size;
  data.class_names = train.class_names;
  data.mean = normalizer.mean();
  data.std = normalizer.std();
  data.train = std::make_shared<ImageFolderExamples>("image-folder-train", std::move(train.files),
                                                     image_size, normalizer);
  data.test = std::make_shared<ImageFolderExamples>("image-folder-test", std::move(test.files),
                                                    image_size, normalizer);
  return data;
}

}  // namespace elastic::trainer
