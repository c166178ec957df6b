"""The slurm role's accounting files (the blueprint's scheduler.fairness), rendered by Ansible's
template engine as tests/roles/test_slurm_config.py renders the others: slurm.conf's accounting
and priority lines, slurmdbd.conf, and what the sacctmgr script is given. Without fairness,
slurm.conf has no line of it (the cluster runs no slurmdbd). The script itself runs against a
real slurmdbd in tests/scheduler/test_slurm_accounting.py."""

from __future__ import annotations

import json

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from blueprint_helpers import SLURM_MIXED
from test_slurm_config import DB_PASSWORD, ROLE, ROOT, lines, render

from rackform.blueprint.loader import load_effective
from rackform.engine import compile_effective
from rackform.plan.model import thaw

ACCOUNTING_KEYS = ("AccountingStorage", "Priority")


def settings(conf: str) -> dict[str, str]:
    return dict(
        line.split("=", 1)
        for line in conf.splitlines()
        if line.startswith(ACCOUNTING_KEYS) and "=" in line
    )


def test_the_example_turns_on_slurmdbd_fairshare_and_gpu_tracking():
    out = render(ROOT / "blueprints" / "baremetal-slurm.yaml")
    assert settings(out["slurm.conf"]) == {
        "AccountingStorageType": "accounting_storage/slurmdbd",
        "AccountingStorageHost": "10.9.0.1",  # the controller's address
        "AccountingStorageTRES": "gres/gpu",
        "AccountingStorageEnforce": "associations,limits,qos",
        "PriorityType": "priority/multifactor",
        "PriorityDecayHalfLife": "7-0",
        "PriorityWeightFairshare": "10000",
        "PriorityWeightQOS": "10000",
    }
    # The job records stay where `rackform jobs` reads them without sacct.
    assert "\nJobCompType=jobcomp/filetxt\n" in out["slurm.conf"]


def test_slurmdbd_conf_names_the_controller_and_the_local_database():
    dbd = render(ROOT / "blueprints" / "baremetal-slurm.yaml")["slurmdbd.conf"]
    conf = dict(line.split("=", 1) for line in dbd.splitlines() if "=" in line and line[0] != "#")
    assert conf == {
        "AuthType": "auth/munge",
        "DbdHost": "hgx-01.lab",  # the controller's host name: slurmdbd refuses another
        "SlurmUser": "slurm",
        "PidFile": "/run/slurmdbd.pid",  # Debian's unit's PIDFile
        "LogFile": "/var/log/slurm/slurmdbd.log",
        "StorageType": "accounting_storage/mysql",
        "StorageHost": "localhost",
        "StorageUser": "slurm",
        "StoragePass": DB_PASSWORD,
        "StorageLoc": "slurm_acct_db",
    }


def test_without_fairness_slurm_conf_has_no_accounting(write):
    out = render(write(SLURM_MIXED))
    assert settings(out["slurm.conf"]) == {}
    assert "TRESBillingWeights" not in out["slurm.conf"]


def test_only_partitions_with_gpus_bill_gpus(write):
    text = SLURM_MIXED + (
        "  fairness:\n"
        "    accounts: [{name: ml, share: 2}]\n"
        "    half_life_days: 3\n"
        "    fairshare_weight: 500\n"
    )
    conf = render(write(text))["slurm.conf"]
    billing = {
        p["PartitionName"]: p.get("TRESBillingWeights") for p in lines(conf, "PartitionName=")
    }
    assert billing == {"gpu": "GRES/gpu=1.0", "spare": "GRES/gpu=1.0"}
    s = settings(conf)
    assert (s["PriorityDecayHalfLife"], s["PriorityWeightFairshare"]) == ("3-0", "500")


def test_a_cpu_only_partition_bills_cpus_as_slurm_does(write):
    spare = "{name: spare, node_groups: [hgx, cpu], priority_tier: 1, preemptible: true,"
    assert spare in SLURM_MIXED
    text = SLURM_MIXED.replace(spare, "{name: spare, node_groups: [cpu], priority_tier: 1,")
    text += "  fairness: {accounts: [{name: ml}]}\n"
    conf = render(write(text))["slurm.conf"]
    billing = {
        p["PartitionName"]: p.get("TRESBillingWeights") for p in lines(conf, "PartitionName=")
    }
    assert billing == {"gpu": "GRES/gpu=1.0", "spare": None}


def test_the_script_is_given_the_cluster_qos_and_accounts():
    variables = thaw(
        compile_effective(load_effective(ROOT / "blueprints" / "baremetal-slurm.yaml")).group_vars
    )
    loader = DataLoader()
    v = {
        **loader.load_from_file(str(ROLE / "defaults" / "main.yml"), trusted_as_template=True),
        **variables,
        **loader.load_from_file(str(ROLE / "vars" / "main.yml"), trusted_as_template=True),
    }
    spec = Templar(loader=loader, variables=v).template(
        trust_as_template("{{ _slurm_accounts_spec | to_json }}")
    )
    assert json.loads(spec) == {
        "cluster": "dc2-train",
        "qos": [{"name": "urgent", "priority": 100, "max_gpus": 0, "max_gpus_per_user": 8,
                 "max_gpus_per_account": 0}],
        "accounts": [
            {"name": "llm-pretrain", "share": 3, "users": ["alice", "bob"],
             "qos": ["normal", "urgent"], "default_qos": "normal", "max_gpus": 0},
            {"name": "vision", "share": 1, "users": ["carol"], "qos": ["normal", "urgent"],
             "default_qos": "normal", "max_gpus": 16},
        ],
    }  # fmt: skip


def test_the_controller_alone_installs_mariadb_and_slurmdbd():
    variables = thaw(
        compile_effective(load_effective(ROOT / "blueprints" / "baremetal-slurm.yaml")).group_vars
    )
    loader = DataLoader()
    base = {
        **loader.load_from_file(str(ROLE / "defaults" / "main.yml"), trusted_as_template=True),
        **variables,
        **loader.load_from_file(str(ROLE / "vars" / "main.yml"), trusted_as_template=True),
    }
    got = {}
    for host in ("hgx-01", "hgx-02"):
        t = Templar(loader=loader, variables={**base, "inventory_hostname": host})
        got[host] = t.template(trust_as_template("{{ _slurm_packages }}"))
    assert got["hgx-01"] == [
        "munge",
        "slurm-client",
        "slurmd",
        "slurmctld",
        "mariadb-server",
        "slurmdbd",
    ]
    assert got["hgx-02"] == ["munge", "slurm-client", "slurmd"]
