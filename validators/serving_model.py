"""The decoder the serving smoke job generates with: the Llama layout most open decoder models
are published in (Hugging Face's `config.json` and its weight names: RMSNorm, rotary positions,
grouped-query attention, a SwiGLU MLP), run with a key-value cache allocated once for the whole
batch at its longest. Greedy decoding: the figures measured are the node's, not the text's.

A model directory holds `config.json` and its weights as safetensors (`model.safetensors`, or
shards listed in `model.safetensors.index.json`), read through validators/safetensors_io.py,
never through a link. Where no model is named, `write_standin` writes a small random one of the
same layout to node-local scratch and the job loads it by the same path. torch only.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from validators import nofollow, safetensors_io
from validators.safetensors_io import ModelError

CONFIG = "config.json"
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class Shape:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tied: bool = False  # the output head is the embedding

    @classmethod
    def from_config(cls, cfg: dict, shown: str) -> Shape:
        """From a Hugging Face `config.json` of the Llama layout; ModelError naming the field
        that is missing or wrong."""

        def num(key: str, default=None, kind=int):
            v = cfg.get(key, default)
            if v is None or isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
                raise ModelError(f"{shown}: {key} is missing or not a positive number")
            return kind(v)

        heads = num("num_attention_heads")
        hidden = num("hidden_size")
        shape = cls(
            vocab=num("vocab_size"),
            hidden=hidden,
            layers=num("num_hidden_layers"),
            heads=heads,
            kv_heads=num("num_key_value_heads", heads),
            head_dim=num("head_dim", hidden // heads if hidden % heads == 0 else None),
            ffn=num("intermediate_size"),
            rope_theta=num("rope_theta", 10000.0, float),
            norm_eps=num("rms_norm_eps", 1e-5, float),
            tied=bool(cfg.get("tie_word_embeddings", False)),
        )
        if shape.heads % shape.kv_heads:
            raise ModelError(f"{shown}: {heads} attention heads, not a multiple of the KV heads")
        return shape

    def to_config(self) -> dict:
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": self.vocab,
            "hidden_size": self.hidden,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.ffn,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.norm_eps,
            "tie_word_embeddings": self.tied,
        }

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Keys and values of one token in every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def as_dict(self) -> dict:
        return asdict(self)


# Stand-ins written when no model is named: a CPU run takes seconds; on a GPU about 1.1 billion
# parameters (2.2 GB in bf16), large enough that a decode step reads memory, not launches kernels.
STANDINS = {
    "tiny": Shape(vocab=256, hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128),
    "small": Shape(
        vocab=32000, hidden=2048, layers=16, heads=16, kv_heads=4, head_dim=128, ffn=5632
    ),
}


def weight_shapes(s: Shape) -> dict[str, tuple[int, ...]]:
    """Every tensor of the layout, by its Hugging Face name."""
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (s.vocab, s.hidden)}
    for i in range(s.layers):
        p = f"model.layers.{i}."
        out |= {
            p + "input_layernorm.weight": (s.hidden,),
            p + "self_attn.q_proj.weight": (q, s.hidden),
            p + "self_attn.k_proj.weight": (kv, s.hidden),
            p + "self_attn.v_proj.weight": (kv, s.hidden),
            p + "self_attn.o_proj.weight": (s.hidden, q),
            p + "post_attention_layernorm.weight": (s.hidden,),
            p + "mlp.gate_proj.weight": (s.ffn, s.hidden),
            p + "mlp.up_proj.weight": (s.ffn, s.hidden),
            p + "mlp.down_proj.weight": (s.hidden, s.ffn),
        }
    out["model.norm.weight"] = (s.hidden,)
    if not s.tied:
        out["lm_head.weight"] = (s.vocab, s.hidden)
    return out


class Decoder:
    """The layout's forward pass over weights held as plain tensors, with the KV cache."""

    def __init__(self, shape: Shape, weights: dict[str, torch.Tensor], shown: str = "model"):
        want = weight_shapes(shape)
        missing = sorted(set(want) - set(weights))
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            raise ModelError(f"{shown}: no tensor {', '.join(missing[:3])}{more}")
        for name, dims in want.items():
            if tuple(weights[name].shape) != dims:
                raise ModelError(
                    f"{shown}: {name} has shape {list(weights[name].shape)}, config.json "
                    f"implies {list(dims)}"
                )
        self.shape, self.w = shape, weights
        self.head = weights["model.embed_tokens.weight" if shape.tied else "lm_head.weight"]
        any_w = weights["model.norm.weight"]
        self.device, self.dtype = any_w.device, any_w.dtype

    @property
    def weight_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.w.values())

    @property
    def step_read_bytes(self) -> int:
        """The weights a decode step reads: all of them but an untied embedding table, of
        which it looks up one row per stream."""
        return step_read_bytes(
            self.weight_bytes, self.w["model.embed_tokens.weight"], self.shape.tied
        )

    def new_cache(self, batch: int, length: int) -> torch.Tensor:
        s = self.shape
        dims = (s.layers, 2, batch, s.kv_heads, length, s.head_dim)
        return torch.zeros(dims, device=self.device, dtype=self.dtype)

    def _rope(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        """Rotary positions (the half-split form of the Llama layout) for positions pos.."""
        t, hd = x.shape[2], x.shape[3]
        inv = 1.0 / (
            self.shape.rope_theta
            ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd)
        )
        ang = torch.outer(torch.arange(pos, pos + t, device=x.device, dtype=torch.float32), inv)
        cos, sin = (torch.cat((f, f), dim=-1).to(x.dtype) for f in (ang.cos(), ang.sin()))
        half = hd // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), w, self.shape.norm_eps)

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor, cache: torch.Tensor, pos: int) -> torch.Tensor:
        """The next token of every sequence (greedy) after `tokens` [batch, t] at positions
        pos..pos+t-1: a prefill (pos 0, the whole prompt) or a decode step (t 1); the keys and
        values go into `cache`."""
        s, w = self.shape, self.w
        b, t = tokens.shape
        if pos and t != 1:
            raise ValueError("a step after the prefill takes one token per sequence")
        x = F.embedding(tokens, w["model.embed_tokens.weight"])
        for i in range(s.layers):
            p = f"model.layers.{i}."
            h = self._norm(x, w[p + "input_layernorm.weight"])
            q = (h @ w[p + "self_attn.q_proj.weight"].T).view(b, t, s.heads, s.head_dim)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).view(b, t, s.kv_heads, s.head_dim)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).view(b, t, s.kv_heads, s.head_dim)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q, k = self._rope(q, pos), self._rope(k, pos)
            cache[i, 0, :, :, pos : pos + t] = k
            cache[i, 1, :, :, pos : pos + t] = v
            keys, values = cache[i, 0, :, :, : pos + t], cache[i, 1, :, :, : pos + t]
            # Grouped-query attention: each KV head serves heads / kv_heads query heads.
            a = F.scaled_dot_product_attention(
                q, keys, values, is_causal=t > 1, enable_gqa=s.kv_heads != s.heads
            )
            x = x + a.transpose(1, 2).reshape(b, t, -1) @ w[p + "self_attn.o_proj.weight"].T
            h = self._norm(x, w[p + "post_attention_layernorm.weight"])
            gate = F.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
            x = x + gate @ w[p + "mlp.down_proj.weight"].T
        last = self._norm(x[:, -1], w["model.norm.weight"])
        return (last @ self.head.T).argmax(dim=-1)


@dataclass(frozen=True)
class Loaded:
    decoder: Decoder
    shape: Shape
    files: tuple[str, ...]
    file_bytes: int
    load_s: float


def _weight_files(dir_fd: int, shown: str) -> tuple[str, ...]:
    """The safetensors files of a model directory: one file, or the shards its index lists."""
    try:
        index = safetensors_io.read_json(INDEX, dir_fd, shown=f"{shown}/{INDEX}")
    except FileNotFoundError:
        return (SINGLE,)
    wmap = index.get("weight_map")
    if not isinstance(wmap, dict) or not wmap:
        raise ModelError(f"{shown}/{INDEX}: no weight_map")
    files = sorted(set(wmap.values()))
    bad = [f for f in files if not isinstance(f, str) or "/" in f or f.startswith(".")]
    if bad:
        raise ModelError(f"{shown}/{INDEX}: shard names must be plain file names: {bad[:3]}")
    return tuple(files)


def load_dir(dir_fd: int, shown: str, device: torch.device, dtype: torch.dtype) -> Loaded:
    """The model in the open directory `dir_fd`, on `device` in `dtype`, timed."""
    t0 = time.perf_counter()
    shape = Shape.from_config(
        safetensors_io.read_json(CONFIG, dir_fd, shown=f"{shown}/{CONFIG}"), f"{shown}/{CONFIG}"
    )
    files = _weight_files(dir_fd, shown)
    weights: dict[str, torch.Tensor] = {}
    size = 0
    for f in files:
        part = safetensors_io.load(f, dir_fd, device, dtype, shown=f"{shown}/{f}")
        size += sum(t.numel() for t in part.values()) * dtype.itemsize
        weights |= part
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    load_s = time.perf_counter() - t0
    return Loaded(Decoder(shape, weights, shown), shape, files, size, load_s)


def open_model(path: str) -> int:
    """The model directory, opened without following a link at its name."""
    return nofollow.open_dir(path, shown=path)[0]


def step_read_bytes(total: int, embed, tied: bool) -> int:
    """`total` weight bytes less an untied embedding table (`embed`: its tensor, or its
    safetensors header entry), which a decode step only looks rows up in."""
    if tied or embed is None:
        return total
    if isinstance(embed, torch.Tensor):
        return total - embed.numel() * embed.element_size()
    return total - (embed["data_offsets"][1] - embed["data_offsets"][0])


def weight_bytes_on_disk(path: str) -> int:
    """The weight bytes a decode step reads (`step_read_bytes`), from the model directory's
    config and safetensors headers alone (the engine path: the job loads nothing, the engine
    holds the weights)."""
    fd = open_model(path)
    try:
        cfg = safetensors_io.read_json(CONFIG, fd, shown=f"{path}/{CONFIG}")
        shape = Shape.from_config(cfg, f"{path}/{CONFIG}")
        total, embed = 0, None
        for f in _weight_files(fd, path):
            ffd = nofollow.open_file(f, fd, shown=f"{path}/{f}")
            try:
                head = safetensors_io.header(ffd, f"{path}/{f}")[1]
            finally:
                os.close(ffd)
            total += safetensors_io.tensor_bytes(head)
            embed = head.get("model.embed_tokens.weight", embed)
        return step_read_bytes(total, embed, shape.tied)
    finally:
        os.close(fd)


def model_shape(path: str) -> Shape:
    fd = open_model(path)
    try:
        cfg = safetensors_io.read_json(CONFIG, fd, shown=f"{path}/{CONFIG}")
        return Shape.from_config(cfg, f"{path}/{CONFIG}")
    finally:
        os.close(fd)


def write_standin(scratch: str, shape: Shape, dtype: torch.dtype, seed: int, device) -> str:
    """A random model of `shape` in a new directory of its own (mode 700, a name no one can
    guess) under `scratch`, every file created without following a link; its path. The weights
    are made on `device` (fast on a GPU) and written from the host."""
    parent = nofollow.open_dir(scratch, shown=scratch)[0]
    name = f"rackform-serving-model-{secrets.token_hex(8)}"
    try:
        os.mkdir(name, 0o700, dir_fd=parent)  # fails on anything already at the name
        fd = nofollow.open_dir(name, parent, shown=f"{scratch}/{name}")[0]
    finally:
        os.close(parent)
    try:
        g = torch.Generator(device=device).manual_seed(seed)
        weights = {}
        for key, dims in weight_shapes(shape).items():
            if len(dims) == 1:
                weights[key] = torch.ones(dims, dtype=dtype)
            else:
                t = torch.empty(dims, device=device, dtype=torch.float32)
                weights[key] = t.normal_(0.0, 0.02, generator=g).to("cpu", dtype)
        safetensors_io.write(SINGLE, fd, weights)
        safetensors_io.write_json(CONFIG, fd, shape.to_config())
    finally:
        os.close(fd)
    return os.path.join(scratch, name)


def remove_standin(path: str) -> None:
    """Remove what `write_standin` wrote: its two files and its directory, nothing else."""
    parent, name = os.path.split(path)
    with contextlib.suppress(OSError):
        pfd = nofollow.open_dir(parent)[0]
        try:
            fd = nofollow.open_dir(name, pfd)[0]
            try:
                for f in (SINGLE, CONFIG):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(f, dir_fd=fd)
            finally:
                os.close(fd)
            os.rmdir(name, dir_fd=pfd)
        finally:
            os.close(pfd)
