#include "trainer/data/image_index.h"

#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

namespace elastic::trainer {
namespace {

// "ELIMGIDX" and the format's version: a reader of another version rebuilds.
constexpr char kMagic[8] = {'E', 'L', 'I', 'M', 'G', 'I', 'D', 'X'};
constexpr uint32_t kVersion = 1;
constexpr size_t kDigestBytes = 32;  // SHA-256
constexpr size_t kHeaderBytes = sizeof(kMagic) + 4 + 8 + kDigestBytes;

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) {
      throw std::runtime_error("OpenSSL: cannot start a SHA-256 digest");
    }
  }
  void Add(const void* data, size_t n) { EVP_DigestUpdate(ctx_.get(), data, n); }
  void Add(uint64_t v) {
    unsigned char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(v >> (8 * i));
    Add(bytes, 8);
  }
  // Length-prefixed, so that no two different lists of strings hash alike.
  void Add(const std::string& s) {
    Add(static_cast<uint64_t>(s.size()));
    Add(s.data(), s.size());
  }
  std::string Finish() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), digest, &n);
    return std::string(reinterpret_cast<const char*>(digest), n);
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_;
};

std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

class Writer {
 public:
  void U32(uint32_t v) { Bytes(&v, 4); }  // little-endian hosts only (x86-64, aarch64)
  void U64(uint64_t v) { Bytes(&v, 8); }
  void F32(float v) { Bytes(&v, 4); }
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void Bytes(const void* data, size_t n) { out_.append(static_cast<const char*>(data), n); }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

// Reads the body; every read is bounds-checked, so a damaged length throws
// instead of reading past the end or allocating wildly.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}

  uint32_t U32() {
    uint32_t v;
    std::memcpy(&v, Take(4, "a number"), 4);
    return v;
  }
  uint64_t U64() {
    uint64_t v;
    std::memcpy(&v, Take(8, "a number"), 8);
    return v;
  }
  float F32() {
    float v;
    std::memcpy(&v, Take(4, "a number"), 4);
    return v;
  }
  std::string Str() { return std::string(View()); }
  // A string in place: valid as long as the bytes are.
  std::string_view View() {
    const uint32_t n = U32();
    return std::string_view(Take(n, "a string"), n);
  }
  // A count of items of at least `min_bytes` each: one that the rest of the
  // file cannot hold is damage, refused before anything is reserved.
  uint64_t Count(size_t min_bytes) {
    const uint64_t n = U64();
    if (n > (bytes_.size() - at_) / min_bytes) {
      throw IndexFormatError("damaged: a count of " + std::to_string(n) + " at byte " +
                             std::to_string(kHeaderBytes + at_ - 8) + " exceeds the file");
    }
    return n;
  }
  bool done() const { return at_ == bytes_.size(); }
  size_t at() const { return at_; }

 private:
  const char* Take(size_t n, const char* what) {
    if (n > bytes_.size() - at_) {
      throw IndexFormatError("damaged: " + std::string(what) + " at byte " +
                             std::to_string(kHeaderBytes + at_) + " runs past the end");
    }
    const char* p = bytes_.data() + at_;
    at_ += n;
    return p;
  }

  std::string_view bytes_;
  size_t at_ = 0;
};

// Every file of a listing by path: its size (0 for an ignored file).
std::unordered_map<std::string_view, uint64_t> SizesByPath(const FolderListing& listing) {
  std::unordered_map<std::string_view, uint64_t> sizes;
  for (const ListedSplit& split : listing.splits) {
    for (const ListedImage& image : split.images) sizes.emplace(image.path, image.size);
    for (const std::string& path : split.ignored) sizes.emplace(path, 0);
  }
  return sizes;
}

// The readable training images, as (path, size), in order.
std::vector<std::pair<std::string_view, uint64_t>> ReadableTrainingImages(const ImageIndex& index) {
  std::vector<std::pair<std::string_view, uint64_t>> out;
  if (index.listing.splits.empty()) return out;
  const ListedSplit& train = index.listing.splits[0];
  for (size_t i = 0; i < train.images.size(); ++i) {
    if (index.unreadable[0][i].empty())
      out.emplace_back(train.images[i].path, train.images[i].size);
  }
  return out;
}

}  // namespace

std::string ListingKey(const FolderListing& listing) {
  Sha256 sha;
  sha.Add(static_cast<uint64_t>(listing.splits.size()));
  for (const ListedSplit& split : listing.splits) {
    sha.Add(split.name);
    sha.Add(static_cast<uint64_t>(split.class_names.size()));
    for (const std::string& name : split.class_names) sha.Add(name);
    sha.Add(static_cast<uint64_t>(split.images.size()));
    for (const ListedImage& image : split.images) {
      sha.Add(image.path);
      sha.Add(image.size);
      sha.Add(static_cast<uint64_t>(image.label));
    }
    sha.Add(static_cast<uint64_t>(split.ignored.size()));
    for (const std::string& path : split.ignored) sha.Add(path);
  }
  return Hex(sha.Finish().substr(0, 16));
}

ListingChange DiffListings(const FolderListing& before, const FolderListing& after) {
  const auto old_sizes = SizesByPath(before);
  const auto new_sizes = SizesByPath(after);
  ListingChange change;
  for (const auto& [path, size] : new_sizes) {
    const auto it = old_sizes.find(path);
    if (it == old_sizes.end()) {
      ++change.added;
    } else if (it->second != size) {
      ++change.resized;
    }
  }
  for (const auto& entry : old_sizes) change.removed += new_sizes.count(entry.first) == 0;
  return change;
}

std::string Describe(const ListingChange& change) {
  return std::to_string(change.added) + (change.added == 1 ? " file" : " files") + " added, " +
         std::to_string(change.removed) + " removed, " + std::to_string(change.resized) +
         " changed in size";
}

const ChannelStatistics* ImageIndex::StatisticsFor(int64_t image_size) const {
  for (const ChannelStatistics& s : statistics) {
    if (s.image_size == image_size) return &s;
  }
  return nullptr;
}

void ImageIndex::SetStatistics(ChannelStatistics stats) {
  for (ChannelStatistics& s : statistics) {
    if (s.image_size == stats.image_size) {
      s = std::move(stats);
      return;
    }
  }
  statistics.push_back(std::move(stats));
}

ImageIndex IndexListing(FolderListing listing, const ImageIndex* previous, const HeaderProbe& probe,
                        int threads) {
  // What the older index knows: path -> (size, verdict).
  std::unordered_map<std::string_view, std::pair<uint64_t, const std::string*>> known;
  if (previous != nullptr) {
    for (size_t s = 0; s < previous->listing.splits.size(); ++s) {
      const ListedSplit& split = previous->listing.splits[s];
      for (size_t i = 0; i < split.images.size(); ++i) {
        known.emplace(split.images[i].path,
                      std::make_pair(split.images[i].size, &previous->unreadable[s][i]));
      }
    }
  }
  ImageIndex index;
  index.key = ListingKey(listing);
  index.unreadable.resize(listing.splits.size());
  std::vector<std::pair<size_t, size_t>> to_probe;  // (split, image)
  for (size_t s = 0; s < listing.splits.size(); ++s) {
    const std::vector<ListedImage>& images = listing.splits[s].images;
    index.unreadable[s].resize(images.size());
    for (size_t i = 0; i < images.size(); ++i) {
      const auto it = known.find(images[i].path);
      if (it != known.end() && it->second.first == images[i].size) {
        index.unreadable[s][i] = *it->second.second;
      } else {
        to_probe.emplace_back(s, i);
      }
    }
  }
  // Each probe writes its own verdict: the threads share nothing but the
  // counter that hands out the work.
  std::atomic<size_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto work = [&] {
    try {
      for (size_t k; (k = next.fetch_add(1)) < to_probe.size();) {
        const auto [s, i] = to_probe[k];
        index.unreadable[s][i] = probe(listing.splits[s].images[i].path);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next.store(to_probe.size());  // the others stop too
    }
  };
  std::vector<std::thread> pool;
  const size_t helpers = std::min<size_t>(threads > 1 ? threads - 1 : 0, to_probe.size() / 64);
  for (size_t t = 0; t < helpers; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);

  index.listing = std::move(listing);
  if (previous != nullptr && ReadableTrainingImages(*previous) == ReadableTrainingImages(index)) {
    index.statistics = previous->statistics;
  }
  return index;
}

std::string EncodeIndex(const ImageIndex& index) {
  Writer body;
  body.Str(index.key);
  body.U64(index.listing.splits.size());
  for (size_t s = 0; s < index.listing.splits.size(); ++s) {
    const ListedSplit& split = index.listing.splits[s];
    body.Str(split.name);
    body.U64(split.class_names.size());
    for (const std::string& name : split.class_names) body.Str(name);
    body.U64(split.images.size());
    for (size_t i = 0; i < split.images.size(); ++i) {
      body.Str(split.images[i].path);
      body.U64(split.images[i].size);
      body.U64(static_cast<uint64_t>(split.images[i].label));
      body.Str(index.unreadable[s][i]);
    }
    body.U64(split.ignored.size());
    for (const std::string& path : split.ignored) body.Str(path);
  }
  body.U64(index.statistics.size());
  for (const ChannelStatistics& stats : index.statistics) {
    body.U64(static_cast<uint64_t>(stats.image_size));
    body.U64(stats.mean.size());
    for (size_t c = 0; c < stats.mean.size(); ++c) {
      body.F32(stats.mean[c]);
      body.F32(stats.std[c]);
    }
  }
  Sha256 sha;
  sha.Add(body.out().data(), body.out().size());
  Writer file;
  file.Bytes(kMagic, sizeof(kMagic));
  file.U32(kVersion);
  file.U64(body.out().size());
  file.Bytes(sha.Finish().data(), kDigestBytes);
  file.out().append(body.out());
  return std::move(file.out());
}

namespace {

// Checks the envelope (magic, version, length, SHA-256) and walks the body,
// telling `visitor` what it holds, in order: OnKey, then per split OnSplit,
// OnImage for each image and OnIgnored for each ignored file, then
// OnStatistics for each entry. Paths and verdicts are views into `bytes`.
template <typename Visitor>
void ParseIndex(std::string_view bytes, Visitor& visitor) {
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    throw IndexFormatError("not an image-folder index (no ELIMGIDX magic at its start)");
  }
  if (bytes.size() < kHeaderBytes) {
    throw IndexFormatError("truncated: " + std::to_string(bytes.size()) +
                           " bytes, shorter than the " + std::to_string(kHeaderBytes) +
                           "-byte header");
  }
  Reader header(bytes.substr(sizeof(kMagic), kHeaderBytes - sizeof(kMagic)));
  const uint32_t version = header.U32();
  if (version != kVersion) {
    throw IndexFormatError("version " + std::to_string(version) + ", this program reads version " +
                           std::to_string(kVersion));
  }
  const uint64_t body_bytes = header.U64();
  const std::string_view body = bytes.substr(kHeaderBytes);
  if (body.size() != body_bytes) {
    throw IndexFormatError((body.size() < body_bytes ? "truncated: " : "damaged: ") +
                           std::to_string(body.size()) + " bytes after the header, which says " +
                           std::to_string(body_bytes));
  }
  Sha256 sha;
  sha.Add(body.data(), body.size());
  if (sha.Finish() != std::string(bytes.data() + kHeaderBytes - kDigestBytes, kDigestBytes)) {
    throw IndexFormatError("damaged: its SHA-256 does not match its contents");
  }

  Reader in(body);
  visitor.OnKey(in.Str());
  const uint64_t splits = in.Count(4 + 8 + 8 + 8);
  for (uint64_t s = 0; s < splits; ++s) {
    std::string name = in.Str();
    const uint64_t classes = in.Count(4);
    std::vector<std::string> class_names;
    for (uint64_t k = 0; k < classes; ++k) class_names.push_back(in.Str());
    const uint64_t images = in.Count(4 + 8 + 8 + 4);
    visitor.OnSplit(std::move(name), std::move(class_names), images);
    for (uint64_t i = 0; i < images; ++i) {
      const std::string_view path = in.View();
      const uint64_t size = in.U64();
      const uint64_t label = in.U64();
      if (label >= classes) {
        throw IndexFormatError("damaged: " + std::string(path) + " has label " +
                               std::to_string(label) + " of " + std::to_string(classes) +
                               " classes");
      }
      const std::string_view unreadable = in.View();
      visitor.OnImage(path, static_cast<uint64_t>(path.data() - bytes.data()), size,
                      static_cast<int64_t>(label), unreadable);
    }
    const uint64_t ignored = in.Count(4);
    for (uint64_t i = 0; i < ignored; ++i) visitor.OnIgnored(in.View());
  }
  const uint64_t statistics = in.Count(8 + 8);
  for (uint64_t k = 0; k < statistics; ++k) {
    ChannelStatistics stats;
    stats.image_size = static_cast<int64_t>(in.U64());
    const uint64_t channels = in.Count(8);
    for (uint64_t c = 0; c < channels; ++c) {
      stats.mean.push_back(in.F32());
      stats.std.push_back(in.F32());
    }
    visitor.OnStatistics(std::move(stats));
  }
  if (!in.done()) {
    throw IndexFormatError("damaged: " + std::to_string(body.size() - in.at()) +
                           " bytes after the last entry");
  }
}

// Builds the whole ImageIndex: a string per image.
struct Decoder {
  ImageIndex index;

  void OnKey(std::string key) { index.key = std::move(key); }
  void OnSplit(std::string name, std::vector<std::string> class_names, uint64_t images) {
    ListedSplit split;
    split.name = std::move(name);
    split.class_names = std::move(class_names);
    split.images.reserve(images);
    index.listing.splits.push_back(std::move(split));
    index.unreadable.emplace_back().reserve(images);
  }
  void OnImage(std::string_view path, uint64_t, uint64_t size, int64_t label,
               std::string_view unreadable) {
    index.listing.splits.back().images.push_back(ListedImage{std::string(path), size, label});
    index.unreadable.back().emplace_back(unreadable);
  }
  void OnIgnored(std::string_view path) { index.listing.splits.back().ignored.emplace_back(path); }
  void OnStatistics(ChannelStatistics stats) { index.statistics.push_back(std::move(stats)); }
};

// Keeps only what training needs: references to the readable images.
struct Viewer {
  IndexView view;
  size_t named;

  void OnKey(std::string key) { view.key = std::move(key); }
  void OnSplit(std::string name, std::vector<std::string> class_names, uint64_t images) {
    IndexView::Split split;
    split.name = std::move(name);
    split.class_names = std::move(class_names);
    split.readable.reserve(images);
    view.splits.push_back(std::move(split));
  }
  void OnImage(std::string_view path, uint64_t offset, uint64_t, int64_t label,
               std::string_view unreadable) {
    IndexView::Split& split = view.splits.back();
    ++split.images;
    if (unreadable.empty()) {
      split.readable.push_back(
          ImageRef{offset, static_cast<uint32_t>(path.size()), static_cast<int32_t>(label)});
    } else if (split.unreadable.size() < named) {
      split.unreadable.emplace_back(std::string(path), std::string(unreadable));
    }
    if (!unreadable.empty()) ++split.unreadable_count;
  }
  void OnIgnored(std::string_view path) {
    IndexView::Split& split = view.splits.back();
    if (split.ignored.size() < named) split.ignored.emplace_back(path);
    ++split.ignored_count;
  }
  void OnStatistics(ChannelStatistics stats) { view.statistics.push_back(std::move(stats)); }
};

}  // namespace

ImageIndex DecodeIndex(std::string_view bytes) {
  Decoder decoder;
  ParseIndex(bytes, decoder);
  return std::move(decoder.index);
}

IndexView ViewIndex(std::string_view bytes, size_t named) {
  Viewer viewer{IndexView{}, named};
  ParseIndex(bytes, viewer);
  return std::move(viewer.view);
}

const ChannelStatistics* IndexView::StatisticsFor(int64_t image_size) const {
  for (const ChannelStatistics& s : statistics) {
    if (s.image_size == image_size) return &s;
  }
  return nullptr;
}

}  // namespace elastic::trainer
