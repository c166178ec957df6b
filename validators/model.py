"""A small GPT-style decoder (pre-norm blocks, causal SDPA attention, tied embeddings) and the
synthetic token stream it learns in the smoke job. torch only."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPTConfig:
    vocab: int
    d_model: int
    layers: int
    heads: int
    seq_len: int
    batch: int  # sequences per rank per step
    # Tokens the synthetic stream draws from (<= vocab): the model first learns which tokens
    # occur at all, then the rule that picks the next one.
    data_vocab: int

    def as_dict(self) -> dict:
        return asdict(self)


# "tiny" keeps a CPU test run to seconds; "default" is a few hundred million parameters
# (about 390M) with wide matmuls (d_model 1536, head dim 128) so a GPU is kept busy.
PRESETS = {
    "tiny": GPTConfig(
        vocab=128, d_model=64, layers=2, heads=4, seq_len=64, batch=8, data_vocab=128
    ),
    "small": GPTConfig(
        vocab=8192, d_model=512, layers=8, heads=8, seq_len=1024, batch=8, data_vocab=1024
    ),
    "default": GPTConfig(
        vocab=32768, d_model=1536, layers=12, heads=12, seq_len=2048, batch=8, data_vocab=1024
    ),
}


def config(preset: str, **overrides: int | None) -> GPTConfig:
    """A preset with any non-None field replaced; raises ValueError on an impossible shape."""
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; one of {', '.join(PRESETS)}")
    cfg = replace(PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None})
    if cfg.d_model % cfg.heads:
        raise ValueError(f"d_model {cfg.d_model} is not a multiple of heads {cfg.heads}")
    if not 2 <= cfg.data_vocab <= cfg.vocab:
        raise ValueError(f"data_vocab {cfg.data_vocab} must be between 2 and vocab {cfg.vocab}")
    return cfg


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads = cfg.heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model, bias=False)
        self.out = nn.Linear(4 * cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        # SDPA picks the flash / memory-efficient kernel on a GPU, the math kernel on a CPU.
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _layer in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.apply(self._init)
        # GPT-2's scaled init of the residual projections keeps the start loss near ln(vocab).
        for name, p in self.named_parameters():
            if name.endswith(("proj.weight", "out.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.layers))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def logits(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return F.linear(self.ln(x), self.tok.weight)  # tied output head

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.logits(idx)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def params_for_flops(model: GPT) -> int:
    """Parameters that cost 6 FLOPs per token in training (the MFU convention): all of them,
    the tied embedding once (it is the output head's matmul), position embeddings aside
    (a lookup, no matmul)."""
    return sum(p.numel() for p in model.parameters()) - model.pos.weight.numel()


def synthetic_batch(
    cfg: GPTConfig, step: int, rank: int, seed: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences that walk a fixed random cycle through the first `data_vocab` tokens
    (x[t] = perm[(start + t) mod data_vocab]): every token has exactly one successor, so a
    model that learns the cycle drives the loss toward zero. The cycle is the same on every
    rank; the starting points differ per rank and step."""
    n = cfg.data_vocab
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    start = torch.randint(0, n, (cfg.batch, 1), generator=g)
    seq = perm[(start + torch.arange(cfg.seq_len + 1)) % n].to(device, non_blocking=True)
    return seq[:, :-1], seq[:, 1:]
