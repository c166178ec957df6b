"""Verdicts on the NVLink domain measurements (validators/domain_collectives.py): pure, so
the audit (tests/validators/test_check_evidence.py) feeds them failure evidence directly.

Two kinds, one check per domain (or link), its name in the check's `node` field, so a slow
domain is named and never averaged into a cluster-wide figure:

- against the catalog's figure for the system (`allreduce_busbw_gbps_domain`,
  `alltoall_busbw_gbps_domain`, rackform passes them in); where the catalog has none (every
  system today: nobody has published them), not-run with the measured value;
- against its peers: a domain (or link) below PEER_FRACTION of the median of the others fails;
  judged without any catalog figure, on any backend; with nothing to compare, not-run."""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from validators.report import NOT_RUN, Check, compare, failed, not_run

# A domain (or link) below 0.8 x the median of its peers fails. Healthy identical domains
# measured best-of-repeats differ by a few percent (nccl-tests' run-to-run spread); a domain
# with one NVLink switch tray or one GPU's links down, or a link on a degraded port, loses a
# large share (a ninth of an NVL72's switch trays, a quarter of a 4x port), so 0.8 leaves room
# for noise and still catches them. The same fraction rackform's node outliers use by default
# (rackform/acceptance/outliers.py, the health policy's `outlier_fraction`).
PEER_FRACTION = 0.8
UNIT = "GB/s"


def catalog_checks(
    name: str,
    figures: Mapping[str, tuple[float | None, int]],
    floor: float | None,
    on_gpu: bool,
    what: str,
) -> list[Check]:
    """Each domain's figure (`figures`: domain -> (GB/s or None, its ranks)) against the
    catalog's `floor` for a full domain of the system."""
    out = []
    for domain, (gbps, ranks) in figures.items():
        detail = f"{what}, {ranks} ranks"
        if ranks < 2:
            out.append(not_run(name, f"one rank in the domain: {what} moves no data", node=domain))
        elif gbps is None:
            out.append(failed(name, f"{what}: nothing measured", expected=floor, node=domain))
        elif not on_gpu:
            why = f"gloo on CPU: the catalog's NVLink figure does not apply ({detail})"
            out.append(not_run(name, why, measured=round(gbps, 3), unit=UNIT, node=domain))
        else:
            out.append(
                compare(
                    name,
                    round(gbps, 2),
                    floor,
                    UNIT,
                    detail=detail,
                    node=domain,
                    no_threshold="the catalog's figure for this system is still to be measured",
                )
            )
    return out


def peer_checks(
    name: str,
    figures: Mapping[str, float | None],
    what: str,
    kind: str = "domain",
    fraction: float = PEER_FRACTION,
    judged: bool = True,
) -> list[Check]:
    """Each domain's (or link's) figure against `fraction` x the median of the others'; one
    with nothing measured fails; with no peer measured, nothing to compare (not-run). Not
    `judged` (CPU ranks over gloo: their figures are the host's scheduling, not NVLink's or the
    fabric's, and a healthy run's spread reaches the fraction): the same figures and floor
    reported not-run."""
    if not figures:
        return [not_run(name, f"no {kind} of several ranks: nothing measured to compare")]
    out = []
    for key, gbps in figures.items():
        peers = {k: v for k, v in figures.items() if k != key and v is not None}
        if gbps is None:
            out.append(failed(name, f"{what}: nothing measured", node=key))
            continue
        mine = round(gbps, 3)
        if not peers:
            why = f"no other {kind} measured: nothing to compare"
            out.append(not_run(name, why, measured=mine, unit=UNIT, node=key))
            continue
        median = statistics.median(peers.values())
        floor = round(fraction * median, 3)
        shown = ", ".join(f"{k} {v:.4g}" for k, v in peers.items())
        of_peers = f"{fraction:g} x the median of its peers ({shown})"
        status = "pass" if gbps >= fraction * median else "fail"
        if not judged:
            why = f"{what}, against {of_peers}: on CPU (gloo) reported, not judged"
            out.append(Check(name, NOT_RUN, mine, floor, UNIT, ">=", why, key))
            continue
        detail = (
            f"{key} is slow: {what} {mine:.4g} GB/s, below {of_peers}"
            if status == "fail"
            else f"{what}, against {of_peers}"
        )
        out.append(Check(name, status, mine, floor, UNIT, ">=", detail, key))
    return out


def cross_check(figures: Mapping[str, float | None], domains: int, on_gpu: bool) -> Check:
    """All-reduce across domains: the slowest group of equal-position ranks (`figures`:
    label -> GB/s). No catalog figure covers the scale-out fabric: reported, not judged."""
    name = "cross_domain_allreduce_busbw"
    if domains < 2:
        return not_run(name, "one NVLink domain: nothing across domains")
    if not figures or any(v is None for v in figures.values()):
        gone = ", ".join(k for k, v in figures.items() if v is None) or "every group"
        return failed(name, f"nothing measured for {gone}", unit=UNIT)
    slow = min(figures, key=lambda k: figures[k] or 0.0)
    shown = ", ".join(f"{k} {v:.4g}" for k, v in figures.items())
    why = (
        "no catalog figure for all-reduce across NVLink domains (the scale-out fabric's: "
        f"to be measured); slowest {slow} of {shown}"
    )
    if not on_gpu:
        why = f"gloo on CPU; {why}"
    return not_run(name, why, measured=round(figures[slow] or 0.0, 3), unit=UNIT)


def alltoall_check(gbps: float | None, world: int, why: str = "") -> Check:
    """All-to-all over the whole job: reported (the catalog's figure is a single domain's)."""
    name = "alltoall_busbw"
    if world < 2:
        return not_run(name, "one rank: an all-to-all moves no data")
    if gbps is None:
        if why:
            return not_run(name, why)
        return failed(name, "all-to-all over the job: nothing measured", unit=UNIT)
    reason = (
        "over the whole job, across NVLink domains: no catalog figure (the catalog's is one "
        "domain's, judged per domain)"
    )
    return not_run(name, f"{reason}; {world} ranks", measured=round(gbps, 3), unit=UNIT)
