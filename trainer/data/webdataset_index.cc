#include "trainer/data/webdataset_index.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "trainer/data/index_codec.h"

namespace elastic::trainer {
namespace {

// "ELWDSIDX" and the format's version: a reader of another version rebuilds.
constexpr char kMagic[8] = {'E', 'L', 'W', 'D', 'S', 'I', 'D', 'X'};
constexpr uint32_t kVersion = 1;
// Bytes of one sample in the file: shard u32, offset u64, size u32, label u32.
constexpr size_t kSampleBytes = 4 + 8 + 4 + 4;
// A .cls member longer than this is not a class index; only its start is quoted.
constexpr size_t kQuotedLabel = 24;

bool IsImageExtension(const std::string& ext) {
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

std::string Quoted(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, kQuotedLabel)) {
    out += std::isprint(static_cast<unsigned char>(c)) ? std::string(1, c) : std::string("?");
  }
  return out + (text.size() > kQuotedLabel ? "...'" : "'");
}

std::string At(uint64_t offset) { return " at byte offset " + std::to_string(offset); }

// The members of one key being grouped into a sample.
class Group {
 public:
  Group(std::string shard, std::string key) : shard_(std::move(shard)), key_(std::move(key)) {}
  const std::string& key() const { return key_; }
  bool whole() const { return image_.has_value() && label_.has_value(); }

  void Add(const TarMember& member, const std::string& extension, std::string_view data) {
    if (IsImageExtension(extension)) {
      if (image_) Fail("has two images, " + image_->name + " and " + member.name, member);
      image_ = member;
    } else if (extension == "cls") {
      if (label_) Fail("has two labels, " + label_->name + " and " + member.name, member);
      const std::string why = ParseClassIndex(data, &label_value_);
      if (!why.empty()) {
        throw std::runtime_error(shard_ + ": " + member.name + At(member.header_offset) +
                                 " holds " + Quoted(data) + ", which " + why +
                                 ": a .cls member holds the sample's class index as decimal text");
      }
      label_ = member;
    } else {
      ++others_;
    }
  }

  // Adds the finished group to `out`: a sample, or ignored members.
  void Finish(ShardContents& out) const {
    if (whole()) {
      if (image_->size > UINT32_MAX) Fail("has an image of over 4 GiB", *image_);
      out.samples.push_back(
          ShardSample{0, image_->data_offset, static_cast<uint32_t>(image_->size), label_value_});
      out.ignored += others_;
    } else if (image_) {
      throw std::runtime_error(shard_ + ": sample '" + key_ + "' (" + image_->name +
                               At(image_->header_offset) + ") has no label: every image needs " +
                               key_ + ".cls beside it, holding its class index");
    } else if (label_) {
      throw std::runtime_error(shard_ + ": sample '" + key_ + "' (" + label_->name +
                               At(label_->header_offset) +
                               ") has a label but no .jpg, .jpeg or .png image");
    } else {
      out.ignored += others_;
    }
  }

 private:
  [[noreturn]] void Fail(const std::string& what, const TarMember& at) const {
    throw std::runtime_error(shard_ + ": sample '" + key_ + "'" + At(at.header_offset) + " " +
                             what);
  }

  std::string shard_;
  std::string key_;
  std::optional<TarMember> image_;
  std::optional<TarMember> label_;
  uint32_t label_value_ = 0;
  uint64_t others_ = 0;
};

// Where each shard's samples start in its split's sample list.
std::vector<uint64_t> FirstSamples(const ShardSplit& split) {
  std::vector<uint64_t> first(split.shards.size() + 1, 0);
  for (size_t s = 0; s < split.shards.size(); ++s)
    first[s + 1] = first[s] + split.shards[s].samples;
  return first;
}

bool SameShards(const ShardSplit& a, const ShardSplit& b) {
  if (a.name != b.name || a.shards.size() != b.shards.size()) return false;
  for (size_t s = 0; s < a.shards.size(); ++s) {
    if (a.shards[s].path != b.shards[s].path || a.shards[s].size != b.shards[s].size) return false;
  }
  return true;
}

}  // namespace

int64_t WebDatasetIndex::num_classes() const {
  int64_t classes = 0;
  if (splits.empty()) return 0;
  for (const ShardSample& s : splits[0].samples) classes = std::max<int64_t>(classes, s.label + 1);
  return classes;
}

const ChannelStatistics* WebDatasetIndex::StatisticsFor(int64_t image_size) const {
  for (const ChannelStatistics& s : statistics) {
    if (s.image_size == image_size) return &s;
  }
  return nullptr;
}

void WebDatasetIndex::SetStatistics(ChannelStatistics stats) {
  for (ChannelStatistics& s : statistics) {
    if (s.image_size == stats.image_size) {
      s = std::move(stats);
      return;
    }
  }
  statistics.push_back(std::move(stats));
}

std::string ShardListingKey(const std::vector<ShardSplit>& splits) {
  Sha256 sha;
  sha.Add(std::string("webdataset"));  // never the key of an image folder's listing
  sha.Add(static_cast<uint64_t>(splits.size()));
  for (const ShardSplit& split : splits) {
    sha.Add(split.name);
    sha.Add(static_cast<uint64_t>(split.shards.size()));
    for (const Shard& shard : split.shards) {
      sha.Add(shard.path);
      sha.Add(shard.size);
    }
  }
  return Hex(sha.Finish().substr(0, 16));
}

std::string DescribeShardChange(const std::vector<ShardSplit>& before,
                                const std::vector<ShardSplit>& after) {
  const auto sizes = [](const std::vector<ShardSplit>& splits) {
    std::unordered_map<std::string, uint64_t> out;
    for (const ShardSplit& split : splits) {
      for (const Shard& shard : split.shards) out.emplace(shard.path, shard.size);
    }
    return out;
  };
  const auto old_sizes = sizes(before);
  const auto new_sizes = sizes(after);
  int64_t added = 0, removed = 0, resized = 0;
  for (const auto& [path, size] : new_sizes) {
    const auto it = old_sizes.find(path);
    if (it == old_sizes.end()) {
      ++added;
    } else if (it->second != size) {
      ++resized;
    }
  }
  for (const auto& entry : old_sizes) removed += new_sizes.count(entry.first) == 0;
  return std::to_string(added) + (added == 1 ? " shard" : " shards") + " added, " +
         std::to_string(removed) + " removed, " + std::to_string(resized) + " changed in size";
}

bool SplitMemberName(const std::string& name, std::string* key, std::string* extension) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot == base) return false;
  *key = name.substr(0, dot);
  *extension = name.substr(dot + 1);
  std::transform(extension->begin(), extension->end(), extension->begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return true;
}

std::string ParseClassIndex(std::string_view text, uint32_t* label) {
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  if (text.empty() ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return "is not a decimal integer";
  }
  int64_t value = 0;
  for (char c : text) {
    value = value * 10 + (c - '0');
    if (value >= kMaxWebDatasetClasses) {
      return "is out of range 0.." + std::to_string(kMaxWebDatasetClasses - 1);
    }
  }
  *label = static_cast<uint32_t>(value);
  return "";
}

ShardContents GroupShardMembers(TarScanner& scanner) {
  ShardContents out;
  std::optional<Group> group;
  try {
    while (std::optional<TarMember> member = scanner.Next()) {
      std::string key, extension;
      if (!member->regular || !SplitMemberName(member->name, &key, &extension)) {
        ++out.ignored;  // WebDataset skips it without ending the sample
        continue;
      }
      if (!group || group->key() != key) {
        if (group) group->Finish(out);
        group.emplace(scanner.name(), key);
      }
      const bool label = extension == "cls";
      group->Add(*member, extension, label ? scanner.Data(*member) : std::string_view());
    }
    if (group) group->Finish(out);
  } catch (const TarError& e) {
    std::string member_key, extension;
    const bool cut_in_group = group && !e.member().empty() &&
                              SplitMemberName(e.member(), &member_key, &extension) &&
                              member_key == group->key();
    const size_t whole = out.samples.size() + (group && group->whole() ? 1 : 0);
    const std::string before =
        " " + std::to_string(whole) + (whole == 1 ? " sample" : " samples") + " before the cut";
    if (e.kind() == TarError::Kind::kCorrupt) {
      throw std::runtime_error(scanner.name() + ": " + e.reason() + ";" + before +
                               " are readable, the rest of the shard is not (copy it again)");
    }
    std::string lost;
    if (group && !group->whole()) {
      lost = "sample '" + group->key() + "' at the cut is lost, and whatever followed it";
    } else if (!e.member().empty() && !cut_in_group) {
      lost = "the sample of '" + e.member() + "' at the cut is lost, and whatever followed it";
    } else {
      lost = "whatever followed them is lost";
    }
    throw std::runtime_error(scanner.name() + " is truncated: it " + e.reason() + "." + before +
                             " are whole; " + lost + " (copy the shard again)");
  }
  out.headers_read = scanner.headers_read();
  return out;
}

WebDatasetIndex IndexShards(std::vector<ShardSplit> listing, const WebDatasetIndex* previous,
                            const ShardScan& scan) {
  // What the older index knows: path -> (size, its samples, ignored members).
  struct Known {
    uint64_t size;
    const ShardSample* samples;
    uint64_t count;
    uint64_t ignored;
  };
  std::unordered_map<std::string, Known> known;
  if (previous != nullptr) {
    for (const ShardSplit& split : previous->splits) {
      const std::vector<uint64_t> first = FirstSamples(split);
      for (size_t s = 0; s < split.shards.size(); ++s) {
        const Shard& shard = split.shards[s];
        known.emplace(shard.path, Known{shard.size, split.samples.data() + first[s], shard.samples,
                                        shard.ignored});
      }
    }
  }
  WebDatasetIndex index;
  index.key = ShardListingKey(listing);
  for (ShardSplit& split : listing) {
    split.samples.clear();
    for (size_t s = 0; s < split.shards.size(); ++s) {
      Shard& shard = split.shards[s];
      const auto it = known.find(shard.path);
      std::vector<ShardSample> samples;
      if (it != known.end() && it->second.size == shard.size) {
        samples.assign(it->second.samples, it->second.samples + it->second.count);
        shard.ignored = it->second.ignored;
      } else {
        ShardContents contents = scan(shard.path);
        samples = std::move(contents.samples);
        shard.ignored = contents.ignored;
      }
      shard.samples = samples.size();
      for (ShardSample& sample : samples) {
        sample.shard = static_cast<uint32_t>(s);
        split.samples.push_back(sample);
      }
    }
    if (split.samples.empty()) {
      throw std::runtime_error(split.name + "/ holds no sample (no KEY.jpg, KEY.jpeg or KEY.png " +
                               "with its KEY.cls in its " + std::to_string(split.shards.size()) +
                               " shards)");
    }
  }
  index.splits = std::move(listing);
  const int64_t classes = index.num_classes();
  for (size_t k = 1; k < index.splits.size(); ++k) {
    const ShardSplit& split = index.splits[k];
    for (const ShardSample& sample : split.samples) {
      if (sample.label < classes) continue;
      throw std::runtime_error(split.shards[sample.shard].path + ": the sample whose image is" +
                               At(sample.offset) + " has label " + std::to_string(sample.label) +
                               ", not a class of the training split (its labels are 0.." +
                               std::to_string(classes - 1) + ")");
    }
  }
  if (previous != nullptr && !previous->splits.empty() && !index.splits.empty() &&
      SameShards(previous->splits[0], index.splits[0])) {
    index.statistics = previous->statistics;
  }
  return index;
}

std::string EncodeWebDatasetIndex(const WebDatasetIndex& index) {
  IndexWriter body;
  body.Str(index.key);
  body.U64(index.splits.size());
  for (const ShardSplit& split : index.splits) {
    body.Str(split.name);
    body.U64(split.shards.size());
    for (const Shard& shard : split.shards) {
      body.Str(shard.path);
      body.U64(shard.size);
      body.U64(shard.samples);
      body.U64(shard.ignored);
    }
    body.U64(split.samples.size());
    for (const ShardSample& sample : split.samples) {
      body.U32(sample.shard);
      body.U64(sample.offset);
      body.U32(sample.size);
      body.U32(sample.label);
    }
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
  return SealIndex(kMagic, kVersion, body.out());
}

WebDatasetIndex DecodeWebDatasetIndex(std::string_view bytes) {
  IndexReader in(UnsealIndex(bytes, kMagic, kVersion, "a webdataset index"), kIndexHeaderBytes);
  WebDatasetIndex index;
  index.key = in.Str();
  const uint64_t splits = in.Count(4 + 8 + 8);
  for (uint64_t k = 0; k < splits; ++k) {
    ShardSplit split;
    split.name = in.Str();
    const uint64_t shards = in.Count(4 + 8 + 8 + 8);
    uint64_t total = 0;
    for (uint64_t s = 0; s < shards; ++s) {
      Shard shard;
      shard.path = in.Str();
      shard.size = in.U64();
      shard.samples = in.U64();
      shard.ignored = in.U64();
      total += shard.samples;
      split.shards.push_back(std::move(shard));
    }
    const uint64_t samples = in.Count(kSampleBytes);
    if (samples != total) {
      throw IndexFormatError("damaged: split " + split.name + " lists " + std::to_string(samples) +
                             " samples, its shards " + std::to_string(total));
    }
    split.samples.reserve(samples);
    const std::vector<uint64_t> first = FirstSamples(split);
    for (uint64_t i = 0; i < samples; ++i) {
      ShardSample sample;
      sample.shard = in.U32();
      sample.offset = in.U64();
      sample.size = in.U32();
      sample.label = in.U32();
      // Samples lie shard by shard: sample i is in the shard whose range holds i.
      if (sample.shard >= shards || i < first[sample.shard] || i >= first[sample.shard + 1] ||
          sample.label >= kMaxWebDatasetClasses ||
          sample.offset + sample.size > split.shards[sample.shard].size) {
        throw IndexFormatError("damaged: sample " + std::to_string(i) + " of split " + split.name +
                               " is not in its shard's range");
      }
      split.samples.push_back(sample);
    }
    index.splits.push_back(std::move(split));
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
    index.statistics.push_back(std::move(stats));
  }
  if (!in.done()) {
    throw IndexFormatError(
        "damaged: " + std::to_string(bytes.size() - kIndexHeaderBytes - in.at()) +
        " bytes after the last entry");
  }
  return index;
}

}  // namespace elastic::trainer
