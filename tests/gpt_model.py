"""A GPT as nanoGPT's model.py writes it, for `cifar --dataset tokens
--model-file` (tests/language_model_test.cc, bench/). Torch 1.13 has no
scaled_dot_product_attention, so attention is written out with a causal mask.

  gpt_model.py script OUT.pt --vocab V [--block 64 --layers 2 --heads 2 --embd 32
                                        --dropout 0 --seed 0 --bias 1]
      torch.jit.script()s a freshly initialised GPT (nanoGPT's init) to OUT.pt.
  gpt_model.py evaluate MODEL.pt DATA_DIR --context T [--samples N]
      prints "val_loss X perplexity Y": the mean next-token cross-entropy over
      the first N (0: all) windows of DATA_DIR/val.bin as the trainer cuts them
      for evaluation (window i = tokens [i*T, i*T + T + 1)); with --json FILE,
      also writes {"val_loss": X, "perplexity": Y} to FILE.
  gpt_model.py generate MODEL.pt DATA_DIR [--tokens 200 --prompt TEXT --seed 0]
      prints text sampled from the model, decoded with DATA_DIR/meta.json's itos.
"""
import argparse
import json
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class BiasFreeLayerNorm(nn.Module):
    """nanoGPT's LayerNorm(bias=False): torch 1.13's nn.LayerNorm cannot drop its bias."""

    def __init__(self, embd):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(embd))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)


def layer_norm(embd, bias):
    return nn.LayerNorm(embd) if bias else BiasFreeLayerNorm(embd)


class CausalSelfAttention(nn.Module):
    def __init__(self, embd, heads, block, dropout, bias):
        super().__init__()
        assert embd % heads == 0
        self.c_attn = nn.Linear(embd, 3 * embd, bias=bias)
        self.c_proj = nn.Linear(embd, embd, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.heads = heads
        self.embd = embd
        self.register_buffer("mask", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x):
        b, t, c = x.size()
        qkv = self.c_attn(x)
        q = qkv[:, :, :c].view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = qkv[:, :, c:2 * c].view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = qkv[:, :, 2 * c:].view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class Mlp(nn.Module):
    def __init__(self, embd, dropout, bias):
        super().__init__()
        self.c_fc = nn.Linear(embd, 4 * embd, bias=bias)
        self.c_proj = nn.Linear(4 * embd, embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, embd, heads, block, dropout, bias):
        super().__init__()
        self.ln_1 = layer_norm(embd, bias)
        self.attn = CausalSelfAttention(embd, heads, block, dropout, bias)
        self.ln_2 = layer_norm(embd, bias)
        self.mlp = Mlp(embd, dropout, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    """[N, T] int64 tokens -> [N, T, vocab] logits; T <= block. bias: biases in the
    linear layers and layer norms, as GPT-2's (nanoGPT's `bias`; its Shakespeare
    recipe has none)."""

    def __init__(self, vocab, block, layers, heads, embd, dropout, bias=True):
        super().__init__()
        self.block = block
        self.wte = nn.Embedding(vocab, embd)
        self.wpe = nn.Embedding(block, embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block(embd, heads, block, dropout, bias) for _ in range(layers)])
        self.ln_f = layer_norm(embd, bias)
        self.lm_head = nn.Linear(embd, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # tied, as nanoGPT's
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def val_tokens(data_dir):
    with open(os.path.join(data_dir, "meta.json")) as f:
        meta = json.load(f)
    dtype = np.uint16 if meta["dtype"] == "uint16" else np.uint32
    return np.memmap(os.path.join(data_dir, "val.bin"), dtype=dtype, mode="r"), meta


def evaluate(model, data_dir, context, samples):
    tokens, _ = val_tokens(data_dir)
    windows = (len(tokens) - 1) // context
    if samples:
        windows = min(windows, samples)
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for first in range(0, windows, 64):
            rows = range(first, min(windows, first + 64))
            batch = torch.from_numpy(np.stack(
                [tokens[i * context:i * context + context + 1].astype(np.int64) for i in rows]))
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).double(),
                                   batch[:, 1:].reshape(-1), reduction="sum")
            total += loss.item()
            count += batch[:, 1:].numel()
    return total / count


def generate(model, data_dir, tokens, prompt, seed):
    _, meta = val_tokens(data_dir)
    itos = meta["itos"]
    stoi = {ch: i for i, ch in enumerate(itos)}
    torch.manual_seed(seed)
    idx = torch.tensor([[stoi[ch] for ch in prompt]], dtype=torch.long)
    block = model.wpe.weight.size(0)
    model.eval()
    with torch.no_grad():
        for _ in range(tokens):
            logits = model(idx[:, -block:])[:, -1, :]
            idx = torch.cat([idx, torch.multinomial(F.softmax(logits, dim=-1), 1)], dim=1)
    return "".join(itos[i] for i in idx[0].tolist())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    script = sub.add_parser("script")
    script.add_argument("out")
    script.add_argument("--vocab", type=int, required=True)
    script.add_argument("--block", type=int, default=64)
    script.add_argument("--layers", type=int, default=2)
    script.add_argument("--heads", type=int, default=2)
    script.add_argument("--embd", type=int, default=32)
    script.add_argument("--dropout", type=float, default=0.0)
    script.add_argument("--seed", type=int, default=0)
    script.add_argument("--bias", type=int, choices=(0, 1), default=1,
                        help="biases in the linear layers and layer norms (nanoGPT's bias)")
    ev = sub.add_parser("evaluate")
    ev.add_argument("model")
    ev.add_argument("data_dir")
    ev.add_argument("--context", type=int, required=True)
    ev.add_argument("--samples", type=int, default=0)
    ev.add_argument("--json", default="", help="also write the result to this file as JSON")
    gen = sub.add_parser("generate")
    gen.add_argument("model")
    gen.add_argument("data_dir")
    gen.add_argument("--tokens", type=int, default=200)
    gen.add_argument("--prompt", default="\n")
    gen.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.command == "script":
        torch.manual_seed(args.seed)
        model = Gpt(args.vocab, args.block, args.layers, args.heads, args.embd, args.dropout,
                    bool(args.bias))
        torch.jit.script(model).save(args.out)
        print(f"scripted {sum(p.numel() for p in model.parameters())} parameters to {args.out}")
    elif args.command == "evaluate":
        loss = evaluate(torch.jit.load(args.model), args.data_dir, args.context, args.samples)
        print(f"val_loss {loss:.6f} perplexity {math.exp(loss):.4f}")
        if args.json:
            with open(args.json, "w") as out:
                json.dump({"val_loss": loss, "perplexity": math.exp(loss)}, out)
    else:
        print(generate(torch.jit.load(args.model), args.data_dir, args.tokens, args.prompt,
                       args.seed))


if __name__ == "__main__":
    main()
