"""The serving smoke job's checks, from its figures and what rackform expects: one judge for the
in-process model and an engine's endpoint alike. Standard library only.

The device kind is data (`"cuda"` or `"cpu"`), so every GPU-only branch runs in the CPU tests.
A threshold rackform has no calibrated figure for is None: its check is not run, with the
figure shown and the reason ("still to be measured on <GPU>"), never passed on a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from validators import report
from validators.report import Check, compare, failed, not_run
from validators.serving_load import Figures, Load

CHECKS = (
    "model_load",
    "model_shape",
    "generation",
    "ttft_p99",
    "itl_p99",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "mbu",
    "peak_memory",
    "cost_per_mtok",
)


@dataclass(frozen=True)
class Expect:
    """What rackform hands the job (the blueprint's serving workload, the catalog's GPU)."""

    ttft_p99_ms: float | None  # None: no objective declared (reported, not judged)
    itl_p99_ms: float | None
    shape: dict | None  # layers, hidden, heads, kv_heads, head_dim the blueprint sized for
    dtype_bytes: int
    gpu_model: str | None = None
    hbm_tbps: float | None = None
    mbu_min_pct: float | None = None
    expected_peak_bytes: int | None = None
    price_usd_hr: float | None = None
    replicas_per_node: int = 1
    tensor_parallel: int = 1


def _still(gpu: str | None, what: str) -> str:
    on = f"on {gpu}" if gpu else "for this node"
    return f"no calibrated {what} {on}: still to be measured (informational)"


def shape_check(expect: Expect, found: dict | None, standin: bool) -> Check:
    """The model on the mount is the one the blueprint was sized for (layers, widths, heads)."""
    if standin:
        return not_run("model_shape", "a stand-in model: the blueprint's is not on this node")
    if found is None:
        return not_run("model_shape", "the engine's model is not read (no --model-path)")
    if expect.shape is None:
        return not_run("model_shape", "no model shape given", measured=found)
    differ = {k: (found.get(k), v) for k, v in expect.shape.items() if found.get(k) != v}
    if differ:
        why = ", ".join(f"{k} {m} (expected {e})" for k, (m, e) in differ.items())
        return failed(
            "model_shape",
            f"the model is not the one preflight sized: {why}",
            measured={k: found.get(k) for k in expect.shape},
            expected=expect.shape,
            op="==",
        )
    return compare("model_shape", expect.shape, expect.shape, "", "==", detail="config.json")


def generation_check(fig: Figures, load: Load) -> Check:
    why = "; ".join(fig.errors[:3])
    return compare(
        "generation",
        fig.complete,
        load.requests,
        "requests",
        "==",
        detail=_join(
            f"each of {load.concurrency} at a time: {load.prompt_tokens} prompt tokens, "
            f"{load.output_tokens} output tokens",
            f"errors: {why}" if why else "",
        ),
    )


NO_OBJECTIVE = "the blueprint declares no objective (workload.serving): reported, not judged"


def latency_checks(fig: Figures, expect: Expect) -> list[Check]:
    """p99 TTFT and inter-token latency against the objectives; without one, the figure is
    shown and not judged."""
    return [
        compare(
            "ttft_p99",
            fig.ttft_ms[1],
            expect.ttft_p99_ms,
            "ms",
            "<=",
            detail=f"p50 {report.fmt(fig.ttft_ms[0])} ms; time to first token",
            no_threshold=NO_OBJECTIVE,
        ),
        compare(
            "itl_p99",
            fig.itl_ms[1],
            expect.itl_p99_ms,
            "ms",
            "<=",
            detail=f"p50 {report.fmt(fig.itl_ms[0])} ms; gaps between a request's tokens",
            no_threshold=NO_OBJECTIVE,
        ),
    ]


def rate_checks(fig: Figures, load: Load, expect: Expect, standin: bool = False) -> list[Check]:
    """Prefill is informational (no calibrated floor); decode must reach the rate the p99
    inter-token objective implies for the concurrent streams (not judged for a stand-in)."""
    unjudged = (
        "a stand-in model: the objectives are for the blueprint's"
        if standin
        else NO_OBJECTIVE
        if expect.itl_p99_ms is None
        else ""
    )
    decode = (
        not_run("decode_tokens_per_s", unjudged, measured=_round(fig.decode_tps), unit="tokens/s")
        if unjudged
        else compare(
            "decode_tokens_per_s",
            _round(fig.decode_tps),
            round(load.concurrency * 1000 / expect.itl_p99_ms, 3),
            "tokens/s",
            detail=f"{load.concurrency} streams at the {expect.itl_p99_ms:g} ms inter-token objective",
        )
    )
    return [
        not_run(
            "prefill_tokens_per_s",
            _still(expect.gpu_model, "prefill floor")
            + f"; {load.concurrency} x {load.prompt_tokens} prompt tokens over the median TTFT",
            measured=_round(fig.prefill_tps),
            unit="tokens/s",
        ),
        decode,
    ]


def mbu_check(
    device_kind: str, fig: Figures, bytes_per_step: float | None, expect: Expect
) -> tuple[Check, float | None]:
    """Memory-bandwidth utilization: bytes a decode step reads x steps per second (one step per
    median inter-token gap) over the GPU's HBM bandwidth, percent."""
    if device_kind != "cuda":
        return not_run(
            "mbu", "no GPU: MBU is measured against a GPU's HBM bandwidth", unit="%"
        ), None
    if not expect.hbm_tbps:
        return not_run("mbu", "no HBM bandwidth given for this GPU (--hbm-tbps)", unit="%"), None
    if bytes_per_step is None:
        why = "the model's weight bytes are not known (no --model-path)"
        return not_run("mbu", why, unit="%"), None
    if not fig.itl_ms[0]:
        return failed("mbu", "no decode step was timed", unit="%", op=">="), None
    pct = 100 * bytes_per_step / (fig.itl_ms[0] / 1000) / (expect.hbm_tbps * 1e12)
    pct = float(f"{pct:.4g}")  # four significant figures: a stand-in's share is tiny
    detail = (
        f"{bytes_per_step / 1e9:.3g} GB a step at {1000 / fig.itl_ms[0]:.4g} steps/s over "
        f"{expect.hbm_tbps:g} TB/s"
    )
    if expect.mbu_min_pct is None:
        return not_run(
            "mbu", _join(_still(expect.gpu_model, "MBU floor"), detail), measured=pct, unit="%"
        ), pct
    return compare("mbu", pct, expect.mbu_min_pct, "%", detail=detail), pct


def memory_check(
    held_bytes: int | None, allocator_peak: int | None, expect: Expect, why_not: str = ""
) -> Check:
    """The weights and the KV cache at its fullest (what preflight's estimate counts) against
    that estimate; a GPU's allocator peak (activations too) is shown beside it."""
    if why_not:
        return not_run("peak_memory", why_not, measured=held_bytes, unit="bytes")
    peak = f"; allocator peak {allocator_peak:,} bytes" if allocator_peak is not None else ""
    return compare(
        "peak_memory",
        held_bytes,
        expect.expected_peak_bytes,
        "bytes",
        "<=",
        detail=f"weights + KV cache at its fullest{peak}",
        no_threshold="no estimate given (--expected-peak-bytes)",
    )


def cost_check(fig: Figures, expect: Expect) -> tuple[Check, float | None]:
    """The node's price over the output tokens it serves in an hour: informational (what the
    run measured; rackform diff shows the plan's estimate)."""
    if expect.price_usd_hr is None:
        return not_run("cost_per_mtok", "no node price given (--price-usd-hr)", unit="USD"), None
    if not fig.output_tps:
        return failed("cost_per_mtok", "no output token was measured", unit="USD"), None
    per_hour = fig.output_tps * expect.replicas_per_node * 3600
    usd = round(expect.price_usd_hr / per_hour * 1e6, 4)
    detail = (
        f"informational: ${expect.price_usd_hr:g}/h over {fig.output_tps:,.1f} output tokens/s"
        f" x {expect.replicas_per_node} replica(s) per node"
    )
    return not_run("cost_per_mtok", detail, measured=usd, unit="USD per 1M output tokens"), usd


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)
