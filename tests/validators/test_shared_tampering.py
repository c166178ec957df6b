"""The shared tier's checks (validators/shared_checks.py) run as root in directories any user of
the tier can make first. Each case plants what would fool them: a link where the node's own
directory or its probe file goes (to a file standing in for /etc/shadow, outside the tier), a
directory of someone else's, one anyone can write into, a token a user wrote for a peer. The
file outside is never written, and a check never passes on a figure it did not measure on its
own file."""

from __future__ import annotations

import json
import os
import time

import pytest

from validators import shared_checks
from validators.report import FAIL, NOT_RUN, PASS

MB = 16
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file away")


@pytest.fixture
def shadow(tmp_path):
    """A file outside the tier that a write through a planted link would clobber."""
    outside = tmp_path / "etc"
    outside.mkdir()
    f = outside / "shadow"
    f.write_text("root:$6$secret:19000:0:99999:7:::\n")
    return f


@pytest.fixture
def tier(tmp_path):
    mount = tmp_path / "tier"
    (mount / ".rackform").mkdir(parents=True)
    os.chmod(mount / ".rackform", 0o1777)
    return mount


def read(mount, node="n1"):
    return shared_checks.read_check(str(mount), None, MB, 0.0001, 30, node)


def untouched(shadow) -> None:
    assert shadow.read_bytes() == b"root:$6$secret:19000:0:99999:7:::\n"
    assert sorted(p.name for p in shadow.parent.iterdir()) == ["shadow"]


def test_a_link_in_place_of_the_nodes_directory_is_refused(tier, shadow):
    (tier / ".rackform" / "n1").symlink_to(shadow.parent)
    c = read(tier)
    assert c.status == FAIL and c.measured is None, c
    assert f"{tier}/.rackform/n1 is a symbolic link: refusing to use it" in c.detail
    untouched(shadow)


def test_a_link_in_place_of_the_tiers_own_directory_is_refused(tmp_path, shadow):
    mount = tmp_path / "tier"
    mount.mkdir()
    (mount / ".rackform").symlink_to(shadow.parent)
    c = read(mount)
    assert c.status == FAIL and "is a symbolic link" in c.detail, c
    v = shared_checks.visible_check(str(mount), "r1", "n1", ["n1", "n2"], 0)
    assert v.status == FAIL and "is a symbolic link" in v.detail, v
    untouched(shadow)


def test_a_link_where_the_probe_is_written_never_writes_through(tier, shadow):
    d = tier / ".rackform" / "n1"
    d.mkdir()
    (d / "read-probe.tmp").symlink_to(shadow)  # the name the probe was once written under
    c = read(tier)
    assert c.status == PASS and c.measured > 0, c
    untouched(shadow)
    probe = d / "read-probe"
    assert not probe.is_symlink() and probe.stat().st_size == MB << 20


def test_a_link_at_the_probe_is_replaced_never_measured(tier, tmp_path):
    # A file the right size elsewhere (a fast local disk, the page cache): reading it through
    # the link would be a rate the tier never gave.
    fast = tmp_path / "fast"
    fast.write_bytes(b"\0" * (MB << 20))
    before = fast.stat().st_mtime_ns
    d = tier / ".rackform" / "n1"
    d.mkdir()
    (d / "read-probe").symlink_to(fast)
    c = read(tier)
    assert c.status == PASS and "a probe file" in c.detail, c
    probe = d / "read-probe"
    assert not probe.is_symlink() and probe.read_bytes() != fast.read_bytes()
    assert fast.stat().st_mtime_ns == before


@root_only
def test_a_directory_someone_else_made_for_the_node_is_refused(tier, shadow):
    d = tier / ".rackform" / "n1"
    d.mkdir()
    os.chown(d, 4242, 4242)
    c = read(tier)
    assert c.status == FAIL and c.measured is None, c
    assert "is owned by uid 4242, not by the user this node writes as there" in c.detail
    assert list(d.iterdir()) == []


def test_a_directory_anyone_can_write_into_is_refused(tier):
    d = tier / ".rackform" / "n1"
    d.mkdir()
    os.chmod(d, 0o777)  # anyone could swap the probe between its write and its read
    c = read(tier)
    assert c.status == FAIL and "is writable by others (mode 777)" in c.detail, c
    assert list(d.iterdir()) == []


def test_the_visibility_tokens_are_written_through_no_link(tier, shadow):
    run = tier / ".rackform" / "validate" / "r1"
    run.mkdir(parents=True)
    (run / "n1").mkdir()
    (run / "n1" / ".token.tmp").symlink_to(shadow)  # the name the token was once written under
    c = shared_checks.visible_check(str(tier), "r1", "n1", ["n1"], 0)
    assert c.status == PASS, c
    untouched(shadow)
    (run / "n2").symlink_to(shadow.parent)
    c = shared_checks.visible_check(str(tier), "r1", "n2", ["n1", "n2"], 0)
    assert c.status == FAIL and "r1/n2 is a symbolic link" in c.detail, c
    untouched(shadow)


@root_only
def test_a_token_a_user_wrote_for_a_peer_does_not_count(tier):
    run = tier / ".rackform" / "validate" / "r1"
    (run / "n2").mkdir(parents=True)
    token = run / "n2" / "token"
    token.write_text(json.dumps({"node": "n2", "run": "r1", "host": "n2", "time": time.time()}))
    os.chown(token, 4242, 4242)  # written by a user of the tier, not by a node
    c = shared_checks.visible_check(str(tier), "r1", "n1", ["n1", "n2"], 0.3, 0.05)
    assert c.status == FAIL and c.measured == "1/2 nodes", c


def test_a_probe_of_its_own_is_kept_across_runs(tier):
    first = read(tier)
    probe = tier / ".rackform" / "n1" / "read-probe"
    before = probe.stat().st_mtime_ns
    again = shared_checks.read_check(str(tier), None, MB, None, 30, "n1")
    assert first.status == PASS and again.status == NOT_RUN and again.measured > 0
    assert probe.stat().st_mtime_ns == before
    assert sorted(p.name for p in probe.parent.iterdir()) == ["read-probe"]


@root_only
def test_a_token_the_export_squashed_counts_on_the_node_that_serves_it(tier):
    # NFS with root_squash, one node serving the export: that node writes its token as root,
    # its clients' tokens arrive owned by nobody. Each is a node's token on every node.
    import pwd

    nobody = pwd.getpwnam("nobody").pw_uid
    run = tier / ".rackform" / "validate" / "r1"
    (run / "n2").mkdir(parents=True)
    token = run / "n2" / "token"
    token.write_text(json.dumps({"node": "n2", "run": "r1", "host": "n2", "time": time.time()}))
    os.chown(token, nobody, nobody)  # n2, a client: root squashed
    c = shared_checks.visible_check(str(tier), "r1", "n1", ["n1", "n2"], 0.3, 0.05)
    assert c.status == PASS and c.measured == "2/2 nodes", c
