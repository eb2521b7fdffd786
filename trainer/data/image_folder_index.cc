#include "trainer/data/image_folder_index.h"

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "trainer/data/download.h"
#include "trainer/data/image_folder.h"
#include "trainer/data/image_index_store.h"
#include "trainer/data/mapped_file.h"

namespace elastic::trainer {
namespace {

namespace fs = std::filesystem;

// Header probes in flight while indexing. A probe reads a few hundred bytes;
// with a cold page cache it waits on the disk (or a network file system),
// and 16 reads at once keep the device busy where one at a time would leave
// it idle between them. Warm, they are CPU-bound, and the threads beyond the
// cores cost little.
constexpr int kProbeThreads = 16;

// The absolute, normalised form of `dir`: what names its index in a cache.
std::string AbsoluteDir(const std::string& dir) {
  std::string out = fs::absolute(dir).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

std::string Joined(const std::vector<std::string>& paths) {
  std::string out;
  for (const std::string& p : paths) out += (out.empty() ? "" : " or ") + p;
  return out;
}

IndexPlaces PlacesOf(const std::string& absolute, const ImageIndexOptions& options,
                     std::ostream& log) {
  if (!options.index_dir.empty()) return PlacesFor(absolute, false, options.index_dir, "");
  const bool writable = DirectoryWritable(absolute);
  std::string cache;
  try {
    cache = ElasticCacheDir();
  } catch (const std::exception& e) {
    if (!writable) log << "warning: image-folder: no cache for the index: " << e.what() << "\n";
  }
  IndexPlaces places = PlacesFor(absolute, writable, "", cache);
  if (cache.empty()) places.read.resize(1);  // beside the data only
  return places;
}

// The builder's part: list, find or build, complete, write; under the lock.
ObtainedIndex FindOrBuild(const std::string& dir, int64_t image_size, const IndexPlaces& places,
                          std::ostream& log) {
  std::optional<IndexLock> lock;
  try {
    lock.emplace(places.write);
  } catch (const std::exception& e) {
    log << "warning: image-folder " << dir << ": " << e.what()
        << "; indexing without the lock (processes starting together may each index)\n";
  }
  FolderListing listing = ListImageFolder(dir);
  const std::string key = ListingKey(listing);
  std::vector<StoredIndex> stored = ReadIndexFiles(places.read);

  ObtainedIndex out;
  bool changed = false;
  StoredIndex* current = nullptr;
  StoredIndex* previous = nullptr;  // the one to learn from: where a new one goes, else any
  for (StoredIndex& s : stored) {
    if (!s.index) continue;
    if (s.index->key == key && current == nullptr) current = &s;
    if (previous == nullptr || s.path == places.write) previous = &s;
  }
  if (current != nullptr) {
    out.index = std::move(*current->index);
    out.source = IndexSource::kCurrent;
    out.path = current->path;
  } else {
    for (const StoredIndex& s : stored) {
      if (!s.index) {
        log << "image-folder " << dir << ": the index " << s.path << " cannot be used ("
            << s.problem << "); re-indexing\n";
      }
    }
    size_t files = 0;
    for (const ListedSplit& split : listing.splits) files += split.images.size();
    if (previous != nullptr) {
      log << "image-folder " << dir << ": the folder changed since it was indexed ("
          << Describe(DiffListings(previous->index->listing, listing)) << "); re-indexing " << files
          << " files\n";
    } else if (stored.empty()) {
      log << "image-folder " << dir << ": indexing " << files
          << " files, once: later processes read the index " << places.write << "\n";
    }
    std::string root = dir;
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    out.index = IndexListing(
        std::move(listing), previous != nullptr ? &*previous->index : nullptr,
        [&root](const std::string& path) { return ProbeImageHeader(root + "/" + path); },
        kProbeThreads);
    out.source = IndexSource::kBuilt;
    CountIndexBuilt();
    changed = true;
  }
  CheckEveryClassReadable(dir, out.index);
  if (out.index.StatisticsFor(image_size) == nullptr) {
    const PixelNormalizer normalizer =
        MeasureImageNormalization(ReadableImages(dir, out.index, 0), image_size);
    out.index.SetStatistics(ChannelStatistics{image_size, normalizer.mean(), normalizer.std()});
    changed = true;
  }
  if (changed) {
    try {
      WriteIndexFile(places.write, out.index);
      out.path = places.write;
    } catch (const std::exception& e) {
      log << "warning: image-folder " << dir << ": the index could not be kept (" << e.what()
          << "); every process of the job lists and probes the folder itself (--image-index-dir "
             "names a writable place)\n";
      out.path.clear();
    }
  }
  return out;
}

}  // namespace

const char* ToString(IndexSource source) {
  switch (source) {
    case IndexSource::kPinned:
      return "pinned";
    case IndexSource::kCurrent:
      return "current";
    case IndexSource::kBuilt:
      return "built";
  }
  return "?";
}

ViewedIndex LoadImageIndex(const std::string& dir, int64_t image_size,
                           const ImageIndexOptions& options, std::ostream& log) {
  if (!options.pinned_key.empty()) {
    const IndexPlaces places = PlacesOf(AbsoluteDir(dir), options, log);
    for (const std::string& path : places.read) {
      std::error_code ec;
      if (!fs::exists(path, ec)) continue;
      try {
        auto file = std::make_shared<const MappedFile>(path, MappedFile::Access::kSequential);
        const char* bytes = reinterpret_cast<const char*>(file->data());
        IndexView view = ViewIndex(std::string_view(bytes, file->size()));
        if (view.key != options.pinned_key || view.StatisticsFor(image_size) == nullptr) continue;
        file->Advise(MappedFile::Access::kRandom);  // from now on, samples in shuffled order
        return ViewedIndex{std::move(file), bytes, std::move(view), IndexSource::kPinned, path};
      } catch (const std::exception&) {
        // Unusable here: ObtainImageIndex reads it again and says why.
      }
    }
  }
  ObtainedIndex obtained = ObtainImageIndex(dir, image_size, options, log);
  auto encoded = std::make_shared<const std::string>(EncodeIndex(obtained.index));
  ViewedIndex viewed;
  viewed.view = ViewIndex(*encoded);
  viewed.bytes = encoded->data();
  viewed.owner = std::move(encoded);
  viewed.source = obtained.source;
  viewed.path = std::move(obtained.path);
  return viewed;
}

ObtainedIndex ObtainImageIndex(const std::string& dir, int64_t image_size,
                               const ImageIndexOptions& options, std::ostream& log) {
  const IndexPlaces places = PlacesOf(AbsoluteDir(dir), options, log);
  if (!options.pinned_key.empty()) {
    std::string seen;
    for (StoredIndex& s : ReadIndexFiles(places.read)) {
      if (s.index && s.index->key == options.pinned_key &&
          s.index->StatisticsFor(image_size) != nullptr) {
        return ObtainedIndex{std::move(*s.index), IndexSource::kPinned, s.path};
      }
      seen += "; " + s.path + (s.index ? " is the index " + s.index->key : ": " + s.problem);
    }
    log << "image-folder " << dir << ": the job's index " << options.pinned_key << " is not in "
        << Joined(places.read) << seen << "; indexing the folder on this machine\n";
  }
  ObtainedIndex obtained = FindOrBuild(dir, image_size, places, log);
  if (!options.pinned_key.empty() && obtained.index.key != options.pinned_key) {
    throw std::runtime_error(
        "image-folder: " + dir + " here is not the folder the job indexed: its listing's key is " +
        obtained.index.key + ", the job's index is " + options.pinned_key +
        " (the files changed since the job started, or this machine holds another copy); every "
        "process of a job must read the same files");
  }
  return obtained;
}

}  // namespace elastic::trainer
