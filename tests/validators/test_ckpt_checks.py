"""The checkpoint verdicts say how the slowest node wrote its checkpoint, next to its GB/s."""

from __future__ import annotations

from validators.ckpt_checks import checkpoint_verdicts

DIRECT = "1 file per rank, O_DIRECT, 1 x 8 MiB in flight per file, fsync'd"
CACHED = "1 file per rank, through the page cache (the filesystem refuses O_DIRECT), ..."


def rank(host, write, writer=None):
    s = (host, None, 1000, write, 3.0, [], 12)
    return s if writer is None else (*s, writer)


def write_check(ranks):
    return next(c for c in checkpoint_verdicts(ranks, 1.0) if c.name == "checkpoint_write")


def test_the_slowest_nodes_writer_is_named():
    c = write_check([rank("n1", 5.0, DIRECT), rank("n2", 0.5, CACHED)])
    assert c.measured == 0.5
    assert c.detail == f"torch.distributed.checkpoint, {CACHED} (slowest node n2)"


def test_the_slowest_rank_of_a_node_is_the_one_named():
    c = write_check([rank("n1", 5.0, DIRECT), rank("n1", 0.7, CACHED)])
    assert c.measured == 0.7 and CACHED in c.detail


def test_a_summary_without_the_writer_still_reads():
    c = write_check([rank("n1", 2.0)])
    assert c.measured == 2.0 and c.detail == "torch.distributed.checkpoint, fsync'd"
