"""Which job on nodes being taken goes on without them and which is requeued (lifecycle/elastic.py):
the decision alone, every rule and the tries to fool it; the Slurm calls are
test_elastic_release.py's."""

from __future__ import annotations

import pytest

from rackform.lifecycle.elastic import (
    LEAVE,
    REDUCED,
    REQUEUE,
    SHRINK,
    Held,
    Released,
    decide,
    min_nodes,
)
from validators.elastic import ELASTIC_MARK

NODES = ("gpu-01", "gpu-02", "gpu-03", "gpu-04")


def job(comment="rackform-elastic:min=2", state="RUNNING", nodes=NODES, host="gpu-01") -> Held:
    return Held("41", state, tuple(nodes), host, comment)


def test_the_launchers_mark_is_the_one_heal_reads():
    assert min_nodes(f"{ELASTIC_MARK}3") == 3


def test_an_elastic_job_is_shrunk_off_the_node_taken_and_keeps_its_other_nodes():
    d = decide(job(), {"gpu-03"})
    assert (d.action, d.keep) == (SHRINK, ("gpu-01", "gpu-02", "gpu-04"))
    assert d.why == "3 of 4 nodes, its minimum 2"


def test_two_nodes_taken_at_once_the_job_goes_on_while_it_stays_at_its_minimum():
    assert decide(job(), {"gpu-02", "gpu-03"}).keep == ("gpu-01", "gpu-04")
    d = decide(job(comment="rackform-elastic:min=3"), {"gpu-02", "gpu-03"})
    assert (d.action, d.why) == (REQUEUE, "2 of 4 nodes left, below its minimum 3")


def test_a_job_shrunk_once_is_shrunk_again_until_its_minimum_then_requeued():
    once = decide(job(), {"gpu-04"})
    twice = decide(job(nodes=once.keep), {"gpu-03"})
    assert twice.keep == ("gpu-01", "gpu-02")
    assert decide(job(nodes=twice.keep), {"gpu-02"}).action == REQUEUE


def test_every_node_taken_is_a_requeue():
    assert decide(job(comment="rackform-elastic:min=1"), set(NODES)).action == REQUEUE


@pytest.mark.parametrize("first", ["gpu-01", "gpu-02"])
def test_its_first_node_or_batch_host_taken_is_a_requeue(first):
    # gpu-01: the first node (rendezvous) and batch host; gpu-02: a batch host Slurm put there.
    d = decide(job(comment="rackform-elastic:min=1", host=first), {first})
    assert d.action == REQUEUE and first in d.why


@pytest.mark.parametrize(
    "comment",
    [
        "",
        "(null)",
        "elastic",  # a name-like comment
        "rackform-elastic",  # no minimum
        "rackform-elastic:min=0",
        "rackform-elastic:min=two",
        "rackform-elastic:min=1 and more",
        "not rackform-elastic:min=1",
        "rackform-elastic:min=1\nrackform-elastic:min=1",
    ],
)
def test_anything_but_the_exact_mark_is_not_elastic(comment):
    d = decide(job(comment=comment), {"gpu-03"})
    assert (d.action, d.why) == (REQUEUE, "not an elastic job (no rackform-elastic mark)")


@pytest.mark.parametrize("state", ["COMPLETING", "SUSPENDED", "PENDING", "CONFIGURING"])
def test_an_elastic_job_that_does_not_run_is_requeued_as_before(state):
    assert decide(job(state=state), {"gpu-03"}).action == REQUEUE


def test_a_job_that_no_longer_holds_the_node_is_left_alone():
    # Slurm took a failed node out of a --no-kill job between the two reads.
    assert decide(job(nodes=NODES[:2]), {"gpu-03"}).action == LEAVE


def test_a_node_name_rackform_would_not_pass_on_is_a_requeue():
    d = decide(job(nodes=("gpu-01", "gpu 02", "gpu-03"), comment="rackform-elastic:min=1"),
               {"gpu-03"})  # fmt: skip
    assert d.action == REQUEUE


def test_what_became_of_a_job_reads_as_a_sentence_and_as_json():
    r = Released("41", REDUCED, "3 of 4 nodes, its minimum 2", ("gpu-01", "gpu-02", "gpu-04"))
    assert r.ok and r.detail.startswith("went on at reduced size on gpu-01,gpu-02,gpu-04")
    assert r.as_json() == {"job": "41", "how": "reduced", "why": "3 of 4 nodes, its minimum 2",
                           "nodes": ["gpu-01", "gpu-02", "gpu-04"]}  # fmt: skip
