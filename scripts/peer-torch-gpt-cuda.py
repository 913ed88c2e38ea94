#!/usr/bin/env python3
"""The GPU peer of scripts/gpu-check.sh's training benchmark: the same GPT as troupe's
runtime/model/gpt.cpp (token and position embeddings, pre-LayerNorm blocks of causal
attention through scaled_dot_product_attention, as troupe's, and a 4x GELU MLP, a final
LayerNorm and an unbiased LM head), trained by plain
eager PyTorch on one CUDA device with its AdamW (PyTorch's default implementation on CUDA),
on random tokens: in fp32, or with --dtype bf16 under autocast (fp32 weights and optimizer,
bf16 matrix products: PyTorch's usual mixed precision). Prints one line: tokens_per_s=...,
step_ms=... (medians of the steps after the first, which warms up)."""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.norm_attention = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.projection = nn.Linear(width, width)
        self.norm_mlp = nn.LayerNorm(width)
        self.mlp_in = nn.Linear(width, 4 * width)
        self.mlp_out = nn.Linear(4 * width, width)

    def attend(self, x):
        b, t, c = x.shape
        d = c // self.heads
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        mixed = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # flash, as troupe's
        return self.projection(mixed.transpose(1, 2).reshape(b, t, c))

    def forward(self, x):
        x = x + self.attend(self.norm_attention(x))
        return x + self.mlp_out(F.gelu(self.mlp_in(self.norm_mlp(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, seq, width, layers, heads):
        super().__init__()
        self.token = nn.Embedding(vocab, width)
        self.position = nn.Embedding(seq, width)
        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.head(self.norm(self.blocks(self.token(tokens) + self.position(positions))))


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 12), ("hidden", 768), ("heads", 12), ("seq", 512), ("micro", 8),
                          ("vocab", 256), ("steps", 20)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32, as troupe's run
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16")
    torch.manual_seed(0)
    model = Gpt(a.vocab, a.seq, a.hidden, a.layers, a.heads).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    times = []
    for _ in range(a.steps + 1):
        tokens = torch.randint(0, a.vocab, (a.micro, a.seq + 1))
        torch.cuda.synchronize()
        start = time.perf_counter()
        x, y = tokens[:, :-1].cuda(), tokens[:, 1:].cuda()
        with autocast:
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, a.vocab), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()  # as troupe reads each step's loss
        times.append(time.perf_counter() - start)
    step = statistics.median(times[1:])
    print(f"tokens_per_s={a.micro * a.seq / step:.1f} step_ms={step * 1000:.2f}")


if __name__ == "__main__":
    main()
