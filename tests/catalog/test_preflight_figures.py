"""The preflight figures: complete, each with a dated source, malformed data refused."""

from __future__ import annotations

import dataclasses
import re

import pytest

from rackform.catalog import CatalogError, Figure
from rackform.catalog.preflight import (
    CheckpointFigures,
    _section,
    load_preflight_figures,
)


def test_every_figure_has_a_dated_source():
    figs = load_preflight_figures()
    for section in dataclasses.fields(figs):
        group = getattr(figs, section.name)
        for f in dataclasses.fields(group):
            fig = getattr(group, f.name)
            assert isinstance(fig, Figure), f"{section.name}.{f.name}"
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", fig.source.date)
            assert fig.source.title and fig.source.url


def test_domain_figures():
    f = load_preflight_figures()
    bytes_per_param = (
        f.memory.weights_bytes_per_param.value
        + f.memory.grads_bytes_per_param.value
        + f.memory.optimizer_bytes_per_param.value
    )
    assert bytes_per_param == 16  # bf16 + AdamW
    assert f.checkpoint.max_overhead_fraction.value == 0.02
    assert f.checkpoint.max_seconds.value == 10
    assert f.utilization.target_fraction.value == 0.85
    assert (f.cost.spot_discount_low.value, f.cost.spot_discount_high.value) == (0.6, 0.8)


SRC = {"s": {"title": "t", "url": "u", "date": "2026-01-01"}}


def test_missing_unknown_or_unsourced_figures_are_refused():
    from rackform.catalog import _sources

    src = _sources({"sources": SRC}, "x")
    good = {
        "max_overhead_fraction": {"v": 0.02, "src": "s"},
        "max_seconds": {"v": 10, "src": "s"},
        "max_goodput_loss": {"v": 0.01, "src": "s"},
        "pcie_x16_gbps": {"v": {5: 64}, "src": "s"},
    }
    assert (
        _section({"checkpoint": good}, "checkpoint", CheckpointFigures, src).max_seconds.value == 10
    )
    with pytest.raises(CatalogError, match="missing"):
        _section(
            {"checkpoint": {**good, "extra": {"v": 1, "src": "s"}}},
            "checkpoint",
            CheckpointFigures,
            src,
        )
    with pytest.raises(CatalogError, match="without a source"):
        _section({"checkpoint": {**good, "max_seconds": 10}}, "checkpoint", CheckpointFigures, src)
    with pytest.raises(CatalogError, match="is missing"):
        _section({}, "checkpoint", CheckpointFigures, src)
