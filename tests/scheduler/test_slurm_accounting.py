"""Fairness on a real Slurm with accounting (tests/slurm_accounting_local.py: MariaDB, slurmdbd,
slurmctld and two slurmd with two GPUs each): a blueprint's `fairness:` compiled by rackform
into the slurm role's variables, brought into Slurm's database by the role's own script
(roles/slurm/files/rackform_accounts.py) with `sacctmgr -i`, and what Slurm then does with it:
fairshare orders pending jobs by past usage, QOS and account GPU limits hold jobs back, a QOS
an account may not use is refused, and `sacct` carries each job's GPUs, which `rackform jobs`
reads."""

from __future__ import annotations

import copy
import getpass
import json
import subprocess
import sys
import time

import fake_ssh
import pytest
from blueprint_helpers import ROOT
from slurm_accounting_local import accounts_script
from slurm_local import GPUS_PER_NODE, NODES, blueprint, ssh_env

from rackform.blueprint.loader import load_effective
from rackform.cli.jobs_cmd import EPOCH
from rackform.engine import compile_effective
from rackform.plan.model import thaw
from rackform.scheduler.records import SACCT_FORMAT, parse
from rackform.scheduler.usage import usage

USER = getpass.getuser()
# Hyphens and underscores, as Slurm and the schema allow; `capped` holds one GPU at a time.
FAIRNESS = f"""  fairness:
    fairshare_weight: 10000
    qos_weight: 1000
    qos:
      - {{name: gpu-one, max_gpus_per_user: 1}}
      - {{name: urgent_1, priority: 100}}
    accounts:
      - {{name: llm-pretrain, users: [{USER}]}}
      - {{name: vision, users: [{USER}], qos: [normal]}}
      - {{name: capped, users: [{USER}], max_gpus: 1}}
"""


@pytest.fixture(scope="module")
def bp(tmp_path_factory):
    f = tmp_path_factory.mktemp("bp") / "slurm-a.yaml"
    f.write_text(blueprint().replace("lifecycle:", FAIRNESS + "lifecycle:"))
    return f


@pytest.fixture(scope="module")
def spec(bp) -> dict:
    """What the role gives the script (_slurm_accounts_spec), from the compiled blueprint."""
    v = thaw(compile_effective(load_effective(bp)).group_vars)
    return {"cluster": "rackform-test", "qos": v["slurm_qos"], "accounts": v["slurm_accounts"]}


@pytest.fixture(scope="module")
def made(accounting_cluster, spec) -> dict:
    """The script's first run in this database: what it ran."""
    return accounts_script(accounting_cluster.env, spec, "--run")


def show(slurm, *args: str) -> list[list[str]]:
    out = slurm.run("sacctmgr", "--noheader", "--parsable2", "show", *args).stdout
    return [line.split("|") for line in out.splitlines() if line]


def assocs(slurm) -> dict[str, list[str]]:
    rows = show(slurm, "association", "where", "cluster=rackform-test",
                "format=Account,User,Fairshare,GrpTRES,QOS,DefaultQOS")  # fmt: skip
    return {f"{r[0]}/{r[1]}": r[2:] for r in rows if r[0] != "root"}


def test_the_roles_script_makes_the_blueprints_accounts_and_qos_once(accounting_slurm, spec, made):
    slurm = accounting_slurm
    print(f"local Slurm with accounting up in {slurm.started_s:.1f} s")
    ran = [" ".join(c[2:]) for c in made["commands"]]
    assert made["changed"] and "add cluster rackform-test" not in ran  # registered before slurmctld
    assert "add account llm-pretrain Cluster=rackform-test" in ran
    assert f"add user {USER} Account=llm-pretrain Cluster=rackform-test" in ran
    qos = {r[0]: r[1:] for r in show(slurm, "qos", "format=Name,Priority,GrpTRES,MaxTRESPerUser")}
    assert qos["gpu-one"] == ["0", "", "gres/gpu=1"] and qos["urgent_1"] == ["100", "", ""]
    a = assocs(slurm)
    assert a["llm-pretrain/"] == ["1", "", "gpu-one,normal,urgent_1", "normal"]
    assert a["vision/"] == ["1", "", "normal", "normal"]
    assert a["capped/"][1] == "gres/gpu=1"
    assert {k for k in a if k.endswith(f"/{USER}")} == {
        f"{n}/{USER}" for n in ("llm-pretrain", "vision", "capped")
    }
    users = dict(show(slurm, "user", "format=User,DefaultAccount"))
    assert users[USER] == "llm-pretrain"  # the first account that lists the user
    # A second run finds nothing to do.
    assert accounts_script(slurm.env, spec, "--run") == {"changed": False, "commands": []}


def test_check_mode_says_what_it_would_change_and_changes_nothing(accounting_slurm, spec, made):
    slurm = accounting_slurm
    changed = copy.deepcopy(spec)
    changed["accounts"][0]["share"] = 5
    changed["accounts"][2]["max_gpus"] = 0  # the limit dropped from the blueprint
    got = accounts_script(slurm.env, changed, "--check")
    assert got["changed"]
    assert [c[2:] for c in got["commands"]] == [
        ["modify", "account", "where", "name=llm-pretrain", "cluster=rackform-test", "set", "Fairshare=5"],
        ["modify", "account", "where", "name=capped", "cluster=rackform-test", "set", "GrpTRES=gres/gpu=-1"],
    ]  # fmt: skip
    assert assocs(slurm)["llm-pretrain/"][0] == "1"  # untouched
    try:
        assert accounts_script(slurm.env, changed, "--run")["changed"]
        a = assocs(slurm)
        assert (a["llm-pretrain/"][0], a["capped/"][1]) == ("5", "")  # the limit is cleared
        assert not accounts_script(slurm.env, changed, "--run")["changed"]
    finally:
        accounts_script(slurm.env, spec, "--run")
    assert assocs(slurm)["capped/"][1] == "gres/gpu=1"


def blocker(slurm, account: str) -> str:
    """A job on every CPU and GPU of both nodes, so what is submitted next waits."""
    job = slurm.sbatch("-A", account, "-N2", "--ntasks-per-node=2", f"--gres=gpu:{GPUS_PER_NODE}",
                       "--wrap", "sleep 60")  # fmt: skip
    slurm.wait_state(job, "RUNNING")
    return job


def raw_usage(slurm) -> dict[str, int]:
    out = slurm.run("sshare", "--noheader", "--parsable2", "-A", "llm-pretrain,vision",
                    "--format=Account,User,RawUsage").stdout  # fmt: skip
    return {r[0]: int(r[2]) for r in (line.split("|") for line in out.splitlines()) if not r[1]}


def test_the_account_that_used_more_waits_behind_the_one_that_used_less(accounting_slurm, made):
    slurm = accounting_slurm
    before = raw_usage(slurm)
    # vision uses every GPU for a few seconds (GPU partitions bill GPUs: TRESBillingWeights).
    job = slurm.sbatch("-A", "vision", "-N2", f"--gres=gpu:{GPUS_PER_NODE}", "--wrap", "sleep 3")
    slurm.wait_state(job, "RUNNING")
    assert slurm.wait(lambda: not slurm.state(job) or slurm.state(job) == "COMPLETED", 30)
    assert slurm.wait(lambda: raw_usage(slurm)["vision"] > raw_usage(slurm)["llm-pretrain"], 30), (
        before, raw_usage(slurm))  # fmt: skip
    # slurmctld works the fairshare factors out from the usage every PriorityCalcPeriod (a
    # minute at least) and when it starts: started again, it has them now.
    with slurm.controller_down():
        pass
    blocker(slurm, "vision")
    light = slurm.sbatch("-A", "llm-pretrain", "--gres=gpu:1", "--wrap", "true")
    heavy = slurm.sbatch("-A", "vision", "--gres=gpu:1", "--wrap", "true")
    urgent = slurm.sbatch("-A", "llm-pretrain", "--qos=urgent_1", "--gres=gpu:1", "--wrap", "true")

    def factors() -> dict[str, tuple[int, int, int]]:
        out = slurm.run("sprio", "--noheader", "--format=%i|%Y|%F|%Q").stdout
        return {r[0]: tuple(map(int, r[1:])) for r in (line.split("|") for line in out.split())}

    assert slurm.wait(lambda: {light, heavy, urgent} <= set(factors()), 15), factors()
    f = factors()
    assert f[light][1] > f[heavy][1]  # fairshare factor: less used, more priority
    assert f[light][0] > f[heavy][0]
    assert f[urgent][2] == 1000 and f[light][2] == 0  # qos_weight x the QOS's priority share
    assert f[urgent][0] > f[light][0]
    reasons = slurm.run("squeue", "--noheader", "-j", f"{light},{heavy}", "--format=%i %r").stdout
    assert f"{heavy} Priority" in reasons  # waits behind the lighter account's job


@pytest.mark.parametrize(
    "args,reason",
    [
        (["-A", "llm-pretrain", "--qos=gpu-one", "--gres=gpu:2"], "QOSMaxGRESPerUser"),
        (["-A", "capped", "-N2", "--gres=gpu:1"], "AssocGrpGRES"),
    ],
)
def test_a_gpu_limit_holds_a_job_that_asks_for_more(accounting_slurm, made, args, reason):
    job = accounting_slurm.sbatch(*args, "--wrap", "true")

    def got():
        return accounting_slurm.run(
            "squeue", "--noheader", "-j", job, "--format=%T %r"
        ).stdout.split()

    assert accounting_slurm.wait(lambda: got() == ["PENDING", reason], 10), got()
    # Within the limit it runs.
    ok = accounting_slurm.sbatch(
        *[a.replace("gpu:2", "gpu:1").replace("-N2", "-N1") for a in args], "--wrap", "true"
    )
    assert accounting_slurm.wait(
        lambda: accounting_slurm.state(ok) in ("", "COMPLETED", "COMPLETING"), 30
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["-A", "vision", "--qos=urgent_1"], "Invalid qos specification"),
        (["-A", "no-such-team"], "Invalid account"),
    ],
)
def test_a_qos_or_account_outside_the_blueprint_is_refused(accounting_slurm, made, args, message):
    r = accounting_slurm.run("sbatch", *args, "--wrap", "true", check=False)
    assert r.returncode != 0 and message in r.stderr


def sacct(slurm, job: str, *args: str) -> str:
    return slurm.run(
        "sacct", "--parsable2", "--noheader", f"--format={SACCT_FORMAT}", "-j", job, *args
    ).stdout


def test_sacct_carries_each_jobs_gpus(accounting_slurm, made):
    slurm = accounting_slurm
    job = slurm.sbatch("-A", "vision", "-N2", "--gres=gpu:1", "--wrap", "sleep 1")
    assert slurm.wait(
        lambda: (
            sacct(slurm, job).startswith(f"{job}|{USER}|vision|")
            and "COMPLETED" in sacct(slurm, job)
        ),
        30,
    )
    text = sacct(slurm, job)
    line = text.splitlines()[0].split("|")
    assert "gres/gpu=2" in line[SACCT_FORMAT.split(",").index("AllocTRES")].split(",")
    [r] = list(parse(text, "sacct"))  # its steps (batch, extern) left out
    assert (r.id, r.account, r.gpus, r.state) == (job, "vision", 2, "COMPLETED")
    u = usage([r], {n: GPUS_PER_NODE for n in NODES}, 2.0, r.end)
    assert (u.jobs[0].gpus, u.jobs[0].gpus_from) == (2, "tres")  # not every GPU of its nodes
    # The jobcomp record Slurm writes beside it carries them too.
    assert slurm.wait(lambda: f"JobId={job} " in slurm.jobcomp.read_text(), 10)
    [c] = [x for x in parse(slurm.jobcomp.read_text(), "jobcomp") if x.id == job]
    assert c.gpus == 2


def test_rackform_jobs_reads_sacct_on_a_cluster_with_accounting(
    accounting_slurm, made, bp, tmp_path
):
    slurm = accounting_slurm
    jobs = [slurm.sbatch("-A", "vision", "--gres=gpu:1", "--wrap", "sleep 1"),
            slurm.sbatch("-A", "llm-pretrain", "-N2", "--gres=gpu:2", "--wrap", "sleep 1")]  # fmt: skip
    assert slurm.wait(lambda: all("COMPLETED" in sacct(slurm, j) for j in jobs), 30)
    r = subprocess.run(
        [sys.executable, "-m", "rackform", "jobs", str(bp), "--json"],
        capture_output=True, text=True, cwd=ROOT, env=ssh_env(slurm, tmp_path), timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["source"] == "root@10.77.7.1:2222:sacct"
    got = {j["id"]: j for j in doc["jobs"]}
    assert [(got[j]["account"], got[j]["gpus"], got[j]["gpus_from"]) for j in jobs] == [
        ("vision", 1, "tres"),
        ("llm-pretrain", 4, "tres"),
    ]
    assert not any("upper bound" in n for n in doc["notes"])
    call = fake_ssh.calls(tmp_path / "ssh.log")[-1]
    assert (call.user, call.host) == ("root", "10.77.7.1")
    assert EPOCH in call.remote[-1]  # no --since: every job sacct has


def test_a_requeued_job_is_charged_for_both_its_runs(accounting_slurm, made, bp, tmp_path):
    """Preempted and requeued (`scontrol requeue`, as Slurm requeues a preempted job): Slurm's
    database keeps a record per run under one job id, sacct shows only the last without
    --duplicates, and `rackform jobs` charges both runs and says the job ran twice."""
    slurm = accounting_slurm
    # The first run waits to be requeued; the second (SLURM_RESTART_COUNT=1) ends at once.
    job = slurm.sbatch(
        "-A", "vision", "-N2", "--gres=gpu:1", "--requeue",
        "--wrap", 'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 120; fi; sleep 1',
    )  # fmt: skip
    slurm.wait_state(job, "RUNNING")
    time.sleep(3)  # a first run of some seconds, so its share of the sum shows
    slurm.run("scontrol", "requeue", job)
    runs = lambda: [  # noqa: E731
        line.split("|")
        for line in sacct(slurm, job, "--duplicates").splitlines()
        if line.split("|")[0] == job
    ]

    def second_run_done() -> bool:
        # A requeued job may start again only after the credentials' lifetime (its BeginTime
        # about two minutes on): moved to now rather than waited for, again while it pends
        # (slurmctld may set the BeginTime after the job shows PENDING).
        if slurm.state(job) == "PENDING":
            slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)
        return [r[4] for r in runs()] == ["REQUEUED", "COMPLETED"]

    assert slurm.wait(second_run_done, 150, every=1.0), (runs(), slurm.log())
    elapsed = [int(r[SACCT_FORMAT.split(",").index("ElapsedRaw")]) for r in runs()]
    assert elapsed[0] >= 3, elapsed
    # Without --duplicates: the last run only, what `rackform jobs` charged before.
    assert [line.split("|")[4] for line in sacct(slurm, job).splitlines()[:1]] == ["COMPLETED"]

    r = subprocess.run(
        [sys.executable, "-m", "rackform", "jobs", str(bp), "--json"],
        capture_output=True, text=True, cwd=ROOT, env=ssh_env(slurm, tmp_path), timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    [got] = [j for j in json.loads(r.stdout)["jobs"] if j["id"] == job]
    assert (got["runs"], got["run_states"], got["gpus"]) == (2, ["REQUEUED", "COMPLETED"], 2)
    assert got["seconds"] == sum(elapsed)
    assert got["gpu_hours"] == round(2 * sum(elapsed) / 3600, 4)
    text = subprocess.run(
        [sys.executable, "-m", "rackform", "jobs", str(bp)],
        capture_output=True, text=True, cwd=ROOT, env=ssh_env(slurm, tmp_path), timeout=120,
    )  # fmt: skip
    [row] = [line for line in text.stdout.splitlines() if line.split()[:1] == [job]]
    assert "ran 2 times" in row, text.stdout
