"""What a job learns from Slurm's environment (validators/slurm_env.py): the job and its
allocation for the reports, a task's rank among srun's tasks, and the rendezvous on the step's
first node. scontrol is not installed on this machine: `rendezvous` takes the command runner,
and a recording one stands in for it here (the e2e runs the real one on the VMs)."""

from __future__ import annotations

from validators import slurm_env

TASK = {
    "SLURM_JOB_ID": "812", "SLURM_JOB_NAME": "rackform-smoke", "SLURM_JOB_PARTITION": "main",
    "SLURM_JOB_NODELIST": "hgx-[01-04]", "SLURM_JOB_NUM_NODES": "4", "SLURMD_NODENAME": "hgx-02",
    "SLURM_GPUS_ON_NODE": "8", "SLURM_PROCID": "9", "SLURM_NTASKS": "32", "SLURM_LOCALID": "1",
    "SLURM_STEP_NUM_NODES": "4", "SLURM_STEP_NODELIST": "hgx-[01-04]",
}  # fmt: skip


def test_the_job_and_its_allocation():
    assert slurm_env.facts(TASK) == {
        "job_id": "812", "job_name": "rackform-smoke", "partition": "main",
        "nodelist": "hgx-[01-04]", "nodes": 4, "node": "hgx-02", "gpus_per_node": 8,
        "restart_count": 0,
    }  # fmt: skip
    assert slurm_env.facts({**TASK, "SLURM_RESTART_COUNT": "2"})["restart_count"] == 2
    assert slurm_env.facts({"PATH": "/bin"}) is None  # not in a Slurm job


def test_ranks_are_torchruns_else_sruns_else_one_process():
    assert slurm_env.ranks(TASK) == (9, 32, 1, 8)
    torchrun = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert slurm_env.ranks({**TASK, **torchrun}) == (3, 4, 1, 2)
    assert slurm_env.ranks({}) == (0, 1, 0, 1)


def test_the_rendezvous_is_the_first_nodes_address_on_the_fabric():
    calls = []

    def scontrol(argv):
        calls.append(argv)
        if argv[:3] == ["scontrol", "show", "hostnames"]:
            return "hgx-01\nhgx-02\nhgx-03\nhgx-04\n"
        return (
            "NodeName=hgx-01 Arch=x86_64 CoresPerSocket=56 NodeAddr=10.9.0.1 NodeHostName=hgx-01\n"
        )

    assert slurm_env.rendezvous(TASK, scontrol) == ("10.9.0.1", str(20000 + 812))
    assert calls == [["scontrol", "show", "hostnames", "hgx-[01-04]"],
                     ["scontrol", "show", "node", "--oneliner", "hgx-01"]]  # fmt: skip
    # What the job is given wins; outside Slurm it is loopback.
    given = {**TASK, "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "29400"}
    assert slurm_env.rendezvous(given, scontrol) == ("10.0.0.9", "29400")
    assert slurm_env.rendezvous({}, scontrol) == ("127.0.0.1", "29500")


def test_a_job_preempted_with_a_grace_time_is_told_apart_from_one_already_requeued():
    # `scontrol --oneliner show job` during the grace time of a preemption, on the testbed.
    grace = ("JobId=7 JobName=wrap JobState=RUNNING Reason=None Restarts=0"
             " PreemptEligibleTime=2026-11-25T15:15:03 PreemptTime=2026-11-25T15:15:11")  # fmt: skip
    rec = slurm_env.record({"SLURM_JOB_ID": "7"}, lambda argv: grace)
    assert rec["JobState"] == "RUNNING" and slurm_env.preempted_in_grace(rec)
    for other in ("JobState=RUNNING PreemptTime=None", "JobState=REQUEUED PreemptTime=None",
                  "JobState=COMPLETING PreemptTime=2026-11-25T15:15:11"):  # fmt: skip
        assert not slurm_env.preempted_in_grace(
            slurm_env.record({"SLURM_JOB_ID": "7"}, lambda a, o=other: o)
        )
    assert slurm_env.record({}) == {}  # outside Slurm


def test_scontrol_failing_is_no_record():
    def fails(argv):
        raise FileNotFoundError("scontrol")

    assert slurm_env.record({"SLURM_JOB_ID": "7"}, fails) == {}
