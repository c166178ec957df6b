"""smoke_train's Slurm branch without a cluster: the sbatch line the role renders for a compiled
blueprint (one job over every node, whole nodes, the GPUs as GRES, never requeued), the shell
that watches the job on the submitting host until it has ended, and how the job's last record
is read. Slurm is not installed on this machine: a recording scontrol stands in for it on PATH
(the e2e, tests/e2e/test_slurm_vms.py, runs the branch against the testbed's real cluster)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import role_vars
import yaml
from gpu_collection import ROLES_DIR

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.model import thaw

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROLES_DIR / "smoke_train"
OWN = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
HOSTS = ["hgx-01", "hgx-02", "hgx-03", "hgx-04"]
RUN = "0123456789abcdef" * 3


def render(name: str, variables: dict, hosts: list[str] = HOSTS, host: str | None = None) -> object:
    """One of the role's private vars, as Ansible renders it for `host` (the play's first)."""
    return role_vars.render("smoke_train", name, variables, hosts, host, _smoke_train_run_id=RUN)


def example_vars() -> dict:
    plan = compile_effective(load_effective(ROOT / "blueprints" / "baremetal-slurm.yaml"))
    return dict(plan.group_vars)


def test_one_job_asks_for_every_node_whole_with_its_gpus():
    argv = [str(a) for a in render("_smoke_train_sbatch", example_vars())]
    assert argv[:2] == ["sbatch", "--parsable"]
    opts = dict(a.split("=", 1) for a in argv[2:-2] if "=" in a)
    assert (
        opts
        == {
            "--job-name": f"rackform-smoke-{RUN[:12]}",
            "--nodes": "4",
            "--nodelist": "hgx-01,hgx-02,hgx-03,hgx-04",
            "--ntasks-per-node": "1",
            "--mem": "0",
            "--time": "17",  # the role's deadline: 900 s + 120 s, in minutes, rounded up
            "--chdir": "/opt/rackform/smoke",
            "--output": f"/opt/rackform/smoke/reports/{RUN[:12]}-slurm-%j.out",
            "--gres": "gpu:h100_sxm:8",
        }
    )
    assert "--exclusive" in argv and "--no-requeue" in argv
    assert argv[-2] == "--wrap"
    assert shlex.split(argv[-1]) == [
        "exec", "srun", "--whole", "--label", "--kill-on-bad-exit=0",
        "/bin/sh", f"/opt/rackform/smoke/job-{RUN[:12]}.sh",
    ]  # fmt: skip


def test_a_partition_and_no_gpus_are_asked_as_given():
    variables = {
        **example_vars(),
        "smoke_train_slurm_gres": "",
        "smoke_train_slurm_partition": "batch",
    }
    argv = [str(a) for a in render("_smoke_train_sbatch", variables)]
    assert "--partition=batch" in argv and not any(a.startswith("--gres") for a in argv)


def test_nvl72_racks_place_the_job_one_segment_per_domain():
    """The plan's placement reaches sbatch: the example's two NVL72 racks (36 trays) run the
    smoke job as two segments of 18, each inside one NVLink domain (Slurm's topology/block)."""
    plan = compile_effective(load_effective(ROOT / "blueprints" / "nvl72-slurm.yaml"))
    hosts = [n["name"] for n in plan.group_vars["slurm_nodes"]]
    argv = [str(a) for a in render("_smoke_train_sbatch", thaw(plan.group_vars), hosts)]
    assert argv[argv.index("--gres=gpu:gb200:4") + 1] == "--segment=18"
    assert "--nodes=36" in argv
    # A blueprint without a topology asks for no placement, as before.
    assert not any(a.startswith(("--segment", "--switches")) for a in render(
        "_smoke_train_sbatch", example_vars()))  # fmt: skip


def scontrol(tmp_path: Path, states: list[str]) -> Path:
    """A scontrol that answers `show job` with each state in turn (the last one after),
    logging its calls."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "states").write_text("\n".join(states) + "\n")
    script = f"""#!/bin/sh
echo "$*" >> {tmp_path}/calls
s=$(head -n1 {tmp_path}/states)
[ $(wc -l < {tmp_path}/states) -gt 1 ] && sed -i 1d {tmp_path}/states
[ "$s" = gone ] && {{ echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; }}
echo "JobId=7 JobName=rackform-smoke JobState=$s Reason=None ExitCode=0:0 NodeList=hgx-[01-04] BatchHost=hgx-01"
"""
    (bindir / "scontrol").write_text(script)
    (bindir / "scontrol").chmod(0o755)
    return bindir


def watch(tmp_path: Path, bindir: Path) -> str:
    end = tmp_path / "job.slurm"
    subprocess.run(
        ["/bin/sh", "-c", OWN["_smoke_train_slurm_watch"], "watch", str(end), "7"],
        env={"PATH": f"{bindir}:/usr/bin:/bin"},
        check=True,
        timeout=60,
    )
    return end.read_text()


def test_the_watcher_writes_the_jobs_last_record_once_it_has_ended(tmp_path):
    bindir = scontrol(tmp_path, ["PENDING", "RUNNING", "COMPLETING", "COMPLETED"])
    assert " JobState=COMPLETED " in watch(tmp_path, bindir)
    assert (tmp_path / "calls").read_text().splitlines() == ["--oneliner show job 7"] * 4


def test_a_job_slurm_no_longer_knows_ends_the_watch_with_what_scontrol_said(tmp_path):
    bindir = scontrol(tmp_path, ["RUNNING", "gone"])
    assert "Invalid job id specified" in watch(tmp_path, bindir)


def test_the_record_is_read_from_the_watchers_file_or_from_the_cancellation():
    line = (
        "JobId=7 JobName=rackform-smoke JobState=FAILED Reason=NonZeroExitCode"
        " ExitCode=1:0 NodeList=node[1-2] BatchHost=node1"
    )
    ended = {"stdout": line}
    rec = render("_smoke_train_slurm_record", {"_smoke_train_slurm_ended": ended,
                                               "_smoke_train_slurm_late": {"skipped": True}})  # fmt: skip
    assert (rec["JobState"], rec["Reason"], rec["ExitCode"], rec["BatchHost"]) == (
        "FAILED", "NonZeroExitCode", "1:0", "node1",
    )  # fmt: skip
    late = {"stdout": "JobId=7 JobState=PENDING Reason=Resources", "changed": True}
    rec = render("_smoke_train_slurm_record", {"_smoke_train_slurm_ended": {"stdout": ""},
                                               "_smoke_train_slurm_late": late})  # fmt: skip
    assert (rec["JobState"], rec["Reason"]) == ("PENDING", "Resources")


def test_the_job_is_the_same_whatever_order_the_play_lists_its_hosts_in():
    """site.yml's smoke job play runs on a group made in the play, which lists the hosts in the
    order they answered: the job (its nodes, its submitting and rendezvous host) and the run's
    identity must not change with it, or a second converge would run the job again."""
    variables = example_vars()
    shuffled = [HOSTS[2], HOSTS[0], HOSTS[3], HOSTS[1]]
    for name in ("_smoke_train_sbatch", "_smoke_train_first", "_smoke_train_nodes"):
        assert render(name, variables, shuffled) == render(name, variables), name
    assert render("_smoke_train_first", variables, shuffled) == "hgx-01"


def _addresses(hosts: list[str], interface: str) -> dict:
    """hostvars with each node's IPv4 address on `interface` in its facts (hgx-03: 10.0.0.3),
    and a default one elsewhere that must not be used."""
    return {
        h: {
            "ansible_facts": {
                interface: {"ipv4": {"address": f"10.0.0.{h[-1]}"}},
                "default_ipv4": {"address": f"192.168.0.{h[-1]}"},
            }
        }
        for h in hosts
    }


def test_through_slurm_each_node_starts_its_workers_with_its_rank():
    """Through Slurm no torchrun: each node's launcher gets its place among the nodes by name
    (whatever order the play lists them in) and the first node's address, where rank 0 holds
    the job's store; without Slurm, torchrun's c10d rendezvous on that same node."""
    shuffled = [HOSTS[2], HOSTS[0], HOSTS[3], HOSTS[1]]
    variables = {**thaw(example_vars()), "smoke_train_slurm": True}
    variables["hostvars"] = _addresses(HOSTS, variables["smoke_train_interface"])
    for rank, host in enumerate(HOSTS):
        args = render("_smoke_train_launcher_args", variables, shuffled, host)
        assert args == ["--node-rank", str(rank), "--nnodes", "4", "--master", "10.0.0.1:29400"]
        argv = render("_smoke_train_argv", variables, shuffled, host)
        assert "--torchrun" not in argv and argv[argv.index("--node-rank") + 1] == str(rank)
    variables["smoke_train_slurm"] = False
    args = render("_smoke_train_launcher_args", variables, shuffled, "hgx-03")
    assert args == [
        f"--torchrun=--nnodes=4 --rdzv-backend=c10d --rdzv-endpoint=10.0.0.1:29400 --rdzv-id={RUN[:12]}",
    ]
    # One node without Slurm (a re-validation of a one-node batch): no torchrun agent to import
    # torch before the workers do; the launcher starts them, the store on the node itself.
    variables["smoke_train_cluster_hosts"] = ["hgx-03"]
    args = render("_smoke_train_launcher_args", variables, ["hgx-03"], "hgx-03")
    assert args == ["--node-rank", "0", "--nnodes", "1", "--master", "10.0.0.3:29400"]


@pytest.mark.parametrize("slurm", [True, False])
@pytest.mark.parametrize("nodes", [HOSTS, HOSTS[1:2]])
def test_the_rendered_command_line_parses_with_the_launchers_own_parser(slurm, nodes):
    """What the role renders must mean to validators.launch what the role meant: a value that
    starts with one of the launcher's options (`--nnodes=4 ...` after `--torchrun`) was read as
    that option, and every multi-node job without Slurm failed to start (found by a rolling
    change's one-node re-validation on the testbed)."""
    from validators import launch

    variables = {**thaw(example_vars()), "smoke_train_slurm": slurm}
    variables["hostvars"] = _addresses(HOSTS, variables["smoke_train_interface"])
    variables["smoke_train_cluster_hosts"] = nodes
    argv = [str(a) for a in render("_smoke_train_argv", variables, nodes, nodes[0])]
    assert argv[1:3] == ["-m", "validators.launch"]
    a = launch.parser().parse_args(argv[3:])
    if slurm or len(nodes) == 1:  # one node: the launcher starts its workers, as under Slurm
        assert (a.node_rank, a.nnodes, a.torchrun) == (0, len(nodes), "")
    else:
        assert a.node_rank is None and a.torchrun.startswith(
            f"--nnodes={len(nodes)} --rdzv-backend=c10d"
        )
    assert "--expect-mount" in a.host_args and a.job_args[0] == "--"


def test_a_node_lost_earlier_runs_no_job_and_is_named():
    # hgx-03 failed or was unreachable earlier in the run: one job spans every node, so none
    # runs (the role says why instead of failing every other node), and the rendezvous check,
    # which reads the first node's facts, is not asked of a run that runs no job.
    v = {**example_vars(), "smoke_train_cluster_hosts": HOSTS}
    alive = [h for h in HOSTS if h != "hgx-03"]
    assert render("_smoke_train_partial", v) is False
    lost = {"ansible_play_hosts": alive}
    assert role_vars.render("smoke_train", "_smoke_train_partial", v, HOSTS, **lost) is True
    why = role_vars.render("smoke_train", "_smoke_train_why_partial", v, HOSTS, **lost)
    assert why == "hgx-03 failed or was unreachable earlier in this run"
    two = role_vars.render("smoke_train", "_smoke_train_why_partial", v, HOSTS,
                           ansible_play_hosts=["hgx-01", "hgx-04"])  # fmt: skip
    assert two == "hgx-02, hgx-03 failed or were unreachable earlier in this run"
    # Named in the play's order, whatever it is (not a set's order, which changes from run to
    # run, nor sorted): twenty renders over the play reversed.
    back = HOSTS[::-1]
    named = {
        role_vars.render(
            "smoke_train",
            "_smoke_train_why_partial",
            v,
            back,
            ansible_play_hosts=["hgx-04", "hgx-01"],
        )
        for _ in range(20)
    }
    assert named == {"hgx-03, hgx-02 failed or were unreachable earlier in this run"}, named
    # A node that never got to this play (its group was not made): the run covers fewer.
    fewer = role_vars.render(
        "smoke_train", "_smoke_train_why_partial", v, alive, **{"ansible_play_hosts": alive}
    )
    assert fewer == (
        "this run covers 3 of the cluster's 4 nodes "
        "(the others failed or were unreachable before this play)"
    )
    limited = role_vars.render("smoke_train", "_smoke_train_why_partial", v, alive,
                               ansible_play_hosts=alive, ansible_limit="hgx-0[1:2],hgx-04")  # fmt: skip
    assert limited == "this run covers 3 of the cluster's 4 nodes (--limit)"


def test_a_placement_the_clusters_topology_plugin_does_not_take_is_left_out():
    """On AWS the stack writes Slurm's topology from EC2's (a tree where EC2 returns no
    capacity block), which may differ from the plan's: the smoke job asks only for what the
    plugin in force takes (--segment under block, --switches under tree)."""
    plan = compile_effective(load_effective(ROOT / "blueprints" / "nvl72-slurm.yaml"))
    hosts = [n["name"] for n in plan.group_vars["slurm_nodes"]]
    gv = thaw(plan.group_vars)

    def placed(plugin: str) -> list[str]:
        argv = render("_smoke_train_sbatch", {**gv, "slurm_topology_plugin": plugin}, hosts)
        return [str(a) for a in argv if str(a).startswith(("--segment", "--switches"))]

    assert placed("topology/block") == ["--segment=18"]
    assert placed("topology/tree") == []
    assert placed("") == []
    tree = {**gv, "slurm_topology_plugin": "topology/tree",
            "smoke_train_slurm_placement": ["--switches=1"]}  # fmt: skip
    assert "--switches=1" in [str(a) for a in render("_smoke_train_sbatch", tree, hosts)]
    # A playbook of a user's own, with no Slurm topology variable: its placement as given.
    mine = {k: v for k, v in gv.items() if k != "slurm_topology_plugin"}
    assert "--segment=18" in [str(a) for a in render("_smoke_train_sbatch", mine, hosts)]
