"""Slurm's accounting database brought to what the blueprint declares, with `sacctmgr -i`: the
cluster, then the QOS (priority, GPU limits), then the accounts (fairshare share, allowed QOS,
default QOS, GPU limit) and their users (default account: the first account that lists them).

Installed by the rackform.gpu.slurm role and run on the controller (standard library only). It
reads what is there (`sacctmgr --noheader --parsable2 show ...`) and runs only the commands that
change something, so a second run changes nothing. Nothing is removed: an account, QOS or user
the blueprint no longer names keeps its association (and the usage history fairshare reads); a
GPU limit the blueprint no longer sets is cleared (gres/gpu=-1).

stdin: {"cluster": NAME, "qos": [...], "accounts": [...]} as the role's slurm_qos and
slurm_accounts. Arguments: --check (print what it would run, run nothing), --cluster-only (just
register the cluster: before slurmctld first starts). stdout: one JSON object {"changed": bool,
"commands": [argv, ...]}. Exit 3: a GPU limit is declared but Slurm does not track gres/gpu yet
(slurmctld registers AccountingStorageTRES with slurmdbd when it starts: run again after)."""

from __future__ import annotations

import json
import subprocess
import sys

GPU = "gres/gpu"
NOT_TRACKED = 3


def sacctmgr_show(*args: str) -> list[list[str]]:
    done = subprocess.run(
        ["sacctmgr", "--noheader", "--parsable2", "show", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"sacctmgr show {args[0]}: {done.stderr.strip() or done.stdout.strip()}")
    return [line.split("|") for line in done.stdout.splitlines() if line.strip()]


def gpu_limit(tres: str) -> int:
    """The gres/gpu count of a TRES string such as `cpu=4,gres/gpu=2`; 0: none."""
    for item in tres.split(","):
        key, _sep, value = item.partition("=")
        if key == GPU and value.lstrip("-").isdigit():
            return max(int(value), 0)
    return 0


def tres_setting(key: str, want: int, have: int) -> list[str]:
    """`key=gres/gpu=N` where the limit differs (-1 clears it); nothing where it is as wanted."""
    if want == have:
        return []
    return [f"{key}={GPU}={want if want else -1}"]


def read_state(cluster: str) -> dict:
    clusters = {row[0] for row in sacctmgr_show("cluster", "format=Cluster")}
    qos = {
        row[0]: {
            "priority": int(row[1] or 0),
            "max_gpus": gpu_limit(row[2]),
            "max_gpus_per_user": gpu_limit(row[3]),
            "max_gpus_per_account": gpu_limit(row[4]),
        }
        for row in sacctmgr_show(
            "qos", "format=Name,Priority,GrpTRES,MaxTRESPerUser,MaxTRESPerAccount"
        )
    }
    accounts, users = {}, set()
    if cluster in clusters:
        rows = sacctmgr_show(
            "association",
            "where",
            f"cluster={cluster}",
            "format=Account,User,Fairshare,GrpTRES,QOS,DefaultQOS",
        )
        for account, user, share, grptres, qos_list, default_qos in rows:
            if user:
                users.add((account, user))
                continue
            accounts[account] = {
                "share": int(share) if share.isdigit() else share,
                "max_gpus": gpu_limit(grptres),
                "qos": sorted(q for q in qos_list.split(",") if q),
                "default_qos": default_qos,
            }
    defaults = {row[0]: row[1] for row in sacctmgr_show("user", "format=User,DefaultAccount")}
    tracked = {"/".join(r for r in row if r) for row in sacctmgr_show("tres", "format=Type,Name")}
    return {
        "clusters": clusters,
        "qos": qos,
        "accounts": accounts,
        "users": users,
        "defaults": defaults,
        "gpu_tracked": GPU in tracked,
    }


def commands(spec: dict, have: dict, cluster_only: bool) -> list[list[str]]:
    cluster = spec["cluster"]
    out: list[list[str]] = []
    if cluster not in have["clusters"]:
        out.append(["add", "cluster", cluster])
    if cluster_only:
        return out
    for q in spec["qos"]:
        now = have["qos"].get(q["name"])
        if now is None:
            out.append(["add", "qos", q["name"]])
            now = {"priority": 0, "max_gpus": 0, "max_gpus_per_user": 0, "max_gpus_per_account": 0}
        sets = [f"Priority={q['priority']}"] if q["priority"] != now["priority"] else []
        sets += tres_setting("GrpTRES", q["max_gpus"], now["max_gpus"])
        sets += tres_setting("MaxTRESPerUser", q["max_gpus_per_user"], now["max_gpus_per_user"])
        sets += tres_setting(
            "MaxTRESPerAccount", q["max_gpus_per_account"], now["max_gpus_per_account"]
        )
        if sets:
            out.append(["modify", "qos", "where", f"name={q['name']}", "set", *sets])
    for a in spec["accounts"]:
        now = have["accounts"].get(a["name"])
        if now is None:
            out.append(["add", "account", a["name"], f"Cluster={cluster}"])
            now = {"share": 1, "max_gpus": 0, "qos": [], "default_qos": ""}
        sets = [f"Fairshare={a['share']}"] if a["share"] != now["share"] else []
        if sorted(a["qos"]) != now["qos"]:
            sets.append("QOS=" + ",".join(a["qos"]))
        if a["default_qos"] != now["default_qos"]:
            sets.append(f"DefaultQOS={a['default_qos']}")
        sets += tres_setting("GrpTRES", a["max_gpus"], now["max_gpus"])
        if sets:
            where = ["where", f"name={a['name']}", f"cluster={cluster}"]
            out.append(["modify", "account", *where, "set", *sets])
    first: dict[str, str] = {}
    for a in spec["accounts"]:
        for user in a["users"]:
            first.setdefault(user, a["name"])
            if (a["name"], user) not in have["users"]:
                out.append(["add", "user", user, f"Account={a['name']}", f"Cluster={cluster}"])
    for user, account in first.items():
        # A user new to Slurm gets the account it is first added to as its default.
        default = have["defaults"].get(user) or next(
            (c[3].split("=", 1)[1] for c in out if c[:3] == ["add", "user", user]), ""
        )
        if default != account:
            out.append(
                ["modify", "user", "where", f"name={user}", "set", f"DefaultAccount={account}"]
            )
    return out


def normalized(spec: dict) -> dict:
    """The role's variables with the defaults its argument_specs names filled in."""
    qos = [{"priority": 0, "max_gpus": 0, "max_gpus_per_user": 0, "max_gpus_per_account": 0, **q}
           for q in spec.get("qos") or []]  # fmt: skip
    accounts = [{"share": 1, "users": [], "qos": ["normal"], "default_qos": "normal",
                 "max_gpus": 0, **a} for a in spec.get("accounts") or []]  # fmt: skip
    for item in (*qos, *accounts):
        for k, v in item.items():
            if k.startswith(("max_", "priority", "share")):
                item[k] = int(v or 0)
    return {"cluster": spec["cluster"], "qos": qos, "accounts": accounts}


def wants_gpu_limits(spec: dict) -> bool:
    limits = ("max_gpus", "max_gpus_per_user", "max_gpus_per_account")
    return any(q.get(k) for q in spec["qos"] for k in limits) or any(
        a.get("max_gpus") for a in spec["accounts"]
    )


def main(argv: list[str]) -> int:
    check = "--check" in argv
    cluster_only = "--cluster-only" in argv
    spec = normalized(json.load(sys.stdin))
    try:
        have = read_state(spec["cluster"])
    except RuntimeError as exc:
        if not check:
            print(f"rackform_accounts: {exc}", file=sys.stderr)
            return 1
        # Check mode before slurmdbd runs: everything would be made.
        print(f"rackform_accounts: {exc}", file=sys.stderr)
        have = {"clusters": set(), "qos": {}, "accounts": {}, "users": set(), "defaults": {},
                "gpu_tracked": True}  # fmt: skip
    if not cluster_only and not have["gpu_tracked"] and wants_gpu_limits(spec):
        print(
            f"rackform_accounts: Slurm does not track {GPU} yet (slurmctld registers "
            "AccountingStorageTRES with slurmdbd when it starts); GPU limits need it",
            file=sys.stderr,
        )
        return NOT_TRACKED
    todo = commands(spec, have, cluster_only)
    if not check:
        for argv_ in todo:
            done = subprocess.run(
                ["sacctmgr", "-i", *argv_], capture_output=True, text=True, timeout=60, check=False
            )
            if done.returncode:
                print(
                    f"rackform_accounts: sacctmgr -i {' '.join(argv_)}: "
                    f"{done.stderr.strip() or done.stdout.strip()}",
                    file=sys.stderr,
                )
                return 1
    print(json.dumps({"changed": bool(todo), "commands": [["sacctmgr", "-i", *c] for c in todo]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
