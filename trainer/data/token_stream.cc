#include "trainer/data/token_stream.h"

#include <torch/torch.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace elastic::trainer {
namespace {

// The files are little-endian, as numpy's tofile writes them on the machines
// that prepare them; the mapping is read as native integers.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are little-endian");

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

std::string ErrnoText() { return std::strerror(errno); }

const char kMetaExample[] = R"({"vocab_size": 65, "dtype": "uint16"})";

// A 64-bit mix (splitmix64's finaliser): nearby seeds and epochs give unrelated offsets.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

template <typename Stored>
int64_t CopyAs(const void* data, int64_t first, int64_t count, int64_t limit, int64_t* out) {
  const Stored* in = static_cast<const Stored*>(data) + first;
  int64_t bad = -1;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t id = in[i];
    out[i] = id;
    if (id >= limit && bad < 0) bad = first + i;
  }
  return bad;
}

}  // namespace

std::string TokenDtypeName(int width) {
  if (width == 2) return "uint16";
  if (width == 4) return "uint32";
  throw std::invalid_argument("token width " + std::to_string(width) + " is not 2 or 4 bytes");
}

TokenFileInfo ReadTokenFileInfo(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    Fail(path, std::string("no such file; --dataset tokens reads the vocabulary size and the token "
                           "dtype from it: ") +
                   kMetaExample +
                   " (nanoGPT's prepare.py writes meta.pkl instead; tools/prepare_tokens.py writes "
                   "meta.json)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail(path, "cannot open (" + ErrnoText() + ")");
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    Fail(path, std::string("not valid JSON (") + e.what() + "); it must be like " + kMetaExample);
  }
  if (!meta.is_object()) Fail(path, std::string("not a JSON object like ") + kMetaExample);

  const auto vocab = meta.find("vocab_size");
  if (vocab == meta.end()) Fail(path, std::string("has no \"vocab_size\": ") + kMetaExample);
  // Unsigned: a positive integer (0 and fractions are refused below and here).
  if (!vocab->is_number_unsigned() || vocab->get<uint64_t>() == 0) {
    Fail(path, "\"vocab_size\" must be a positive integer, not " + vocab->dump());
  }
  const auto dtype = meta.find("dtype");
  if (dtype == meta.end()) {
    Fail(path, std::string("has no \"dtype\" (\"uint16\" or \"uint32\"): ") + kMetaExample);
  }
  if (!dtype->is_string() || (*dtype != "uint16" && *dtype != "uint32")) {
    Fail(path, "\"dtype\" must be \"uint16\" or \"uint32\", not " + dtype->dump());
  }
  TokenFileInfo info;
  info.width = *dtype == "uint16" ? 2 : 4;
  const uint64_t ids = uint64_t{1} << (8 * info.width);  // how many ids the dtype can hold
  const uint64_t vocab_size = vocab->get<uint64_t>();
  if (vocab_size > ids) {
    // The ids above the dtype's range were truncated when the files were written.
    Fail(path, "\"vocab_size\" " + std::to_string(vocab_size) + " does not fit in dtype " +
                   dtype->get<std::string>() + " (at most " + std::to_string(ids) + " ids)" +
                   (info.width == 2 ? "; write the tokens as uint32" : ""));
  }
  info.vocab_size = static_cast<int64_t>(vocab_size);
  return info;
}

namespace {

// Checks the width before the file is mapped: a bad width is the caller's
// mistake (std::invalid_argument), whatever the file holds.
int CheckedWidth(int width) {
  TokenDtypeName(width);
  return width;
}

}  // namespace

TokenFile::TokenFile(std::string path, int width, TokenAccess access)
    : width_(CheckedWidth(width)),
      file_(std::move(path), access == TokenAccess::kRandom ? MappedFile::Access::kRandom
                                                            : MappedFile::Access::kNormal) {
  if (file_.size() == 0) Fail(file_.path(), "is empty (no tokens)");
  if (file_.size() % width_ != 0) {
    Fail(file_.path(), "has " + std::to_string(file_.size()) + " bytes, not a multiple of the " +
                           std::to_string(width_) + "-byte tokens of dtype " +
                           TokenDtypeName(width_) + " (meta.json)");
  }
  tokens_ = static_cast<int64_t>(file_.size() / width_);
}

int64_t TokenFile::Token(int64_t i) const {
  if (i < 0 || i >= tokens_) {
    throw std::out_of_range(path() + ": token " + std::to_string(i) + " is outside its " +
                            std::to_string(tokens_) + " tokens");
  }
  const void* data = file_.data();
  return width_ == 2 ? static_cast<const uint16_t*>(data)[i]
                     : static_cast<const uint32_t*>(data)[i];
}

int64_t TokenFile::Copy(int64_t first, int64_t count, int64_t limit, int64_t* out) const {
  if (first < 0 || count < 0 || first > tokens_ - count) {
    throw std::out_of_range(path() + ": tokens [" + std::to_string(first) + ", " +
                            std::to_string(first + count) + ") are outside its " +
                            std::to_string(tokens_) + " tokens");
  }
  return width_ == 2 ? CopyAs<uint16_t>(file_.data(), first, count, limit, out)
                     : CopyAs<uint32_t>(file_.data(), first, count, limit, out);
}

TokenWindows::TokenWindows(std::string name, std::shared_ptr<const TokenFile> file,
                           int64_t vocab_size, int64_t context, bool shifting_offset, uint64_t seed)
    : name_(std::move(name)),
      file_(std::move(file)),
      vocab_size_(vocab_size),
      context_(context),
      shifting_offset_(shifting_offset),
      seed_(seed) {
  if (file_ == nullptr) throw std::invalid_argument(name_ + ": no token file");
  if (context_ < 1) {
    throw std::invalid_argument("--context must be at least 1, not " + std::to_string(context_));
  }
  if (vocab_size_ < 1) {
    throw std::invalid_argument(name_ + ": vocab size must be at least 1, not " +
                                std::to_string(vocab_size_));
  }
  const int64_t tokens = file_->size();
  const std::string c = std::to_string(context_);
  if (tokens < context_ + 1) {
    Fail(file_->path(),
         "--context " + c + " is too long for its " + std::to_string(tokens) +
             " tokens: a window needs context + 1 = " + std::to_string(context_ + 1) + " tokens");
  }
  // Every window of every epoch must fit: the last one of the cut at the
  // largest offset (context - 1) ends at n * context + context.
  windows_ = shifting_offset_ ? (tokens - context_) / context_ : (tokens - 1) / context_;
  if (windows_ == 0) {
    Fail(file_->path(), "--context " + c + " is too long for its " + std::to_string(tokens) +
                            " tokens: a training window starts at an offset in [0, " + c +
                            ") that changes each epoch, so it needs up to 2 * context = " +
                            std::to_string(2 * context_) + " tokens");
  }
}

int64_t TokenWindows::Offset(uint64_t epoch) const {
  if (!shifting_offset_) return 0;
  return static_cast<int64_t>(SplitMix64(SplitMix64(seed_) ^ epoch) %
                              static_cast<uint64_t>(context_));
}

Batch TokenWindows::Get(const std::vector<int64_t>& indices, const BatchRequest& request) const {
  const int64_t b = static_cast<int64_t>(indices.size());
  const int64_t offset = Offset(request.epoch);
  Batch batch;
  batch.inputs = torch::empty({b, context_}, torch::kInt64);
  batch.targets = torch::empty({b, context_}, torch::kInt64);
  int64_t* inputs = batch.inputs.data_ptr<int64_t>();
  int64_t* targets = batch.targets.data_ptr<int64_t>();
  for (int64_t row = 0; row < b; ++row) {
    const int64_t index = indices[row];
    if (index < 0 || index >= windows_) {
      throw std::out_of_range(name_ + ": window " + std::to_string(index) + " is outside [0, " +
                              std::to_string(windows_) + ")");
    }
    const int64_t start = offset + index * context_;
    int64_t* in = inputs + row * context_;
    int64_t* target = targets + row * context_;
    // Each token of the window is read from the file and checked once: the
    // targets are the inputs shifted by one, plus the window's last token.
    int64_t bad = file_->Copy(start, context_, vocab_size_, in);
    std::memcpy(target, in + 1, (context_ - 1) * sizeof(int64_t));
    const int64_t last = file_->Copy(start + context_, 1, vocab_size_, target + context_ - 1);
    if (bad < 0) bad = last;
    if (bad >= 0) {
      Fail(file_->path(), "token " + std::to_string(file_->Token(bad)) + " at offset " +
                              std::to_string(bad) + " is not below the vocab size " +
                              std::to_string(vocab_size_) + " (meta.json)");
    }
  }
  batch.indices = indices;
  return batch;
}

TokenData LoadTokenData(const std::string& dir, int64_t context, uint64_t seed) {
  TokenData data;
  data.info = ReadTokenFileInfo(dir + "/meta.json");
  for (const char* name : {"train.bin", "val.bin"}) {
    const std::string path = dir + "/" + name;
    if (!std::filesystem::exists(path)) {
      Fail(path,
           "no such file; --dataset tokens needs train.bin and val.bin, as nanoGPT's "
           "prepare.py writes them");
    }
  }
  auto train =
      std::make_shared<const TokenFile>(dir + "/train.bin", data.info.width, TokenAccess::kRandom);
  auto val = std::make_shared<const TokenFile>(dir + "/val.bin", data.info.width,
                                               TokenAccess::kSequential);
  data.train = std::make_shared<TokenWindows>("tokens-train", std::move(train),
                                              data.info.vocab_size, context, true, seed);
  data.val = std::make_shared<TokenWindows>("tokens-val", std::move(val), data.info.vocab_size,
                                            context, false, seed);
  return data;
}

}  // namespace elastic::trainer
