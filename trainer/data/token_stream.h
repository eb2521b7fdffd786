// A language model's training data as nanoGPT keeps it: one flat file of
// token ids per split (train.bin, val.bin; little-endian uint16 or uint32, no
// header) and a meta.json that says which and how many ids there are. The
// files are memory-mapped, never read into memory: a 10 GB train.bin costs
// address space, and resident memory only for the pages the windows touch.
//
// A sample is a window of context + 1 consecutive tokens: the model reads the
// first `context` and predicts each one's successor (targets are the inputs
// shifted by one token). tools/prepare_tokens.py writes the files for tiny
// Shakespeare at character level.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/data/examples.h"
#include "trainer/data/mapped_file.h"

namespace elastic::trainer {

// DIR/meta.json, e.g. {"vocab_size": 65, "dtype": "uint16"}. Other keys (the
// "itos" that tools/prepare_tokens.py writes) are allowed and ignored.
struct TokenFileInfo {
  int width = 2;           // bytes per token: 2 for "uint16", 4 for "uint32"
  int64_t vocab_size = 0;  // every token id is in [0, vocab_size)
};

// Reads and checks `path` (a meta.json): a JSON object whose "vocab_size" is a
// positive integer that the dtype can hold (at most 65536 for uint16, 2^32 for
// uint32) and whose "dtype" is "uint16" or "uint32". Throws
// std::runtime_error naming the file, the problem and what it must contain.
TokenFileInfo ReadTokenFileInfo(const std::string& path);

// "uint16" or "uint32", the dtype of a token width of 2 or 4 bytes.
std::string TokenDtypeName(int width);

// How a TokenFile's pages will be read, passed to madvise as a hint.
enum class TokenAccess {
  kRandom,      // shuffled training windows: readahead would fetch pages no window wants yet
  kSequential,  // evaluation reads the windows in order: normal readahead helps
};

// One file of tokens, mapped read-only (mapped_file.h). Move-only; unmaps
// when it goes away. Reading is const and safe from any number of threads.
class TokenFile {
 public:
  // Maps `path`, whose tokens are `width` (2 or 4) bytes each. Throws
  // std::runtime_error naming the path for a missing, unreadable or empty
  // file, or one whose size is not a multiple of the width; and
  // std::invalid_argument for a width other than 2 or 4.
  TokenFile(std::string path, int width, TokenAccess access = TokenAccess::kRandom);

  const std::string& path() const { return file_.path(); }
  int width() const { return width_; }
  int64_t size() const { return tokens_; }  // in tokens, at least 1

  // Token `i`. Throws std::out_of_range outside [0, size()).
  int64_t Token(int64_t i) const;

  // Copies tokens [first, first + count) into `out`, widened to int64, and
  // returns the offset (in the file) of the first of them that is not below
  // `limit`, or -1 when all are: the check is one comparison per token while
  // it is copied. Throws std::out_of_range unless the range is in the file.
  int64_t Copy(int64_t first, int64_t count, int64_t limit, int64_t* out) const;

 private:
  int width_ = 2;  // before file_: a bad width is reported before the file is opened
  MappedFile file_;
  int64_t tokens_ = 0;
};

// The windows of context + 1 tokens of one TokenFile as Examples: inputs
// int64 [B, context] (window tokens 0..context-1), targets int64 [B, context]
// (window tokens 1..context), the next-token objective.
//
// Windows of one epoch are cut without overlap, with stride `context`
// (window i starts at offset + i * context; consecutive windows share the one
// token that is the last target of one and the first input of the next).
//
// Training (shifting_offset true): the offset is drawn in [0, context) from
// (seed, epoch), so each epoch cuts the stream at different places and a
// token is not always at the same position in its window; the same (seed,
// epoch) always gives the same cut. size() is (tokens - context) / context,
// the same for every epoch: with any offset every window fits.
//
// Evaluation (shifting_offset false): the offset is always 0, so every epoch
// scores the same windows, and size() is (tokens - 1) / context.
//
// The cut depends only on the constructor's seed and the request's epoch:
// BatchRequest::seed and ::augment are not used, so the evaluation loader's
// options cannot move the validation windows.
//
// Token ids are checked against vocab_size in Get, on every token it copies,
// and an id out of range is a std::runtime_error naming the file, the token's
// offset, the id and the vocab size. Why not scan the whole file when it is
// opened: for a 10 GB train.bin that reads 10 GB (seconds to minutes, on every
// worker, and it pulls the file into memory), while the check in Get costs
// one comparison per token copied and covers exactly the tokens trained on.
class TokenWindows : public Examples {
 public:
  // Throws std::invalid_argument for context < 1 or vocab_size < 1, and
  // std::runtime_error naming the file when it holds no window of `context`.
  TokenWindows(std::string name, std::shared_ptr<const TokenFile> file, int64_t vocab_size,
               int64_t context, bool shifting_offset, uint64_t seed);

  std::string name() const override { return name_; }
  int64_t size() const override { return windows_; }
  // Each index must be in [0, size()) (std::out_of_range otherwise).
  Batch Get(const std::vector<int64_t>& indices, const BatchRequest& request) const override;

  int64_t context() const { return context_; }
  const TokenFile& file() const { return *file_; }
  // Where `epoch`'s cut starts: in [0, context), 0 without shifting_offset.
  int64_t Offset(uint64_t epoch) const;
  // The first token of window `index` in `epoch`.
  int64_t WindowStart(int64_t index, uint64_t epoch) const {
    return Offset(epoch) + index * context_;
  }

 private:
  std::string name_;
  std::shared_ptr<const TokenFile> file_;
  int64_t vocab_size_;
  int64_t context_;
  bool shifting_offset_;
  uint64_t seed_;
  int64_t windows_ = 0;
};

// `--dataset tokens`: both splits of a token data set.
struct TokenData {
  std::shared_ptr<const Examples> train;  // TokenWindows, shifting offset
  std::shared_ptr<const Examples> val;    // TokenWindows, offset 0
  TokenFileInfo info;
};

// Reads `dir`/meta.json and maps `dir`/train.bin and `dir`/val.bin, cut into
// windows of `context` (+ 1) tokens; `seed` draws the training offsets.
// Throws std::runtime_error naming the file and the problem: a missing file,
// a bad meta.json, a file too short for one window (TokenWindows).
TokenData LoadTokenData(const std::string& dir, int64_t context, uint64_t seed);

}  // namespace elastic::trainer
