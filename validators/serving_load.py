"""The serving smoke job's load and its figures, one for both ways it runs (the model in
process, or a serving engine's endpoint), so their figures compare: `concurrency` streams at
once, each request a prompt of `prompt_tokens` tokens asking for `output_tokens`, every request
recorded as when it was sent and when each of its tokens arrived.

From the records, as serving benchmarks report them (vLLM's and SGLang's benchmark scripts,
MLPerf Inference's server scenario): time to first token (TTFT, sent to first token) and
inter-token latency (ITL, the gaps between a request's tokens) at p50 and p99; the prefill rate
(prompt tokens of the concurrent requests over the median TTFT); the decode rate (the
concurrent streams over the median ITL); the output rate of the whole run (every output token
over the wall time from the first request sent to the last token), which the cost per million
output tokens is taken from. Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Load:
    concurrency: int
    prompt_tokens: int
    output_tokens: int
    requests: int  # in all, `concurrency` at a time

    @property
    def rounds(self) -> int:
        return math.ceil(self.requests / self.concurrency)


@dataclass
class Request:
    sent: float  # seconds, one monotonic clock for the whole run
    token_times: list[float] = field(default_factory=list)
    tokens: int = 0  # output tokens the server says it produced (or the events counted)
    error: str = ""


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between the nearest ranks; None for no values."""
    if not values:
        return None
    v = sorted(values)
    at = (len(v) - 1) * q / 100
    lo = math.floor(at)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (at - lo)


@dataclass(frozen=True)
class Figures:
    requests: int
    complete: int  # requests that returned every output token asked for
    ttft_ms: tuple[float | None, float | None]  # p50, p99
    itl_ms: tuple[float | None, float | None]
    prefill_tps: float | None
    decode_tps: float | None
    output_tps: float | None
    wall_s: float
    errors: tuple[str, ...]

    def as_dict(self) -> dict:
        return {
            "requests": self.requests,
            "complete": self.complete,
            "ttft_ms_p50": self.ttft_ms[0],
            "ttft_ms_p99": self.ttft_ms[1],
            "itl_ms_p50": self.itl_ms[0],
            "itl_ms_p99": self.itl_ms[1],
            "prefill_tokens_per_s": self.prefill_tps,
            "decode_tokens_per_s": self.decode_tps,
            "output_tokens_per_s": self.output_tps,
            "wall_s": self.wall_s,
            "errors": list(self.errors),
        }


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 3)


def figures(load: Load, records: list[Request]) -> Figures:
    ttft = [r.token_times[0] - r.sent for r in records if r.token_times]
    gaps = [b - a for r in records for a, b in zip(r.token_times, r.token_times[1:], strict=False)]
    done = [r for r in records if not r.error and r.tokens >= load.output_tokens]
    ttft50, itl50 = percentile(ttft, 50), percentile(gaps, 50)
    ends = [r.token_times[-1] for r in records if r.token_times]
    wall = (max(ends) - min(r.sent for r in records)) if ends else 0.0
    out_tokens = sum(r.tokens for r in records if r.token_times)
    return Figures(
        requests=len(records),
        complete=len(done),
        ttft_ms=(_ms(ttft50), _ms(percentile(ttft, 99))),
        itl_ms=(_ms(itl50), _ms(percentile(gaps, 99))),
        prefill_tps=load.prompt_tokens * load.concurrency / ttft50 if ttft50 else None,
        decode_tps=load.concurrency / itl50 if itl50 else None,
        output_tps=out_tokens / wall if wall > 0 and out_tokens else None,
        wall_s=round(wall, 4),
        errors=tuple(sorted({r.error for r in records if r.error})),
    )


def decode_bytes_per_step(
    weight_bytes: int, kv_bytes_per_token: int, load: Load, tensor_parallel: int = 1
) -> float:
    """Bytes one GPU reads in a decode step of the whole batch: its share of the weights (each
    read once a step) and the keys and values of every stream's context, at the mean context of
    a run (the prompt and half the output)."""
    context = load.prompt_tokens + load.output_tokens / 2
    return (weight_bytes + load.concurrency * context * kv_bytes_per_token) / tensor_parallel
