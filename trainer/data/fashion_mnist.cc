#include "trainer/data/fashion_mnist.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace elastic::trainer {
namespace {

constexpr int kSide = 28;
constexpr int kPaddedSide = 32;
constexpr int kPad = (kPaddedSide - kSide) / 2;

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string Hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// Checks the header of an IDX file and returns its first dimension.
uint32_t ReadIdxHeader(const std::string& path, const std::vector<uint8_t>& bytes, uint32_t magic,
                       size_t header_bytes) {
  if (bytes.size() < header_bytes) {
    throw std::runtime_error(path + ": truncated IDX header: " + std::to_string(bytes.size()) +
                             " bytes at byte offset 0, expected " + std::to_string(header_bytes));
  }
  const uint32_t found = BigEndian32(bytes.data());
  if (found != magic) {
    throw std::runtime_error(path + ": bad IDX magic number " + Hex(found) +
                             " at byte offset 0, expected " + Hex(magic));
  }
  return BigEndian32(bytes.data() + 4);
}

void CheckPayloadSize(const std::string& path, const std::vector<uint8_t>& bytes,
                      size_t header_bytes, uint64_t expected_payload) {
  const uint64_t payload = bytes.size() - header_bytes;
  if (payload != expected_payload) {
    throw std::runtime_error(
        path + ": IDX data " + (payload < expected_payload ? "truncated" : "has trailing bytes") +
        ": the header promises " + std::to_string(expected_payload) + " bytes after byte offset " +
        std::to_string(header_bytes) + ", the file holds " + std::to_string(payload) +
        " (the mismatch starts at byte offset " +
        std::to_string(header_bytes + std::min(payload, expected_payload)) + ")");
  }
}

}  // namespace

std::vector<std::string> FashionMnistClassNames() {
  return {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
          "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
}

std::vector<uint8_t> ReadGzipFile(const std::string& path) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), gzclose);
  if (!file) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  gzbuffer(file.get(), 1 << 20);
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    const int n = gzread(file.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      const char* message = gzerror(file.get(), &code);
      throw std::runtime_error(path + ": gzip error after " + std::to_string(out.size()) +
                               " decompressed bytes: " + message);
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  // gzread returns 0 both at a clean end and at a stream cut short; gzerror tells them apart.
  int code = 0;
  const char* message = gzerror(file.get(), &code);
  if (code != Z_OK && code != Z_STREAM_END) {
    throw std::runtime_error(path + ": gzip error after " + std::to_string(out.size()) +
                             " decompressed bytes: " + message);
  }
  return out;
}

std::vector<uint8_t> ReadIdxImages(const std::string& path, int64_t* count) {
  constexpr size_t kHeader = 16;
  std::vector<uint8_t> bytes = ReadGzipFile(path);
  const uint32_t n = ReadIdxHeader(path, bytes, kIdxImagesMagic, kHeader);
  const uint32_t rows = BigEndian32(bytes.data() + 8);
  const uint32_t cols = BigEndian32(bytes.data() + 12);
  if (rows != kSide || cols != kSide) {
    throw std::runtime_error(path + ": IDX images are " + std::to_string(rows) + "x" +
                             std::to_string(cols) + " (header at byte offset 8), expected 28x28");
  }
  CheckPayloadSize(path, bytes, kHeader, uint64_t{n} * kSide * kSide);
  *count = n;
  bytes.erase(bytes.begin(), bytes.begin() + kHeader);
  return bytes;
}

std::vector<uint8_t> ReadIdxLabels(const std::string& path, int num_classes) {
  constexpr size_t kHeader = 8;
  std::vector<uint8_t> bytes = ReadGzipFile(path);
  const uint32_t n = ReadIdxHeader(path, bytes, kIdxLabelsMagic, kHeader);
  CheckPayloadSize(path, bytes, kHeader, n);
  for (size_t i = kHeader; i < bytes.size(); ++i) {
    if (bytes[i] >= num_classes) {
      throw std::runtime_error(path + ": label " + std::to_string(bytes[i]) + " at byte offset " +
                               std::to_string(i) + " is not in 0.." +
                               std::to_string(num_classes - 1));
    }
  }
  bytes.erase(bytes.begin(), bytes.begin() + kHeader);
  return bytes;
}

std::shared_ptr<Dataset> LoadFashionMnist(const std::string& dir, Split split) {
  const std::string prefix = dir + "/" + (split == Split::kTrain ? "train" : "t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  const std::vector<std::string> classes = FashionMnistClassNames();

  int64_t n = 0;
  const std::vector<uint8_t> gray = ReadIdxImages(images_path, &n);
  const std::vector<uint8_t> label_bytes =
      ReadIdxLabels(labels_path, static_cast<int>(classes.size()));
  if (static_cast<int64_t>(label_bytes.size()) != n) {
    throw std::runtime_error(labels_path + " holds " + std::to_string(label_bytes.size()) +
                             " labels but " + images_path + " holds " + std::to_string(n) +
                             " images");
  }

  torch::Tensor images = torch::zeros({n, 3, kPaddedSide, kPaddedSide}, torch::kUInt8);
  uint8_t* dst = images.data_ptr<uint8_t>();
  constexpr int64_t kPlane = kPaddedSide * kPaddedSide;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* src = gray.data() + i * kSide * kSide;
    uint8_t* image = dst + i * 3 * kPlane;
    for (int y = 0; y < kSide; ++y) {
      std::memcpy(image + (y + kPad) * kPaddedSide + kPad, src + y * kSide, kSide);
    }
    std::memcpy(image + kPlane, image, kPlane);  // gray -> the same value in G and B
    std::memcpy(image + 2 * kPlane, image, kPlane);
  }
  torch::Tensor labels = torch::empty({n}, torch::kInt64);
  int64_t* label = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) label[i] = label_bytes[i];
  return std::make_shared<InMemoryDataset>("fashion-mnist", std::move(images), std::move(labels),
                                           classes, kFashionMnistNormalization);
}

}  // namespace elastic::trainer
