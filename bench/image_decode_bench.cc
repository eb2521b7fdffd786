// image_decode_bench: the image-folder input pipeline on one core, ours
// against torchvision's, side by side in one run on the same files.
//
// For each source size it writes --images JPEG files (CIFAR-10 subset images
// enlarged to the size when the subset is there, generated ones otherwise)
// into a temporary ImageFolder tree, then times a pass over them, batch by
// batch, of
//   ours:        ImageFolderExamples::Get (decode with libjpeg-turbo at a DCT
//                scale, resize, crop with padding, flip, normalise) on this
//                thread, torch::set_num_threads(1);
//   torchvision: datasets.ImageFolder with Resize(S), RandomCrop(S,
//                padding=S//8), RandomHorizontalFlip(), ToTensor(),
//                Normalize(...) through DataLoader(num_workers=0), with
//                torch.set_num_threads(1) (bench/torchvision_decode_peer.py).
// Both read the same files after a warm-up pass (page cache), and report the
// median of --passes passes. Not a test: it prints a table; the last line is
// the headline (the first source size).
//
//   bazel run //bench:image_decode_bench
//   bazel run //bench:image_decode_bench -- --images=4096 --sizes=64,256,500 --image-size=64
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "trainer/data/dataset.h"
#include "trainer/data/image_decode.h"
#include "trainer/data/image_folder.h"
#include "trainer/data/image_test_files.h"
#include "trainer/data/pixels.h"
#include "trainer/flags.h"

namespace {

namespace fs = std::filesystem;
using namespace elastic::trainer;

struct BenchOptions {
  int64_t images = 2048;
  std::string sizes = "64,256";  // source sizes, one table row each
  int64_t image_size = 64;       // what both pipelines resize to
  int64_t classes = 10;
  int64_t quality = 90;
  int64_t batch_size = 128;
  int64_t passes = 3;
  std::string data_dir = "/work/shared/data/cifar10-subset";
  std::string python = "/usr/bin/python3";
  std::string peer = "bench/torchvision_decode_peer.py";
  bool keep = false;
};

constexpr std::array<float, 3> kMean = {0.4914f, 0.4822f, 0.4465f};
constexpr std::array<float, 3> kStd = {0.2470f, 0.2435f, 0.2616f};

std::vector<int64_t> SplitInts(const std::string& list) {
  std::vector<int64_t> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Source pictures, interleaved RGB, `side` square: CIFAR images enlarged when
// the subset is readable (photographs, not noise, so JPEG does the work it
// does on real data), generated smooth images otherwise.
class Pictures {
 public:
  explicit Pictures(const std::string& data_dir) {
    try {
      cifar_ = LoadCifar10(data_dir, Split::kTrain);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "CIFAR-10 subset not used (%s); generating images\n", e.what());
    }
  }
  const char* source() const { return cifar_ ? "CIFAR-10 subset" : "generated"; }
  std::vector<uint8_t> Get(int64_t i, int64_t side) const {
    if (!cifar_) return testing::SmoothRgbImage(side, side, static_cast<int>(i));
    // The data set serves planes (CHW); the resize reads interleaved pixels (HWC).
    const uint8_t* chw = cifar_->image(i % cifar_->size());
    std::vector<uint8_t> hwc(32 * 32 * 3);
    for (int p = 0; p < 32 * 32; ++p) {
      for (int c = 0; c < 3; ++c) hwc[p * 3 + c] = chw[c * 32 * 32 + p];
    }
    std::vector<uint8_t> out(side * side * 3);
    ResizeBilinear(hwc.data(), 32, 32, 3, out.data(), side, side);
    return out;
  }

 private:
  std::shared_ptr<const Dataset> cifar_;
};

// Writes the ImageFolder tree root/class_k/i.jpg; returns its files.
std::vector<ImageFile> WriteFolder(const std::string& root, const Pictures& pictures, int64_t side,
                                   const BenchOptions& o) {
  std::vector<ImageFile> files;
  for (int64_t k = 0; k < o.classes; ++k)
    fs::create_directories(root + "/class" + std::to_string(k));
  for (int64_t i = 0; i < o.images; ++i) {
    const int64_t k = i % o.classes;
    char name[32];
    std::snprintf(name, sizeof(name), "/%06lld.jpg", static_cast<long long>(i));
    const std::string path = root + "/class" + std::to_string(k) + name;
    testing::WriteJpeg(path, pictures.Get(i, side).data(), static_cast<int>(side),
                       static_cast<int>(side), 3, static_cast<int>(o.quality));
    files.push_back(ImageFile{path, k});
  }
  return files;
}

// Images per second of one pass of ours over every file, in batches.
double OurPass(const ImageFolderExamples& examples, int64_t batch_size, uint64_t epoch) {
  const auto start = std::chrono::steady_clock::now();
  for (int64_t first = 0; first < examples.size(); first += batch_size) {
    std::vector<int64_t> indices;
    for (int64_t i = first; i < std::min(examples.size(), first + batch_size); ++i) {
      indices.push_back(i);
    }
    const Batch batch = examples.Get(indices, BatchRequest{epoch, true, 0, false});
    if (batch.inputs.size(0) != static_cast<int64_t>(indices.size())) std::abort();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return examples.size() / seconds;
}

// Runs the torchvision peer over `root`; its median images/s, or 0 when it failed.
double PeerImagesPerSecond(const std::string& root, const BenchOptions& o) {
  std::ostringstream command;
  command << "OMP_NUM_THREADS=1 " << o.python << " " << o.peer << " --root=" << root
          << " --size=" << o.image_size << " --batch-size=" << o.batch_size
          << " --passes=" << o.passes << " 2>&1";
  FILE* pipe = ::popen(command.str().c_str(), "r");
  if (pipe == nullptr) return 0;
  std::string output;
  std::array<char, 4096> buffer;
  for (size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) {
    output.append(buffer.data(), n);
  }
  const int status = ::pclose(pipe);
  const size_t at = output.rfind("\nimages_per_second=");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || at == std::string::npos) {
    std::fprintf(stderr, "torchvision peer failed (%s):\n%s\n", command.str().c_str(),
                 output.c_str());
    return 0;
  }
  return std::atof(output.c_str() + at + std::string("\nimages_per_second=").size());
}

}  // namespace

int main(int argc, char** argv) {
  BenchOptions o;
  FlagSet flags("image_decode_bench",
                "Image-folder pipeline (JPEG decode, resize, crop, flip, normalise) on one "
                "core: ours against torchvision's ImageFolder + DataLoader.");
  flags.AddInt("images", &o.images, "JPEG files per source size.");
  flags.AddString("sizes", &o.sizes, "Source image sides, comma-separated: one row each.");
  flags.AddInt("image-size", &o.image_size, "Side both pipelines resize to (S).");
  flags.AddInt("classes", &o.classes, "Class folders the files are spread over.");
  flags.AddInt("quality", &o.quality, "JPEG quality of the files written.");
  flags.AddInt("batch-size", &o.batch_size, "Images per batch, both sides.");
  flags.AddInt("passes", &o.passes, "Timed passes per side (after a warm-up); the median counts.");
  flags.AddString("data-dir", &o.data_dir, "CIFAR-10 subset for the pictures (else generated).");
  flags.AddString("python", &o.python, "Interpreter that has torch and torchvision.");
  flags.AddString("peer", &o.peer, "Path of bench/torchvision_decode_peer.py.");
  flags.AddBool("keep", &o.keep, "Keep the temporary image folders.");
  try {
    flags.Parse(argc, argv);
  } catch (const FlagError& e) {
    std::fprintf(stderr, "image_decode_bench: %s\n", e.what());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (::access(o.peer.c_str(), R_OK) != 0) {
    // Outside `bazel run`, look next to the binary's runfiles.
    o.peer = std::string(argv[0]) + ".runfiles/elastic/bench/torchvision_decode_peer.py";
  }
  torch::set_num_threads(1);

  char tmp_template[] = "/tmp/image_decode_bench.XXXXXX";
  if (::mkdtemp(tmp_template) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string tmp = tmp_template;
  const Pictures pictures(o.data_dir);
  const PixelNormalizer normalizer(std::vector<float>(kMean.begin(), kMean.end()),
                                   std::vector<float>(kStd.begin(), kStd.end()));

  struct Row {
    int64_t side;
    double ours;
    double theirs;
  };
  std::vector<Row> rows;
  for (int64_t side : SplitInts(o.sizes)) {
    const std::string root = tmp + "/" + std::to_string(side) + "/train";
    std::fprintf(stderr, "writing %lld %lldx%lld JPEGs (%s) to %s\n",
                 static_cast<long long>(o.images), static_cast<long long>(side),
                 static_cast<long long>(side), pictures.source(), root.c_str());
    const ImageFolderExamples examples("bench", WriteFolder(root, pictures, side, o), o.image_size,
                                       normalizer);
    OurPass(examples, o.batch_size, 0);  // warm-up
    std::vector<double> ours;
    for (int64_t p = 0; p < o.passes; ++p) ours.push_back(OurPass(examples, o.batch_size, p + 1));
    if (examples.failed_decodes() != 0) {
      std::fprintf(stderr, "image_decode_bench: %lld decodes failed\n",
                   static_cast<long long>(examples.failed_decodes()));
      return 1;
    }
    const double theirs = PeerImagesPerSecond(root, o);
    rows.push_back(Row{side, Median(ours), theirs});
    std::fprintf(stderr, "%lldx%lld: ours %.0f, torchvision %.0f images/s\n",
                 static_cast<long long>(side), static_cast<long long>(side), Median(ours), theirs);
  }
  if (!o.keep) fs::remove_all(tmp);

  std::printf(
      "\nimage-folder pipeline, one core: %lld JPEGs (quality %lld, %s) per row -> %lldx%lld, "
      "crop padding %lld, flip, normalise; batch %lld; median of %lld passes\n\n",
      static_cast<long long>(o.images), static_cast<long long>(o.quality), pictures.source(),
      static_cast<long long>(o.image_size), static_cast<long long>(o.image_size),
      static_cast<long long>(CropPaddingFor(o.image_size, o.image_size)),
      static_cast<long long>(o.batch_size), static_cast<long long>(o.passes));
  std::printf("| source | ours images/s/core | torchvision images/s/core | ours/torchvision |\n");
  std::printf("| --- | --- | --- | --- |\n");
  for (const Row& r : rows) {
    char ratio[32] = "peer failed";
    if (r.theirs > 0) std::snprintf(ratio, sizeof(ratio), "%.2fx", r.ours / r.theirs);
    std::printf("| %lldx%lld JPEG | %.0f | %.0f | %s |\n", static_cast<long long>(r.side),
                static_cast<long long>(r.side), r.ours, r.theirs, ratio);
  }
  if (rows.empty() || rows[0].theirs <= 0) {
    std::printf("headline: no torchvision figure (see the errors above)\n");
    return 1;
  }
  std::printf(
      "headline: ours/torchvision %.2fx images per second per core (%lldx%lld JPEG -> %lld)\n",
      rows[0].ours / rows[0].theirs, static_cast<long long>(rows[0].side),
      static_cast<long long>(rows[0].side), static_cast<long long>(o.image_size));
  return 0;
}
