// Loader throughput (not a test): images per second the input pipeline
// delivers with augmentation at batch 128, by thread count, next to what a
// training step consumes, so one can see the step never waits for data.
//
//   bazel run //trainer/data:loader_bench -- [--dataset cifar10|fashion-mnist] [--data-dir DIR]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>

#include "trainer/data/dataset.h"
#include "trainer/data/loader.h"

using elastic::trainer::Dataset;
using elastic::trainer::LoadDataset;
using elastic::trainer::Loader;
using elastic::trainer::LoaderOptions;
using elastic::trainer::Split;

int main(int argc, char** argv) {
  std::string dataset = "cifar10";
  std::string data_dir = "/work/shared/data/cifar10-subset";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--dataset") == 0) {
      dataset = argv[i + 1];
      if (dataset != "cifar10") data_dir.clear();
    } else if (std::strcmp(argv[i], "--data-dir") == 0) {
      data_dir = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: %s [--dataset NAME] [--data-dir DIR]\n", argv[0]);
      return 2;
    }
  }
  std::shared_ptr<const Dataset> ds = LoadDataset(dataset, data_dir, Split::kTrain);
  std::vector<int64_t> indices(ds->size());
  std::iota(indices.begin(), indices.end(), 0);
  const int64_t min_images = 20000;  // several passes over a small set, for a stable figure

  std::printf("data set %s, %lld images, batch 128, augmentation on\n\n", dataset.c_str(),
              static_cast<long long>(ds->size()));
  std::printf("| loader threads | images/s | ms per batch of 128 |\n| --- | --- | --- |\n");
  for (int threads : {1, 2, 4}) {
    LoaderOptions options;
    options.threads = threads;
    Loader loader(ds, options);
    int64_t images = 0;
    uint64_t epoch = 0;
    const auto start = std::chrono::steady_clock::now();
    while (images < min_images) {
      loader.Start(indices, epoch++);
      while (auto batch = loader.Next()) images += batch->targets.size(0);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("| %d | %.0f | %.2f |\n", threads, images / seconds, 128e3 * seconds / images);
  }
  return 0;
}
