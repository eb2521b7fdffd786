// A user's own image data set, both splits, in one of the formats that
// `--dataset` names besides the built-in ones: NumPy arrays (npy.h), a
// torchvision ImageFolder tree of JPEG and PNG files (image_folder.h), or
// WebDataset shards (webdataset.h, which declares LoadWebDataset).
// docs/data.md describes the formats, their rules and their errors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/data/examples.h"
#include "trainer/data/image_folder_index.h"

namespace elastic::trainer {

// Both splits of a user's data set. Inputs are float [B, channels, height,
// width], normalised per channel with the training split's statistics and
// augmented (random crop with zero padding, horizontal flip; pixels.h) when
// a BatchRequest asks; targets are int64 class indices into class_names.
struct UserData {
  std::shared_ptr<const Examples> train;
  std::shared_ptr<const Examples> test;
  std::vector<std::string> class_names;
  int64_t channels = 0;
  int64_t height = 0;
  int64_t width = 0;
  // How a pixel p becomes an input: (p * pixel_scale - mean[c]) / std[c]
  // (pixel_scale 1/255 for uint8 pixels, 1 for float32 ones).
  float pixel_scale = 1.0f / 255;
  std::vector<float> mean;
  std::vector<float> std;
  // image-folder: the key of the index the files came from
  // (image_folder_index.h); a job's driver pins its workers to it. Else empty.
  std::string index_key;
};

// `dir`/train/ and `dir`/test/ (or `dir`/val/ when there is no test/), one
// folder of .jpg/.jpeg/.png files per class, every image resized to
// image_size x image_size RGB and decoded on the fly by the loader threads.
// The listing, the labels, the header checks and the normalisation come from
// the folder's index, built by the first process that needs it
// (ObtainImageIndex, `options`). Throws std::runtime_error naming the folder
// or file and the problem. Defined in image_folder.cc.
UserData LoadImageFolder(const std::string& dir, int64_t image_size,
                         const ImageIndexOptions& options = {});

// `dir`/train_x.npy, train_y.npy, test_x.npy and test_y.npy: uint8 or float32
// images (N, C, H, W), (N, H, W, C) or (N, H, W), integer labels (N,).
// Throws std::runtime_error naming the file and the problem. Defined in npy.cc.
UserData LoadNpyData(const std::string& dir);

}  // namespace elastic::trainer
