"""AWS's UltraServers in its catalog (`instances.yaml: ultraservers`): P6e-GB200 as AWS names
it, each figure with its dated source, its NVLink domain its capacity block (as many instances
as the UltraServer, a whole or part of an NVL72), unpriced where no price is recorded, and the
loader refusing what cannot be one (checked against systems.yaml)."""

from __future__ import annotations

import re

import pytest

from rackform.blueprint.targets.aws.catalog import _ultraserver, load_aws_catalog
from rackform.catalog import CatalogError, Figure, _sources
from rackform.catalog.systems import load_systems

SOURCES = _sources(
    {
        "sources": {
            "s": {"title": "t", "url": "https://example.invalid/", "date": "2026-12-05"},
        }
    },
    "test",
)


def entry(**over):
    raw = {
        "instance_type": "p6e-gb200.36xlarge",
        "gpu": "GB200",
        "system": "GB200-NVL72",
        "instances": {"v": 9, "src": "s"},
        "gpus_per_instance": {"v": 4, "src": "s"},
        "nvlink_domain": "capacity-block",
        "domain_source": "s",
        "arch": "arm64",
        "capacity_block_usd_hr": None,
    }
    return {**raw, **over}


def test_p6e_gb200_ultraservers_as_aws_names_them():
    us = load_aws_catalog().ultraservers
    assert set(us) >= {"u-p6e-gb200x36", "u-p6e-gb200x72"}
    for key, instances in (("u-p6e-gb200x36", 9), ("u-p6e-gb200x72", 18)):
        u = us[key]
        assert (u.instance_type, u.gpu, u.system, u.arch) == (
            "p6e-gb200.36xlarge",
            "GB200",
            "GB200-NVL72",
            "arm64",
        )
        # Its NVLink domain is its capacity block: every instance of the UltraServer.
        assert u.domain_instances == instances
        # AWS's name says its GPUs: x36 and x72.
        assert u.domain_gpus == int(key.rsplit("x", 1)[1])
        assert "CapacityBlockId" in u.domain_source.title
        # Unpriced, as P6-B200: no price read from AWS, none guessed.
        assert u.capacity_block_usd_hr is None


def test_every_ultraserver_figure_has_a_dated_source():
    for u in load_aws_catalog().ultraservers.values():
        for f in (u.instances, u.gpus_per_instance):
            assert isinstance(f, Figure)
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", f.source.date)
            assert f.source.url.startswith("https://docs.aws.amazon.com/")


def test_the_largest_ultraserver_is_one_whole_nvl72_domain():
    system = load_systems()["GB200-NVL72"]
    x72 = load_aws_catalog().ultraservers["u-p6e-gb200x72"]
    assert x72.domain_instances == system.domain_nodes
    assert x72.domain_gpus == system.domain_gpus


@pytest.mark.parametrize(
    ("over", "says"),
    [
        ({"instances": {"v": 19, "src": "s"}}, "more than one GB200-NVL72 domain joins"),
        ({"gpus_per_instance": {"v": 8, "src": "s"}}, "is not a tray of GB200-NVL72"),
        ({"gpu": "B200"}, "is not a tray of GB200-NVL72"),
        ({"system": "NVL576"}, "is not a system of systems.yaml"),
        ({"arch": "x86_64"}, "GB200-NVL72's hosts are arm64"),
        ({"arch": "sparc"}, "is not one of"),
        ({"nvlink_domain": "placement-group"}, "nvlink_domain: one of capacity-block"),
        ({"domain_source": "nowhere"}, "domain_source: needs a source"),
        ({"instances": 9}, "a number without a source"),
        ({"price": 1}, "a number without a source"),
    ],
)
def test_the_loader_refuses_what_cannot_be_an_ultraserver(over, says):
    with pytest.raises(CatalogError, match=re.escape(says)):
        _ultraserver("u-test", entry(**over), SOURCES)


def test_a_well_formed_entry_loads():
    u = _ultraserver("u-test", entry(), SOURCES)
    assert (u.domain_instances, u.domain_gpus) == (9, 36)
