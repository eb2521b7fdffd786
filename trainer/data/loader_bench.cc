// Loader throughput (not a test): images per second the input pipeline
// delivers with augmentation at batch 128, by thread count, next to what a
// training step consumes, so one can see the step never waits for data.
// It also times opening the training split: for CIFAR-10, mapping the batch
// files and checking every label (docs/data.md); --cold first drops the
// files' pages from the page cache (posix_fadvise DONTNEED; pages another
// process maps stay), so the check reads them from disk.
//
//   bazel run //trainer/data:loader_bench -- [--dataset cifar10|fashion-mnist] [--data-dir DIR]
//       [--cold]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>

#include "trainer/data/cifar10.h"
#include "trainer/data/dataset.h"
#include "trainer/data/loader.h"

using elastic::trainer::Cifar10FileNames;
using elastic::trainer::Dataset;
using elastic::trainer::LoadDataset;
using elastic::trainer::Loader;
using elastic::trainer::LoaderOptions;
using elastic::trainer::Split;

namespace {

// Asks the kernel to drop the page cache's copy of the CIFAR-10 training
// files in `dir`; returns their bytes.
long long DropFromPageCache(const std::string& dir) {
  long long bytes = 0;
  for (const std::string& name : Cifar10FileNames(Split::kTrain)) {
    const int fd = ::open((dir + "/" + name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    bytes += ::lseek(fd, 0, SEEK_END);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dataset = "cifar10";
  std::string data_dir = "/work/shared/data/cifar10-subset";
  bool cold = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cold") == 0) {
      cold = true;
      continue;
    }
    if (i + 1 == argc) {
      std::fprintf(stderr, "usage: %s [--dataset NAME] [--data-dir DIR] [--cold]\n", argv[0]);
      return 2;
    }
    if (std::strcmp(argv[i], "--dataset") == 0) {
      dataset = argv[i + 1];
      if (dataset != "cifar10") data_dir.clear();
    } else if (std::strcmp(argv[i], "--data-dir") == 0) {
      data_dir = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: %s [--dataset NAME] [--data-dir DIR] [--cold]\n", argv[0]);
      return 2;
    }
    ++i;
  }
  if (cold && dataset == "cifar10") {
    std::printf("dropped %.1f MiB of training files from the page cache\n",
                DropFromPageCache(data_dir) / 1048576.0);
  }
  const auto open_start = std::chrono::steady_clock::now();
  std::shared_ptr<const Dataset> ds = LoadDataset(dataset, data_dir, Split::kTrain);
  const double open_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - open_start)
          .count();
  std::printf("opened the training split in %.1f ms%s\n", open_ms,
              dataset == "cifar10" ? " (mapped, every label checked)" : "");
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
