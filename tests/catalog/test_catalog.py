"""The catalog: required entries exist and every figure carries a dated source."""

from __future__ import annotations

import dataclasses
import re

import pytest

from rackform.blueprint.targets.aws.catalog import load_aws_catalog
from rackform.catalog import CatalogError, Figure, _figures, load_catalog

GPUS = ["H100-SXM", "H100-PCIe", "H200-SXM", "A100-SXM-80GB", "L40S", "A10G", "L4"]
TYPES = [
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "g6e.xlarge",
    "g5.xlarge",
    "g6.xlarge",
]


def test_required_entries_present():
    cat = load_catalog()
    assert set(GPUS) <= set(cat.gpus)
    assert set(TYPES) <= set(load_aws_catalog().instances)


def test_every_number_has_a_dated_source():
    cat = load_catalog()
    for entry in [*cat.gpus.values(), *load_aws_catalog().instances.values()]:
        for f in dataclasses.fields(entry):
            value = getattr(entry, f.name)
            bare = isinstance(value, int | float) and not isinstance(value, bool)
            assert not bare, f"{entry.key}.{f.name} is a bare number"
            if isinstance(value, Figure):
                assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.source.date), (entry.key, f.name)
                assert value.source.url and value.source.title


def test_published_allreduce_thresholds():
    cat = load_catalog()
    assert cat.gpu("H100-SXM").allreduce_busbw_gbps_8gpu.value == 460
    assert cat.gpu("H200-SXM").allreduce_busbw_gbps_8gpu.value == 431
    assert cat.gpu("A100-SXM-80GB").allreduce_busbw_gbps_8gpu.value == 228
    assert cat.gpu("L40S").allreduce_busbw_gbps_8gpu is None


def test_p5_figures():
    p5 = load_aws_catalog().instance("p5.48xlarge")
    assert (p5.gpu, p5.gpu_count, p5.efa_interfaces.value, p5.nvme_drives.value) == (
        "H100-SXM",
        8,
        32,
        8,
    )


def test_loader_refuses_unsourced_numbers():
    with pytest.raises(CatalogError, match="a number without a source"):
        _figures({"memory_gb": 80}, {}, "gpus.yaml:X")
    with pytest.raises(CatalogError, match="is not in `sources`"):
        _figures({"memory_gb": {"v": 80, "src": "nowhere"}}, {}, "gpus.yaml:X")


def test_device_name_patterns_are_checked_and_tell_the_models_apart():
    import re

    from rackform import catalog

    gpus = load_catalog().gpus
    # The names drivers report (nvidia-smi --query-gpu=name): each matches its model alone.
    for name, model in (("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIe"),
                        ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S")):  # fmt: skip
        assert [k for k, g in gpus.items() if re.search(g.device_name, name)] == [model]
    broken = {
        k: catalog.GpuModel(**{**vars(g), "device_name": "H100 (SXM"}) for k, g in gpus.items()
    }
    with pytest.raises(CatalogError, match=r"gpus.yaml:H100-SXM.device_name: "):
        catalog._check_device_names(broken)
