// A GPT language model trained elastically with no Python at all: nanoGPT's
// model.py written as LibTorch modules, on a token stream (--dataset tokens:
// train.bin, val.bin and meta.json in --data-dir, as tools/prepare_tokens.py
// writes them), against the public API (api/elastic.h) alone.
//
//   /usr/bin/python3 tools/prepare_tokens.py --input input.txt --out DIR
//   bazel run //examples/gpt -- --data-dir DIR                    # one process
//   bazel run //examples/gpt -- --workers 2 --data-dir DIR        # elastic
//
// The defaults are nanoGPT's CPU recipe for tiny Shakespeare (its README): 4
// layers, 4 heads, 128-wide embeddings, context 64, batch 12, 2,000 steps,
// AdamW (beta2 0.99, weight decay 0.1 on matrices and embeddings), lr 1e-3
// after 100 warm-up steps with a cosine to 1e-4 at step 2,000, gradients
// clipped to norm 1, dropout 0. `--model gpt-small` is its GPU recipe's model
// (6 layers, 6 heads, 384 wide, context up to 256, dropout 0.2).
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "api/elastic.h"

namespace {

struct GptConfig {
  int64_t vocab = 65;
  int64_t block = 64;  // the longest window the model reads (its position table)
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t embd = 128;
  double dropout = 0;
};

// Attention written out with a causal mask, as nanoGPT's slow path.
class CausalSelfAttention : public torch::nn::Module {
 public:
  explicit CausalSelfAttention(const GptConfig& c)
      : c_attn_(register_module("c_attn", torch::nn::Linear(c.embd, 3 * c.embd))),
        c_proj_(register_module("c_proj", torch::nn::Linear(c.embd, c.embd))),
        attn_dropout_(register_module("attn_dropout", torch::nn::Dropout(c.dropout))),
        resid_dropout_(register_module("resid_dropout", torch::nn::Dropout(c.dropout))),
        heads_(c.heads) {
    mask_ = register_buffer(
        "mask", torch::tril(torch::ones({c.block, c.block})).view({1, 1, c.block, c.block}));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / heads_;
    const std::vector<torch::Tensor> qkv = c_attn_(x).split(c, 2);
    const torch::Tensor q = qkv[0].view({b, t, heads_, d}).transpose(1, 2);
    const torch::Tensor k = qkv[1].view({b, t, heads_, d}).transpose(1, 2);
    const torch::Tensor v = qkv[2].view({b, t, heads_, d}).transpose(1, 2);
    torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(d)));
    const torch::Tensor causal = mask_.slice(2, 0, t).slice(3, 0, t);
    att = att.masked_fill(causal == 0, -std::numeric_limits<float>::infinity());
    att = attn_dropout_(torch::softmax(att, -1));
    const torch::Tensor y = torch::matmul(att, v).transpose(1, 2).contiguous().view({b, t, c});
    return resid_dropout_(c_proj_(y));
  }

 private:
  torch::nn::Linear c_attn_, c_proj_;
  torch::nn::Dropout attn_dropout_, resid_dropout_;
  torch::Tensor mask_;
  int64_t heads_;
};

class Block : public torch::nn::Module {
 public:
  explicit Block(const GptConfig& c)
      : ln_1_(register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.embd})))),
        attn_(register_module("attn", std::make_shared<CausalSelfAttention>(c))),
        ln_2_(register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.embd})))),
        c_fc_(register_module("c_fc", torch::nn::Linear(c.embd, 4 * c.embd))),
        c_proj_(register_module("c_proj", torch::nn::Linear(4 * c.embd, c.embd))),
        dropout_(register_module("dropout", torch::nn::Dropout(c.dropout))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = x + attn_->forward(ln_1_(x));
    return x + dropout_(c_proj_(torch::gelu(c_fc_(ln_2_(x)))));
  }

 private:
  torch::nn::LayerNorm ln_1_;
  std::shared_ptr<CausalSelfAttention> attn_;
  torch::nn::LayerNorm ln_2_;
  torch::nn::Linear c_fc_, c_proj_;
  torch::nn::Dropout dropout_;
};

// [N, T] int64 tokens -> [N, T, vocab] logits, T <= block. The output layer
// is the token embedding's transpose (tied weights, as nanoGPT's).
class Gpt : public elastic::Model {
 public:
  explicit Gpt(const GptConfig& c)
      : wte_(register_module("wte", torch::nn::Embedding(c.vocab, c.embd))),
        wpe_(register_module("wpe", torch::nn::Embedding(c.block, c.embd))),
        drop_(register_module("drop", torch::nn::Dropout(c.dropout))),
        h_(register_module("h", torch::nn::ModuleList())),
        ln_f_(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.embd})))),
        block_(c.block) {
    for (int64_t i = 0; i < c.layers; ++i) h_->push_back(std::make_shared<Block>(c));
    // nanoGPT's initialisation: N(0, 0.02), zero biases, and the residual
    // projections scaled down by the depth.
    torch::NoGradGuard no_grad;
    for (auto& p : named_parameters()) {
      const std::string& name = p.key();
      const bool bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
      const bool norm = name.find("ln_") != std::string::npos;
      if (norm) continue;  // LayerNorm: ones and zeros
      if (bias) {
        p.value().zero_();
      } else if (name.find("c_proj.weight") != std::string::npos) {
        p.value().normal_(0, 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers)));
      } else {
        p.value().normal_(0, 0.02);
      }
    }
  }

  torch::Tensor forward(torch::Tensor idx) override {
    const int64_t t = idx.size(1);
    if (t > block_) {
      throw std::invalid_argument("a window of " + std::to_string(t) +
                                  " tokens is longer than the model's position table of " +
                                  std::to_string(block_) +
                                  " (--context must be <= " + std::to_string(block_) + ")");
    }
    const torch::Tensor pos = torch::arange(t, idx.options().dtype(torch::kLong));
    torch::Tensor x = drop_(wte_(idx) + wpe_(pos));
    for (const auto& block : *h_) x = block->as<Block>()->forward(x);
    return torch::nn::functional::linear(ln_f_(x), wte_->weight);
  }

 private:
  torch::nn::Embedding wte_, wpe_;
  torch::nn::Dropout drop_;
  torch::nn::ModuleList h_;
  torch::nn::LayerNorm ln_f_;
  int64_t block_;
};

// nanoGPT's CPU recipe model (the default) and its GPU recipe model; the
// registry passes the vocabulary as the "number of classes".
void RegisterGpts() {
  elastic::RegisterModel(
      {"gpt-mini", "nanoGPT's CPU recipe: 4 layers, 4 heads, 128 wide, block 64"},
      [](int64_t vocab) {
        GptConfig c;
        c.vocab = vocab;
        return std::make_shared<Gpt>(c);
      });
  elastic::RegisterModel(
      {"gpt-small", "nanoGPT's GPU recipe: 6 layers, 6 heads, 384 wide, block 256, dropout 0.2"},
      [](int64_t vocab) {
        GptConfig c;
        c.vocab = vocab;
        c.block = 256;
        c.layers = 6;
        c.heads = 6;
        c.embd = 384;
        c.dropout = 0.2;
        return std::make_shared<Gpt>(c);
      });
}

elastic::Task GptTask(const elastic::TrainOptions& options) {
  if (options.dataset != "tokens")
    throw std::invalid_argument("gpt trains on --dataset=tokens only, got --dataset=" +
                                options.dataset);
  elastic::TokenData data = elastic::LoadTokenData(options.data_dir, options.context,
                                                   static_cast<uint64_t>(options.seed));
  elastic::Task task;
  task.name = "gpt";
  task.model_name = options.model;
  task.model = [name = options.model, vocab = data.info.vocab_size] {
    return elastic::CreateModel(name, vocab);
  };
  task.train = std::move(data.train);
  task.test = std::move(data.val);
  task.objective = std::make_shared<elastic::LanguageModel>(data.info.vocab_size);
  task.tokens_per_sample = options.context;
  return task;
}

}  // namespace

int main(int argc, char** argv) {
  RegisterGpts();
  elastic::Program program;
  program.name = "gpt";
  program.summary =
      "Trains a GPT language model (nanoGPT's model.py as LibTorch modules; --model gpt-mini or\n"
      "gpt-small) on a token stream: --data-dir holds train.bin, val.bin and meta.json\n"
      "(tools/prepare_tokens.py). The defaults are nanoGPT's CPU recipe for tiny Shakespeare.";
  program.make_task = GptTask;
  program.model_from_registry = true;
  program.title = [](const elastic::TrainOptions& o) { return "gpt: " + o.model; };
  elastic::TrainOptions& d = program.defaults;
  d.model = "gpt-mini";
  d.dataset = "tokens";
  d.context = 64;
  d.batch_size = 12;
  d.epochs = 1000;  // --max-steps ends the run
  d.max_steps = 2000;
  d.eval_every = 250;  // nanoGPT's eval_interval
  d.optimizer = "adamw";
  d.lr = 1e-3;
  d.adam_beta1 = 0.9;
  d.adam_beta2 = 0.99;
  d.weight_decay = 0.1;
  d.schedule = "cosine";
  d.warmup_epochs = 0;
  d.warmup_steps = 100;
  d.decay_steps = 2000;
  d.min_lr = 1e-4;
  d.clip_grad = 1.0;
  d.augment = false;
  d.recompute_bn = 0;
  d.precision = "fp32";
  d.memory_format = "contiguous";
  return elastic::Main(argc, argv, program);
}
