"""What an inference workload states beyond its size: the model's shape (layers, hidden size,
attention and KV heads, head size, the dtype it is served in) and the load the cluster must
sustain (concurrency, prompt and output lengths, the p99 latency objectives). Both are
optional, so a blueprint written before them means what it meant: a shape estimated from
`model_params_b` with as many KV heads as attention heads (multi-head attention, the most KV
cache a model of that size can need), `micro_batch` sequences of `seq_len` tokens at once, and
no latency objective (the serving smoke job then reports its latencies as not run)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rackform.blueprint.schema.base import Strict, Violation, check
from rackform.blueprint.schema.names import RelativePath

# Bytes per value of each dtype a model's weights and KV cache may be served in.
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8"]

# The output length a serving load assumes when the blueprint gives none (a short answer); the
# prompt is the rest of seq_len, so the KV cache holds seq_len tokens per sequence either way.
DEFAULT_OUTPUT_TOKENS = 128


class ModelShape(Strict):
    """The served model's shape, as its config (e.g. Hugging Face's config.json) states it."""

    layers: Annotated[int, Field(description="Decoder layers (num_hidden_layers).", ge=1, le=1000)]
    hidden: Annotated[int, Field(description="Hidden size (hidden_size).", ge=1, le=1_000_000)]
    attention_heads: Annotated[
        int, Field(description="Query heads (num_attention_heads).", ge=1, le=4096)
    ]
    kv_heads: Annotated[
        int | None,
        Field(
            description="Key/value heads (num_key_value_heads); fewer than attention_heads is grouped-query attention, which divides the KV cache by attention_heads / kv_heads. Default: attention_heads (multi-head attention).",
            ge=1,
            le=4096,
        ),
    ] = None
    head_size: Annotated[
        int | None,
        Field(
            description="Size of one attention head (head_dim). Default: hidden / attention_heads.",
            ge=1,
            le=65536,
        ),
    ] = None
    dtype: Annotated[
        Dtype,
        Field(
            description="What the weights and the KV cache are served in: fp32 (4 bytes), bf16 or fp16 (2), fp8 or int8 (1)."
        ),
    ] = "bf16"
    path: Annotated[
        RelativePath | None,
        Field(
            description="The model's directory on the model mount (storage.checkpoint.mount), relative to it: Hugging Face's Llama layout (config.json and safetensors), which the serving smoke job loads and checks against this shape. None: the job writes a small stand-in of the same layout to node-local scratch, so an empty cluster is still proven to load and generate (the objectives are then reported, not judged)."
        ),
    ] = None

    @model_validator(mode="after")
    def _heads(self) -> ModelShape:
        out: list[Violation] = []
        kv = self.kv_heads
        if kv is not None and (kv > self.attention_heads or self.attention_heads % kv):
            out.append(Violation(
                ("kv_heads",),
                f"{kv} KV heads do not divide {self.attention_heads} attention heads",
                "grouped-query attention shares each KV head among an equal number of query "
                "heads: give a divisor of attention_heads (attention_heads itself without GQA)",
            ))  # fmt: skip
        if self.head_size is None and self.hidden % self.attention_heads:
            out.append(Violation(
                ("head_size",),
                f"hidden {self.hidden} is not a multiple of {self.attention_heads} attention heads",
                "give head_size (the model config's head_dim)",
            ))  # fmt: skip
        check(out)
        return self


class ServingLoad(Strict):
    """What the cluster must sustain on each node: the serving smoke job drives this load and
    preflight checks on paper that the node can."""

    concurrency: Annotated[
        int | None,
        Field(
            description="Requests each node serves at once (the batch a decode step runs). Default: workload.micro_batch.",
            ge=1,
            le=65536,
        ),
    ] = None
    prompt_tokens: Annotated[
        int | None,
        Field(
            description="Prompt length in tokens. Default: workload.seq_len less output_tokens.",
            ge=1,
            le=1_048_576,
        ),
    ] = None
    output_tokens: Annotated[
        int | None,
        Field(
            description=f"Tokens generated per request. Default: {DEFAULT_OUTPUT_TOKENS} (at most half of seq_len).",
            ge=1,
            le=1_048_576,
        ),
    ] = None
    ttft_p99_ms: Annotated[
        float | None,
        Field(
            description="Objective: 99th-percentile time to first token, in ms (prefill of a prompt with the node at its concurrency). None: no objective; the smoke job reports the figure without judging it.",
            gt=0,
        ),
    ] = None
    itl_p99_ms: Annotated[
        float | None,
        Field(
            description="Objective: 99th-percentile inter-token latency, in ms (one decode step at the node's concurrency). Preflight checks it against the step's HBM-bandwidth bound. None: no objective.",
            gt=0,
        ),
    ] = None


def lengths(load: ServingLoad | None, seq_len: int) -> tuple[int, int]:
    """(prompt, output) tokens per request, with the defaults filled in: the output
    DEFAULT_OUTPUT_TOKENS (at most half of seq_len), the prompt the rest of seq_len."""
    given = load or ServingLoad()
    output = given.output_tokens or max(1, min(DEFAULT_OUTPUT_TOKENS, seq_len // 2))
    prompt = given.prompt_tokens or max(1, seq_len - output)
    return prompt, output


def load_rules(load: ServingLoad, seq_len: int) -> list[Violation]:
    """A prompt and an output that the model's context (seq_len) holds; paths relative to the
    workload."""
    prompt, output = lengths(load, seq_len)
    if prompt + output <= seq_len:
        return []
    field = "prompt_tokens" if load.prompt_tokens is not None else "output_tokens"
    return [Violation(
        ("serving", field),
        f"{prompt} prompt + {output} output tokens exceed seq_len {seq_len}, the context each "
        "sequence's KV cache is sized for",
        f"raise workload.seq_len to at least {prompt + output}, or shorten the request",
    )]  # fmt: skip
