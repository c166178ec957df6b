"""NVIDIA's XID catalog as rackform reads it: every code's bucket has an action, the codes a
data-centre fleet meets first get the action NVIDIA recommends, a policy's own action wins,
and a code the catalog lacks is monitored, saying so."""

from __future__ import annotations

import pytest

from rackform.health import xid


def test_every_code_has_a_known_bucket_and_action():
    cat = xid.catalog()
    assert len(cat) >= 30
    assert all(x.action in ("monitor", "drain", "reset", "reboot") for x in cat.values())


@pytest.mark.parametrize(
    ("code", "action"),
    [(79, "reboot"), (48, "reset"), (74, "reset"), (95, "reset"), (119, "reset"),
     (13, "monitor"), (31, "monitor"), (94, "monitor"), (63, "monitor"), (54, "drain")],
)  # fmt: skip
def test_nvidias_recommendation(code, action):
    got, why = xid.action(code, {})
    assert got == action and why.startswith(f"XID {code} (") and "NVIDIA's" in why


def test_the_policy_names_its_own_action():
    assert xid.action(13, {13: "drain"}) == (
        "drain",
        "XID 13 (graphics engine exception): the health policy's action",
    )
    assert xid.action(999, {999: "reboot"})[0] == "reboot"


def test_a_code_the_catalog_lacks_is_monitored_and_named():
    assert xid.action(999, {}) == (
        "monitor",
        "XID 999 is not in NVIDIA's catalog as rackform has it: monitor",
    )
