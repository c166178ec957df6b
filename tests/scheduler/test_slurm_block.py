"""Placement by NVLink domain through a real Slurm with the topology/block plugin: Debian 13's
Slurm 24.11 in a root built once into the cache (tests/slurm_block_local.py), one slurmd per
node of the topology.conf it is given.

The topology is this module's `topology_conf` fixture: the topology.conf the plan renders
(`rackform.plan.slurm_topology.topology_conf`, what the slurm role writes) for a small NVL72
site. The tests need at least two blocks of at least two nodes each, and read the blocks
from the file itself, so they hold for any such file.
"""

from __future__ import annotations

import re
import time

import pytest
from slurm_block_local import GPUS_PER_NODE, BlockSlurm, block_cluster, nodes_of, occupy
from topology_bp import nvl72_site, write

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.slurm_topology import topology_conf as topology_conf_of
from rackform.scheduler.hostlist import expand


# The file the slurm role writes for a site of two GB200 NVL72 racks, two compute trays racked
# in each so far (each rack one NVLink domain), as the plan renders it: Slurm's block format
# (topology.conf(5), section "topology/block": https://slurm.schedmd.com/topology.conf.html,
# read 2026-12-05): each `BlockName` with its nodes, then `BlockSizes`, the planning base block
# size (each block has at least that many nodes) and the larger sizes Slurm builds by pairing
# contiguous blocks.
@pytest.fixture(scope="module")
def topology_conf(tmp_path_factory) -> str:
    site = write(tmp_path_factory.mktemp("nvl72"), nvl72_site(racks=2, trays=2))
    rendered = topology_conf_of(compile_effective(load_effective(site)).topology)
    assert rendered.plugin == "topology/block"
    assert "BlockName=nvl-r1 Nodes=gb1-t01,gb1-t02\n" in rendered.text
    assert rendered.text.endswith("BlockSizes=2,4\n")
    return rendered.text


@pytest.fixture(scope="module")
def block_slurm(tmp_path_factory, topology_conf) -> BlockSlurm:
    started = time.monotonic()
    cluster = block_cluster(tmp_path_factory.mktemp("slurm-block"), topology_conf)
    built = "cached" if cluster.built_s is None else f"built in {cluster.built_s:.0f} s"
    print(
        f"\nSlurm {cluster.version} (root {built}) up with {len(cluster.topology.nodes)} nodes "
        f"in {time.monotonic() - started:.0f} s"
    )
    yield cluster
    cluster.slurm.shutdown()


@pytest.fixture
def block(block_slurm: BlockSlurm) -> BlockSlurm:
    """The cluster, clean: no job, every node in service."""
    block_slurm.slurm.clean()
    return block_slurm


def base_size(block: BlockSlurm) -> int:
    sizes = [len(members) for members in block.topology.blocks.values()]
    assert len(sizes) >= 2 and min(sizes) >= 2, "these tests need two blocks of two nodes or more"
    return min(sizes)


def reason(block: BlockSlurm, job: str) -> str:
    return block.slurm.run("squeue", "--noheader", "-j", job, "-o", "%r").stdout.strip()


def test_the_cluster_runs_the_block_plugin_on_the_given_file(block):
    conf = block.slurm.run("scontrol", "show", "config").stdout
    assert re.search(r"^TopologyPlugin\s*=\s*topology/block$", conf, re.MULTILINE), conf
    shown = block.slurm.run("scontrol", "show", "topology").stdout
    for name, members in block.topology.blocks.items():
        line = next(ln for ln in shown.splitlines() if f"BlockName={name} " in ln)
        listed = re.search(r"Nodes=(\S+)", line)
        assert listed and expand(listed.group(1)) == list(members), line


def test_a_segment_lands_within_one_block(block):
    size = base_size(block)
    first = next(iter(block.topology.blocks))
    # The first block's first node busy: the idle nodes are then one run in slurm.conf's order
    # (the first block's others, then the next block's), and Slurm without a topology takes the
    # first of them, across two domains (seen with topology/default: the assertions below fail).
    # The block plugin takes a whole block.
    occupy(block, block.topology.blocks[first][0])
    job = block.slurm.sbatch(f"-N{size}", f"--segment={size}", "--wrap", "sleep 300")
    block.slurm.wait_state(job, "RUNNING")
    got = nodes_of(block, job)
    assert len(got) == size
    assert len({block.topology.block_of(n) for n in got}) == 1, got
    assert block.topology.block_of(got[0]) != first


def test_a_segment_waits_for_a_whole_block_rather_than_splitting(block):
    size = base_size(block)
    held = {name: occupy(block, members[-1]) for name, members in block.topology.blocks.items()}
    # Every block has a node busy: enough idle nodes in all, none enough in one.
    job = block.slurm.sbatch(f"-N{size}", f"--segment={size}", "--wrap", "sleep 300")
    time.sleep(3)  # a scheduling pass or more
    assert block.slurm.state(job) == "PENDING", reason(block, job)
    freed = next(iter(held))
    block.slurm.run("scancel", held[freed])
    block.slurm.wait_state(job, "RUNNING")
    assert {block.topology.block_of(n) for n in nodes_of(block, job)} == {freed}


def test_a_job_of_two_segments_takes_each_within_a_block(block):
    size = base_size(block)
    job = block.slurm.sbatch(f"-N{2 * size}", f"--segment={size}", "--wrap", "sleep 300")
    block.slurm.wait_state(job, "RUNNING")
    got = nodes_of(block, job)
    per_block: dict[str, int] = {}
    for n in got:
        per_block[block.topology.block_of(n)] = per_block.get(block.topology.block_of(n), 0) + 1
    assert len(got) == 2 * size and all(c % size == 0 for c in per_block.values()), per_block


def test_a_segment_larger_than_the_base_block_is_refused_at_submission(block):
    # sbatch(1) of this Slurm, --segment: "The segment size must be less than or equal to the
    # planning base block size" (BlockSizes' first); the controller refuses such a job.
    largest = max(len(m) for m in block.topology.blocks.values())
    too_big = f"--segment={largest + 1}"
    done = block.slurm.run(
        "sbatch", "--parsable", f"-N{largest + 1}", too_big, "--wrap", "true", check=False
    )
    assert done.returncode != 0, done.stdout
    assert "Requested topology configuration is not available" in done.stderr, done.stderr


def test_a_job_larger_than_a_block_without_segments_spans_the_aggregated_block(block):
    # topology.conf(5), topology/block: blocks are paired with contiguous blocks into higher
    # level blocks of the sizes BlockSizes enforces; a job no base block holds (and no
    # --segment) is placed within one of those.
    shown = block.slurm.run("scontrol", "show", "topology").stdout
    aggregated = [ln for ln in shown.splitlines() if ln.startswith("AggregatedBlock=")]
    assert aggregated, shown
    size = base_size(block)
    job = block.slurm.sbatch(f"-N{size + 1}", "--wrap", "sleep 300")
    block.slurm.wait_state(job, "RUNNING")
    got = nodes_of(block, job)
    assert len(got) == size + 1 and len({block.topology.block_of(n) for n in got}) == 2, got


def gres_per_node(block: BlockSlurm, job: str) -> dict[str, str]:
    """Each node's GRES in the job's allocation, from `scontrol show job -d`'s per-node lines
    (`Nodes=<hostlist> CPU_IDs=... Mem=... GRES=gpu:<type>:<n>(IDX:...)`)."""
    out = block.slurm.run("scontrol", "show", "job", "-d", job).stdout
    got = {}
    for m in re.finditer(r"^\s*Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S+)", out, re.MULTILINE):
        for n in expand(m.group(1)):
            got[n] = m.group(2)
    return got


def test_gpus_are_counted_per_node_within_the_block(block):
    size = base_size(block)
    job = block.slurm.sbatch(
        f"-N{size}", f"--segment={size}", f"--gres=gpu:{GPUS_PER_NODE}", "--wrap", "sleep 300"
    )
    block.slurm.wait_state(job, "RUNNING")
    got = gres_per_node(block, job)
    assert sorted(got) == sorted(nodes_of(block, job))
    want = f"gpu:h100_sxm:{GPUS_PER_NODE}(IDX:0-{GPUS_PER_NODE - 1})"
    assert set(got.values()) == {want}, got
    assert len({block.topology.block_of(n) for n in got}) == 1


def test_more_gpus_per_node_than_a_node_has_are_refused(block):
    done = block.slurm.run(
        "sbatch", "-N1", f"--gres=gpu:{GPUS_PER_NODE + 1}", "--wrap", "true", check=False
    )
    assert done.returncode != 0 and "not available" in done.stderr, done.stderr


def test_the_resumable_jobs_options_from_the_plan_place_it_one_segment_a_block(tmp_path, block):
    """The options the slurm role's rackform-resumable.sbatch carries for the fixture's site
    (the plan's `slurm_resumable_sbatch`: every node, the smoke job's `--segment`), submitted as
    they are but for the GRES type: the plan asks for GB200's (`gpu:gb200:4`), and this Slurm's
    nodes advertise theirs as h100_sxm (tests/slurm_local.py), so the count is asked untyped."""
    site = write(tmp_path, nvl72_site(racks=2, trays=2))
    options = compile_effective(load_effective(site)).group_vars["slurm_resumable_sbatch"]
    assert f"--gres=gpu:gb200:{GPUS_PER_NODE}" in options
    size = base_size(block)
    assert options[-1] == f"--segment={size}"  # the smoke job's placement, per block
    asked = [f"--gres=gpu:{GPUS_PER_NODE}" if o.startswith("--gres=") else o for o in options]
    job = block.slurm.sbatch(*asked, "--wrap", "sleep 300")
    block.slurm.wait_state(job, "RUNNING")
    got = nodes_of(block, job)
    per_block: dict[str, int] = {}
    for n in got:
        per_block[block.topology.block_of(n)] = per_block.get(block.topology.block_of(n), 0) + 1
    assert len(got) == len(block.topology.nodes) and set(per_block.values()) == {size}, per_block
