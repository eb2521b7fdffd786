#include "trainer/data/token_stream.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "trainer/data/test_files.h"
#include "trainer/sampler.h"

namespace elastic::trainer {
namespace {

using testing::ScratchDir;
using testing::WriteFile;

// Tokens as numpy's tofile writes them: little-endian, no header.
template <typename T>
void WriteTokens(const std::string& path, const std::vector<T>& tokens) {
  std::vector<uint8_t> bytes(tokens.size() * sizeof(T));
  std::memcpy(bytes.data(), tokens.data(), bytes.size());
  WriteFile(path, bytes);
}

void WriteText(const std::string& path, const std::string& text) {
  WriteFile(path, std::vector<uint8_t>(text.begin(), text.end()));
}

void WriteMeta(const std::string& dir, int64_t vocab_size, const std::string& dtype) {
  WriteText(dir + "/meta.json",
            "{\"vocab_size\": " + std::to_string(vocab_size) + ", \"dtype\": \"" + dtype + "\"}");
}

// n uint16 tokens that differ from their neighbours: (i * 7 + 3) % vocab.
std::vector<uint16_t> Stream(int64_t n, int64_t vocab = 65) {
  std::vector<uint16_t> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint16_t>((i * 7 + 3) % vocab);
  return out;
}

std::shared_ptr<const TokenFile> Open(const std::string& path, int width = 2) {
  return std::make_shared<const TokenFile>(path, width);
}

// The message of the std::runtime_error that `f` throws, or "" when it throws none.
std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "'" << (text) << "'"

BatchRequest Epoch(uint64_t epoch) {
  BatchRequest request;
  request.epoch = epoch;
  return request;
}

TEST(ReadTokenFileInfo, ReadsVocabSizeAndDtype) {
  ScratchDir dir;
  WriteMeta(dir.path(), 65, "uint16");
  TokenFileInfo info = ReadTokenFileInfo(dir / "meta.json");
  EXPECT_EQ(info.width, 2);
  EXPECT_EQ(info.vocab_size, 65);
  WriteMeta(dir.path(), 100277, "uint32");
  info = ReadTokenFileInfo(dir / "meta.json");
  EXPECT_EQ(info.width, 4);
  EXPECT_EQ(info.vocab_size, 100277);
  WriteMeta(dir.path(), 65536, "uint16");  // ids 0..65535: exactly what uint16 holds
  EXPECT_EQ(ReadTokenFileInfo(dir / "meta.json").vocab_size, 65536);
  EXPECT_EQ(TokenDtypeName(2), "uint16");
  EXPECT_EQ(TokenDtypeName(4), "uint32");
}

TEST(ReadTokenFileInfo, IgnoresOtherKeys) {
  ScratchDir dir;
  WriteText(dir / "meta.json",
            R"({"itos": ["\n", " ", "\"", "\\", "}", "\u00e9"], "nested": {"a": [1, {"b": "]"}]},
                "dtype": "uint16", "stoi": {"}": 4}, "vocab_size": 6})");
  const TokenFileInfo info = ReadTokenFileInfo(dir / "meta.json");
  EXPECT_EQ(info.width, 2);
  EXPECT_EQ(info.vocab_size, 6);
}

TEST(ReadTokenFileInfo, RejectsMissingOrMalformedMeta) {
  ScratchDir dir;
  const std::string path = dir / "meta.json";
  std::string error = ErrorOf([&] { ReadTokenFileInfo(path); });
  EXPECT_CONTAINS(error, path + ": no such file");
  EXPECT_CONTAINS(error, R"({"vocab_size": 65, "dtype": "uint16"})");

  struct Case {
    std::string text;
    std::string problem;
  };
  const std::vector<Case> cases = {
      {"", "not valid JSON"},
      {R"({"vocab_size": 65, "dtype": "uint16")", "not valid JSON"},
      {R"({"vocab_size": 65, "dtype": "uint16"} x)", "not valid JSON"},
      {R"([65, "uint16"])", "not a JSON object"},
      {R"({"dtype": "uint16"})", "has no \"vocab_size\""},
      {R"({"vocab_size": 65})", "has no \"dtype\""},
      {R"({"vocab_size": "65", "dtype": "uint16"})", "\"vocab_size\" must be a positive integer"},
      {R"({"vocab_size": 0, "dtype": "uint16"})", "\"vocab_size\" must be a positive integer"},
      {R"({"vocab_size": -5, "dtype": "uint16"})", "\"vocab_size\" must be a positive integer"},
      {R"({"vocab_size": 65.5, "dtype": "uint16"})", "\"vocab_size\" must be a positive integer"},
      {R"({"vocab_size": 65, "dtype": "int16"})",
       "\"dtype\" must be \"uint16\" or \"uint32\", not \"int16\""},
      {R"({"vocab_size": 65, "dtype": "uint8"})", "\"dtype\" must be \"uint16\" or \"uint32\""},
      {R"({"vocab_size": 65, "dtype": 16})", "\"dtype\" must be \"uint16\" or \"uint32\""},
      {R"({"vocab_size": 65537, "dtype": "uint16"})",
       "\"vocab_size\" 65537 does not fit in dtype uint16"},
      {R"({"vocab_size": 4294967297, "dtype": "uint32"})",
       "\"vocab_size\" 4294967297 does not fit in dtype uint32"},
  };
  for (const Case& c : cases) {
    WriteText(path, c.text);
    error = ErrorOf([&] { ReadTokenFileInfo(path); });
    EXPECT_CONTAINS(error, path + ": ");
    EXPECT_CONTAINS(error, c.problem);
  }
}

TEST(TokenFile, ReadsUint16) {
  ScratchDir dir;
  const std::vector<uint16_t> tokens = {0, 1, 64, 65535, 7};
  WriteTokens(dir / "train.bin", tokens);
  const TokenFile file(dir / "train.bin", 2);
  EXPECT_EQ(file.path(), dir / "train.bin");
  EXPECT_EQ(file.width(), 2);
  ASSERT_EQ(file.size(), 5);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(file.Token(i), tokens[i]);
  int64_t out[3];
  EXPECT_EQ(file.Copy(1, 3, 65536, out), -1);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[2], 65535);
  EXPECT_EQ(file.Copy(1, 3, 65, out), 3);  // the first id >= 65 is at offset 3
  EXPECT_THROW(file.Token(5), std::out_of_range);
  EXPECT_THROW(file.Token(-1), std::out_of_range);
  EXPECT_THROW(file.Copy(3, 3, 65, out), std::out_of_range);
}

TEST(TokenFile, ReadsUint32AboveUint16) {
  ScratchDir dir;
  const std::vector<uint32_t> tokens = {70000, 0, 4000000000u, 65536, 100276};
  WriteTokens(dir / "train.bin", tokens);
  const TokenFile file(dir / "train.bin", 4);
  ASSERT_EQ(file.size(), 5);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(file.Token(i), tokens[i]);
  int64_t out[5];
  EXPECT_EQ(file.Copy(0, 5, 4000000001LL, out), -1);
  EXPECT_EQ(out[2], 4000000000LL);
}

TEST(TokenFile, MovesTheMapping) {
  ScratchDir dir;
  WriteTokens(dir / "a.bin", Stream(10));
  WriteTokens(dir / "b.bin", Stream(20));
  TokenFile a(dir / "a.bin", 2);
  TokenFile moved(std::move(a));
  EXPECT_EQ(moved.size(), 10);
  EXPECT_EQ(moved.Token(9), Stream(10)[9]);
  TokenFile b(dir / "b.bin", 2);
  b = std::move(moved);  // b's own mapping is released
  EXPECT_EQ(b.size(), 10);
  EXPECT_EQ(b.path(), dir / "a.bin");
}

TEST(TokenFile, RejectsMissingEmptyAndRaggedFiles) {
  ScratchDir dir;
  std::string error = ErrorOf([&] { TokenFile(dir / "val.bin", 2); });
  EXPECT_EQ(error, dir / "val.bin" + ": no such file");

  WriteFile(dir / "empty.bin", {});
  error = ErrorOf([&] { TokenFile(dir / "empty.bin", 2); });
  EXPECT_CONTAINS(error, dir / "empty.bin" + ": is empty");

  WriteFile(dir / "odd.bin", std::vector<uint8_t>(1001, 1));
  error = ErrorOf([&] { TokenFile(dir / "odd.bin", 2); });
  EXPECT_EQ(error, dir / "odd.bin" +
                       ": has 1001 bytes, not a multiple of the 2-byte tokens of dtype uint16 "
                       "(meta.json)");
  WriteFile(dir / "six.bin", std::vector<uint8_t>(6, 1));
  error = ErrorOf([&] { TokenFile(dir / "six.bin", 4); });
  EXPECT_CONTAINS(error, "has 6 bytes, not a multiple of the 4-byte tokens of dtype uint32");

  error = ErrorOf([&] { TokenFile(dir.path(), 2); });
  EXPECT_CONTAINS(error, dir.path() + ": not a regular file");
  EXPECT_THROW(TokenFile(dir / "six.bin", 3), std::invalid_argument);
}

TEST(TokenWindows, SizeIsTheSameForEveryEpoch) {
  ScratchDir dir;
  struct Case {
    int64_t tokens, context, train, eval;
  };
  for (const Case& c :
       {Case{1000, 10, 99, 99}, Case{1001, 10, 99, 100}, Case{20, 10, 1, 1}, Case{19, 10, 0, 1},
        Case{11, 10, 0, 1}, Case{1, 1, 0, 0}, Case{2, 1, 1, 1}, Case{1115394, 256, 4356, 4357}}) {
    WriteTokens(dir / "t.bin", Stream(c.tokens));
    const auto file = Open(dir / "t.bin");
    SCOPED_TRACE(std::to_string(c.tokens) + " tokens, context " + std::to_string(c.context));
    // The formulas: (tokens - context) / context windows when the offset
    // shifts, (tokens - 1) / context at offset 0.
    EXPECT_EQ(c.train, (c.tokens - c.context) / c.context);
    EXPECT_EQ(c.eval, (c.tokens - 1) / c.context);
    if (c.train > 0) {
      const TokenWindows train("train", file, 65, c.context, true, 5);
      EXPECT_EQ(train.size(), c.train);
      // The last window fits at every epoch's offset.
      for (uint64_t epoch = 0; epoch < 50; ++epoch) {
        EXPECT_LE(train.WindowStart(train.size() - 1, epoch) + c.context + 1, c.tokens);
        if (c.tokens < 5000) {
          EXPECT_NO_THROW(train.Get({train.size() - 1}, Epoch(epoch)));
        }
      }
    }
    if (c.eval > 0) {
      const TokenWindows eval("val", file, 65, c.context, false, 5);
      EXPECT_EQ(eval.size(), c.eval);
      EXPECT_NO_THROW(eval.Get({eval.size() - 1}, Epoch(3)));
    }
  }
}

TEST(TokenWindows, TargetsAreTheInputsShiftedByOne) {
  ScratchDir dir;
  const std::vector<uint16_t> tokens = Stream(1000);
  WriteTokens(dir / "train.bin", tokens);
  const TokenWindows windows("train", Open(dir / "train.bin"), 65, 16, true, 42);
  const std::vector<int64_t> indices = {3, 0, 60, 3};
  for (uint64_t epoch : {0, 1, 7}) {
    const Batch batch = windows.Get(indices, Epoch(epoch));
    EXPECT_EQ(batch.indices, indices);
    ASSERT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{4, 16}));
    ASSERT_EQ(batch.targets.sizes(), (std::vector<int64_t>{4, 16}));
    EXPECT_EQ(batch.inputs.scalar_type(), torch::kInt64);
    EXPECT_EQ(batch.targets.scalar_type(), torch::kInt64);
    EXPECT_TRUE(batch.inputs.is_contiguous());
    EXPECT_TRUE(batch.targets.is_contiguous());
    for (int64_t row = 0; row < 4; ++row) {
      const int64_t start = windows.Offset(epoch) + indices[row] * 16;
      for (int64_t j = 0; j < 16; ++j) {
        EXPECT_EQ(batch.inputs[row][j].item<int64_t>(), tokens[start + j]);
        EXPECT_EQ(batch.targets[row][j].item<int64_t>(), tokens[start + j + 1]);
      }
    }
  }
  // Consecutive windows do not overlap: the last target of one is the first input of the next.
  const Batch pair = windows.Get({5, 6}, Epoch(2));
  EXPECT_EQ(pair.targets[0][15].item<int64_t>(), pair.inputs[1][0].item<int64_t>());
  EXPECT_TRUE(torch::equal(pair.inputs[0].slice(0, 1), pair.targets[0].slice(0, 0, 15)));

  const Batch none = windows.Get({}, Epoch(0));
  EXPECT_EQ(none.inputs.sizes(), (std::vector<int64_t>{0, 16}));
  EXPECT_THROW(windows.Get({windows.size()}, Epoch(0)), std::out_of_range);
  EXPECT_THROW(windows.Get({-1}, Epoch(0)), std::out_of_range);
}

// The elastic sampler deals window indices as it deals images: through world
// changes at commits and a failure that redoes the steps after a commit, every
// token of an epoch's windows is predicted exactly once. The stream's tokens
// are their own offsets, so the targets say which positions were trained.
TEST(TokenWindows, TheSamplerPredictsEveryTokenOfAnEpochOnceThroughResizes) {
  ScratchDir dir;
  const int64_t n = 20000, context = 32, step = 12;
  std::vector<uint32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<uint32_t>(i);
  WriteTokens(dir / "train.bin", tokens);
  const TokenWindows windows("train", Open(dir / "train.bin", 4), n, context, true, 5);
  for (uint64_t epoch : {0, 1}) {
    ElasticSampler sampler(windows.size(), 5);
    const std::vector<int64_t> perm = sampler.Permutation(epoch);
    std::vector<int> predicted(n, 0);
    int64_t committed = 0, position = 0, steps = 0;
    std::set<int64_t> failed_at;
    const int worlds[] = {2, 3, 1, 4};
    int phase = 0;
    while (position < windows.size()) {
      const int world = worlds[phase % 4];
      for (int rank = 0; rank < world; ++rank) {
        const std::vector<int64_t> indices = sampler.StepIndices(perm, position, rank, world, step);
        const torch::Tensor targets = windows.Get(indices, Epoch(epoch)).targets.contiguous();
        const int64_t* t = targets.data_ptr<int64_t>();
        for (int64_t i = 0; i < targets.numel(); ++i) ++predicted[t[i]];
      }
      position = sampler.NextPosition(position, step);
      ++steps;
      if (steps % 3 == 0) {
        committed = position;  // a commit every third step
      } else if (steps % 7 == 5 && failed_at.insert(position).second) {
        // A failure after the commit: those steps are discarded and redone
        // by another world.
        const std::vector<int64_t> redone(perm.begin() + committed, perm.begin() + position);
        const torch::Tensor lost = windows.Get(redone, Epoch(epoch)).targets.contiguous();
        const int64_t* t = lost.data_ptr<int64_t>();
        for (int64_t i = 0; i < lost.numel(); ++i) --predicted[t[i]];
        position = committed;
        ++phase;
      }
    }
    EXPECT_GE(phase, 4) << "a failure, and a world change after it, at least four times";
    const int64_t first = windows.Offset(epoch) + 1;
    const int64_t last = windows.Offset(epoch) + windows.size() * context;
    for (int64_t t = 0; t < n; ++t) {
      ASSERT_EQ(predicted[t], t >= first && t <= last ? 1 : 0)
          << "token " << t << " epoch " << epoch;
    }
  }
}

TEST(TokenWindows, TheOffsetShiftsPerEpochAndNotForEvaluation) {
  ScratchDir dir;
  const std::vector<uint16_t> tokens = Stream(5000);
  WriteTokens(dir / "t.bin", tokens);
  const auto file = Open(dir / "t.bin");
  const int64_t context = 64;
  const TokenWindows train("train", file, 65, context, true, 1234);
  const TokenWindows same("train", file, 65, context, true, 1234);
  const TokenWindows other_seed("train", file, 65, context, true, 1235);
  const TokenWindows eval("val", file, 65, context, false, 1234);
  std::set<int64_t> offsets;
  bool seeds_differ = false;
  for (uint64_t epoch = 0; epoch < 20; ++epoch) {
    const int64_t offset = train.Offset(epoch);
    EXPECT_GE(offset, 0);
    EXPECT_LT(offset, context);
    EXPECT_EQ(offset, same.Offset(epoch));
    EXPECT_EQ(train.WindowStart(3, epoch), offset + 3 * context);
    seeds_differ |= other_seed.Offset(epoch) != offset;
    offsets.insert(offset);
    EXPECT_EQ(eval.Offset(epoch), 0);
    // The same request gives the same batch.
    EXPECT_TRUE(torch::equal(train.Get({0, 9}, Epoch(epoch)).inputs,
                             same.Get({0, 9}, Epoch(epoch)).inputs));
    const Batch first = train.Get({0}, Epoch(epoch));
    EXPECT_EQ(first.inputs[0][0].item<int64_t>(), tokens[offset]);
  }
  EXPECT_GT(offsets.size(), 5u) << "the offset should change across epochs";
  EXPECT_TRUE(seeds_differ);

  // Evaluation windows start at token 0, whatever the epoch or the request's seed.
  for (uint64_t epoch : {0, 1, 99}) {
    BatchRequest request = Epoch(epoch);
    request.seed = epoch * 31 + 1;
    request.augment = true;
    const Batch batch = eval.Get({0, 2}, request);
    for (int64_t j = 0; j < context; ++j) {
      EXPECT_EQ(batch.inputs[0][j].item<int64_t>(), tokens[j]);
      EXPECT_EQ(batch.inputs[1][j].item<int64_t>(), tokens[2 * context + j]);
    }
  }
}

TEST(TokenWindows, RefusesAContextWithNoWindow) {
  ScratchDir dir;
  WriteTokens(dir / "val.bin", Stream(120));
  const auto file = Open(dir / "val.bin");
  std::string error = ErrorOf([&] { TokenWindows("val", file, 65, 300, false, 0); });
  EXPECT_EQ(error, dir / "val.bin" +
                       ": --context 300 is too long for its 120 tokens: a window needs context "
                       "+ 1 = 301 tokens");
  error = ErrorOf([&] { TokenWindows("val", file, 65, 120, false, 0); });
  EXPECT_CONTAINS(error, "a window needs context + 1 = 121 tokens");
  EXPECT_NO_THROW(TokenWindows("val", file, 65, 119, false, 0));
  // A training window at an offset up to context - 1 needs 2 * context tokens.
  error = ErrorOf([&] { TokenWindows("train", file, 65, 100, true, 0); });
  EXPECT_CONTAINS(error, dir / "val.bin" + ": --context 100 is too long for its 120 tokens");
  EXPECT_CONTAINS(error, "2 * context = 200 tokens");
  EXPECT_NO_THROW(TokenWindows("train", file, 65, 60, true, 0));
  EXPECT_THROW(TokenWindows("train", file, 65, 0, true, 0), std::invalid_argument);
  EXPECT_THROW(TokenWindows("train", file, 0, 10, true, 0), std::invalid_argument);
}

TEST(TokenWindows, RefusesATokenOutsideTheVocabularyWhereItIsCopied) {
  ScratchDir dir;
  std::vector<uint16_t> tokens = Stream(101);  // 10 evaluation windows of 10
  tokens[35] = 65;                             // in window 3
  tokens[60] = 900;                            // the last target of window 5, input of window 6
  WriteTokens(dir / "val.bin", tokens);
  const TokenWindows windows("val", Open(dir / "val.bin"), 65, 10, false, 0);
  EXPECT_NO_THROW(windows.Get({0, 1, 2, 4, 7, 8, 9}, Epoch(0)));
  std::string error = ErrorOf([&] { windows.Get({1, 3}, Epoch(0)); });
  EXPECT_EQ(error, dir / "val.bin" + ": token 65 at offset 35 is not below the vocab size 65 " +
                       "(meta.json)");
  error = ErrorOf([&] { windows.Get({5}, Epoch(0)); });
  EXPECT_CONTAINS(error, "token 900 at offset 60 is not below the vocab size 65");
  error = ErrorOf([&] { windows.Get({6}, Epoch(0)); });
  EXPECT_CONTAINS(error, "token 900 at offset 60");
}

TEST(LoadTokenData, ReadsBothSplits) {
  ScratchDir dir;
  WriteMeta(dir.path(), 65, "uint16");
  WriteTokens(dir / "train.bin", Stream(900));
  WriteTokens(dir / "val.bin", Stream(100));
  const TokenData data = LoadTokenData(dir.path(), 8, 3);
  EXPECT_EQ(data.info.width, 2);
  EXPECT_EQ(data.info.vocab_size, 65);
  EXPECT_EQ(data.train->name(), "tokens-train");
  EXPECT_EQ(data.val->name(), "tokens-val");
  EXPECT_EQ(data.train->size(), (900 - 8) / 8);
  EXPECT_EQ(data.val->size(), (100 - 1) / 8);
  const auto* train = dynamic_cast<const TokenWindows*>(data.train.get());
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->Offset(4), TokenWindows("x", Open(dir / "train.bin"), 65, 8, true, 3).Offset(4));
  const Batch batch = data.val->Get({0}, Epoch(5));
  EXPECT_EQ(batch.inputs[0][0].item<int64_t>(), Stream(100)[0]);
}

TEST(LoadTokenData, ReadsUint32Tokens) {
  ScratchDir dir;
  WriteMeta(dir.path(), 100277, "uint32");
  std::vector<uint32_t> tokens(300);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = 65536 + static_cast<uint32_t>(i) * 100;
  WriteTokens(dir / "train.bin", tokens);
  WriteTokens(dir / "val.bin", tokens);
  const TokenData data = LoadTokenData(dir.path(), 10, 0);
  const Batch batch = data.val->Get({2}, Epoch(0));
  EXPECT_EQ(batch.inputs[0][0].item<int64_t>(), 65536 + 20 * 100);
  EXPECT_EQ(batch.targets[0][9].item<int64_t>(), 65536 + 30 * 100);
}

TEST(LoadTokenData, NamesTheMissingFile) {
  ScratchDir dir;
  std::string error = ErrorOf([&] { LoadTokenData(dir.path(), 8, 0); });
  EXPECT_CONTAINS(error, dir / "meta.json" + ": no such file");
  EXPECT_CONTAINS(error, "vocab_size");

  WriteMeta(dir.path(), 65, "uint16");
  WriteTokens(dir / "train.bin", Stream(900));
  error = ErrorOf([&] { LoadTokenData(dir.path(), 8, 0); });
  EXPECT_EQ(error, dir / "val.bin" +
                       ": no such file; --dataset tokens needs train.bin and val.bin, as "
                       "nanoGPT's prepare.py writes them");
  WriteTokens(dir / "val.bin", Stream(100));
  std::remove((dir / "train.bin").c_str());
  error = ErrorOf([&] { LoadTokenData(dir.path(), 8, 0); });
  EXPECT_CONTAINS(error, dir / "train.bin" + ": no such file");

  // meta.json's dtype is the width the files are read with.
  WriteFile(dir / "train.bin", std::vector<uint8_t>(1001, 0));
  error = ErrorOf([&] { LoadTokenData(dir.path(), 8, 0); });
  EXPECT_CONTAINS(error, dir / "train.bin" + ": has 1001 bytes");
  WriteTokens(dir / "train.bin", Stream(900));
  error = ErrorOf([&] { LoadTokenData(dir.path(), 200, 0); });
  EXPECT_CONTAINS(error, dir / "val.bin" + ": --context 200 is too long for its 100 tokens");
}

TEST(TokenWindows, GetFromFourThreadsMatchesOneThread) {
  ScratchDir dir;
  std::vector<uint16_t> tokens(200000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * i + 7) % 50257);
  WriteTokens(dir / "train.bin", tokens);
  const TokenWindows windows("train", Open(dir / "train.bin"), 50257, 128, true, 9);
  std::vector<std::vector<int64_t>> batches;
  for (int64_t b = 0; b < 64; ++b) {
    std::vector<int64_t> indices;
    for (int64_t k = 0; k < 12; ++k) indices.push_back((b * 97 + k * 131) % windows.size());
    batches.push_back(indices);
  }
  auto run = [&](int threads) {
    std::vector<Batch> out(batches.size());
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (size_t b = t; b < batches.size(); b += threads) {
          out[b] = windows.Get(batches[b], Epoch(b % 3));
        }
      });
    }
    for (std::thread& thread : pool) thread.join();
    return out;
  };
  const std::vector<Batch> one = run(1);
  for (int repeat = 0; repeat < 3; ++repeat) {
    const std::vector<Batch> four = run(4);
    for (size_t b = 0; b < batches.size(); ++b) {
      EXPECT_TRUE(torch::equal(one[b].inputs, four[b].inputs)) << b;
      EXPECT_TRUE(torch::equal(one[b].targets, four[b].targets)) << b;
      EXPECT_EQ(one[b].indices, four[b].indices);
    }
  }
}

// Resident set size in bytes, from /proc/self/status.
int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "... kB"
  }
  throw std::runtime_error("no VmRSS in /proc/self/status");
}

// The file is mapped, not read: a 256 MB file adds only the pages the windows touch.
TEST(TokenWindows, ResidentMemoryDoesNotGrowWithTheFile) {
  ScratchDir dir;
  const std::string path = dir / "train.bin";
  const int64_t tokens = int64_t{128} << 20;  // 256 MB of uint16
  const int64_t context = 256;
  {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, tokens * 2), 0);
    // Real tokens at the windows read below; the rest of the file is zeros (ids 0).
    for (int64_t k = 0; k < 16; ++k) {
      const int64_t at = k * (tokens / 16) + 1000;
      const uint16_t id = static_cast<uint16_t>(k + 1);
      ASSERT_EQ(::pwrite(fd, &id, 2, at * 2), 2);
    }
    ::close(fd);
  }
  // LibTorch's first allocations and thread pools, outside the measurement.
  (void)torch::empty({4, context}, torch::kInt64).sum();

  const int64_t before = ResidentBytes();
  const TokenWindows windows("train", Open(path), 65, context, false, 0);
  EXPECT_EQ(windows.size(), (tokens - 1) / context);
  for (int64_t k = 0; k < 16; k += 4) {
    std::vector<int64_t> indices;
    for (int64_t j = k; j < k + 4; ++j) indices.push_back((j * (tokens / 16) + 1000) / context);
    const Batch batch = windows.Get(indices, Epoch(0));
    for (int64_t row = 0; row < 4; ++row) {
      const int64_t at = (k + row) * (tokens / 16) + 1000;
      EXPECT_EQ(batch.inputs[row][at % context].item<int64_t>(), k + row + 1);
    }
  }
  const int64_t growth = ResidentBytes() - before;
  EXPECT_LT(growth, int64_t{16} << 20)
      << "resident memory grew by " << growth << " bytes for a file of " << tokens * 2;
}

}  // namespace
}  // namespace elastic::trainer
