"""The catalog's GPU systems (HGX boards, NVL72 racks) and the Blackwell GPUs they carry: every
figure sourced, what nobody published listed as still to be measured, never guessed."""

from __future__ import annotations

import re

import pytest

from rackform.catalog import CatalogError, Figure, load_catalog
from rackform.catalog.systems import _system, load_systems, system_of_gpu


def test_blackwell_gpus_and_their_systems():
    gpus, systems = load_catalog().gpus, load_systems()
    assert {"B200", "B300", "GB200", "GB300"} <= set(gpus)
    nvl = systems["GB200-NVL72"]
    # 18 trays x 4 GPUs = 72 in one domain, 9 switch trays, Grace hosts, IMEX across trays.
    assert (nvl.domain_nodes, nvl.node_gpus, nvl.domain_gpus) == (18, 4, 72)
    assert (nvl.nvlink_switch_trays.value, nvl.host_arch, nvl.imex) == (9, "arm64", True)
    hgx = systems["HGX-B200"]
    assert (hgx.domain_gpus, hgx.rack_scale, hgx.host_arch) == (8, False, "amd64")
    assert gpus["B200"].bf16_dense_tflops.value == 2250
    assert gpus["GB200"].bf16_dense_tflops.value == 2500
    assert system_of_gpu("GB300").key == "GB300-NVL72" and system_of_gpu("H100-SXM") is None


def test_every_system_figure_is_sourced_or_named_still_to_be_measured():
    for s in load_systems().values():
        for name in ("allreduce_busbw_gbps_domain", "alltoall_busbw_gbps_domain"):
            # Nobody has published these for Blackwell systems yet: none guessed.
            assert getattr(s, name) is None and name in s.to_be_measured, (s.key, name)
        for name, value in vars(s).items():
            assert not (isinstance(value, int | float) and not isinstance(value, bool)), name
            if isinstance(value, Figure):
                assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.source.date), (s.key, name)
                assert name not in s.to_be_measured


def test_the_loader_refuses_what_is_both_given_and_pending_and_unknown_models():
    src = {"s": load_systems()["HGX-B200"].gpus_per_node.source}
    base = {"description": "x", "gpu": "B200", "gpus_per_node": {"v": 8, "src": "s"},
            "max_nodes_per_domain": {"v": 1, "src": "s"}, "nvlink_gbps_per_gpu": {"v": 1, "src": "s"},
            "host_arch": "amd64", "imex": False}  # fmt: skip
    with pytest.raises(CatalogError, match="given and listed as to be measured"):
        pending = {"power_kw": {"v": 14, "src": "s"}, "to_be_measured": ["power_kw"]}
        _system("X", {**base, **pending}, src, {"B200"})
    with pytest.raises(CatalogError, match="'nvlinks' is not a figure a system has"):
        _system("X", {**base, "to_be_measured": ["nvlinks"]}, src, {"B200"})
    with pytest.raises(CatalogError, match=r"is not a GPU model of gpus\.yaml"):
        _system("X", {**base, "gpu": "Z100"}, src, {"B200"})
    with pytest.raises(CatalogError, match="host_arch: one of amd64, arm64"):
        _system("X", {**base, "host_arch": "x86"}, src, {"B200"})


def test_device_names_tell_the_blackwell_models_apart():
    gpus = load_catalog().gpus
    for name, model in (("NVIDIA B200", "B200"), ("NVIDIA GB200", "GB200"),
                        ("NVIDIA B300 SXM6 AC", "B300"), ("NVIDIA GB300", "GB300")):  # fmt: skip
        assert [k for k, g in gpus.items() if re.search(g.device_name, name)] == [model]
