"""All-reduce arithmetic and sweep, and reading NCCL's own log for the transport it chose."""

from __future__ import annotations

import os

import pytest
import torch
from smoke_helpers import one_rank_group

from validators import collectives


@pytest.fixture(scope="module")
def world1():
    with one_rank_group() as group:
        yield group


def test_busbw_factor_matches_nccl_tests():
    assert collectives.busbw_factor(2) == 1.0
    assert collectives.busbw_factor(8) == 1.75
    assert collectives.busbw_factor(16) == 1.875


def test_sizes_always_end_at_the_maximum():
    assert collectives.sizes(1, 64) == [1, 4, 16, 64]
    assert collectives.sizes(1, 100) == [1, 4, 16, 64, 100]
    assert collectives.sizes(8, 8) == [8]


def test_sweep_on_one_rank(world1):
    pts = collectives.sweep([4096, 65536], torch.device("cpu"), iters=2, repeats=2)
    assert [p.bytes for p in pts] == [4096, 65536]
    assert all(p.seconds > 0 and p.algbw_gbps > 0 for p in pts)
    assert all(p.busbw_gbps == 0 for p in pts)  # one rank moves nothing over a fabric


# Lines in the shape NCCL 2.2x writes with NCCL_DEBUG=INFO (host:pid:tid [dev] NCCL INFO ...).
IB_LOG = """\
hgx-01:4242:4300 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
hgx-01:4242:4300 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>
hgx-01:4242:4300 [0] NCCL INFO Using network IB
hgx-01:4242:4300 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
hgx-01:4242:4300 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
hgx-01:4242:4300 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA
"""
FALLBACK_LOG = """\
p5-a:77:90 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so
p5-a:77:90 [0] NCCL INFO NET/Socket : Using [0]eth0:172.31.0.5<0>
p5-a:77:90 [0] NCCL INFO Using network Socket
"""


def test_read_transport_from_a_log(tmp_path):
    (tmp_path / "nccl.rank0.log").write_text(IB_LOG)
    t = collectives.read_transport(str(tmp_path / "nccl.rank0.log"))
    assert t.network == "IB"
    assert t.paths == ("P2P/CUMEM/read", "NET/IB/0/GDRDMA")
    assert "network IB" in t.describe()


def test_read_transport_globs_nccl_placeholders(tmp_path):
    (tmp_path / "nccl.p5-a.77.log").write_text(FALLBACK_LOG)
    t = collectives.read_transport(str(tmp_path / "nccl.%h.%p.log"))
    assert t.network == "Socket"


def test_no_log_or_no_lines_is_none(tmp_path):
    assert collectives.read_transport(str(tmp_path / "missing.log")) is None
    (tmp_path / "empty.log").write_text("nothing about networks\n")
    assert collectives.read_transport(str(tmp_path / "empty.log")) is None


def test_network_matches_fabric():
    assert collectives.network_matches("infiniband", "IB")
    assert collectives.network_matches("roce", "IB")
    assert collectives.network_matches("efa", "AWS Libfabric")
    assert collectives.network_matches("efa", "Libfabric")
    assert collectives.network_matches("ethernet", "Socket")
    # The classic silent misconfiguration: EFA declared, NCCL fell back to TCP sockets.
    assert not collectives.network_matches("efa", "Socket")
    assert not collectives.network_matches("infiniband", "Socket")
    assert not collectives.network_matches("infiniband", None)


def test_enable_nccl_log_keeps_a_users_settings(tmp_path, monkeypatch):
    monkeypatch.delenv("NCCL_DEBUG_FILE", raising=False)
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    path = collectives.enable_nccl_log(str(tmp_path), 3)
    assert path == str(tmp_path / "nccl.rank3.log")
    assert os.environ["NCCL_DEBUG"] == "WARN"
    assert os.environ["NCCL_DEBUG_FILE"] == path
