"""A real Slurm with accounting on this machine, for the fairness tests: MariaDB (Debian's
mariadbd, a fresh data directory from mariadb-install-db) and slurmdbd on loopback ports, in the
foreground as the current user, then tests/slurm_local.py's slurmctld and two slurmd with
accounting in slurm.conf as the slurm role writes it: AccountingStorageType=
accounting_storage/slurmdbd, AccountingStorageTRES=gres/gpu, AccountingStorageEnforce=
associations,limits,qos, priority/multifactor with a fairshare weight, GPU partitions billing
GPUs. Between slurmdbd and slurmctld the cluster is registered by the role's own script
(roles/slurm/files/rackform_accounts.py --cluster-only), as the role does it.

Separate from slurm_local's session cluster (its own temp dir, ports and database) and started
only by the tests that ask for it (`accounting_slurm`, once per session); stopped at the
session's end: Slurm first, then slurmdbd, then MariaDB. `started_s` is how long it took."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import slurm_local
from loopback import free_port

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "roles" / "slurm" / "files" / "rackform_accounts.py"
TOOLS = ("mariadb-install-db", "mariadbd", "mariadb", "slurmdbd", "sacctmgr", "sacct", "sshare",
         "sprio")  # fmt: skip
FAIRSHARE_WEIGHT = 10000
QOS_WEIGHT = 1000

# slurm.conf's accounting, as roles/slurm/templates/slurm.conf.j2 writes it with fairness (the
# partitions bill GPUs: slurm_local's PartitionName lines are rewritten in `start`).
ACCOUNTING = """AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={dbd_port}
AccountingStorageTRES=gres/gpu
AccountingStorageEnforce=associations,limits,qos
PriorityType=priority/multifactor
PriorityDecayHalfLife=7-0
PriorityWeightFairshare={fairshare}
PriorityWeightQOS={qos}
PriorityCalcPeriod=1
"""


@dataclass
class Database:
    """MariaDB and slurmdbd for one Slurm: their processes and how to stop them."""

    root: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        out = (self.root / "log" / f"{name}.out").open("a")
        self.procs[name] = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def stop(self) -> None:
        for name in ("slurmdbd", "mariadbd"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def log(self) -> str:
        out = []
        for name in ("mariadbd.err", "slurmdbd.log"):
            path = self.root / "log" / name
            if path.exists():
                out.append(
                    f"{name}: " + " / ".join(path.read_text(errors="replace").splitlines()[-5:])
                )
        return "; ".join(out)


def accounts_script(env: dict[str, str], spec: dict, *args: str) -> dict:
    """The role's sacctmgr script run as the role runs it (spec on stdin); its JSON answer."""
    done = subprocess.run(
        ["python3", str(SCRIPT), *args], input=json.dumps(spec), capture_output=True, text=True,
        env=env, timeout=120,
    )  # fmt: skip
    if done.returncode:
        raise AssertionError(
            f"rackform_accounts.py {' '.join(args)}: rc {done.returncode}: {done.stderr}"
        )
    return json.loads(done.stdout)


def _mariadb(db: Database, env: dict[str, str]) -> tuple[int, Path]:
    data, sock, port = db.root / "mysql", db.root / "mysql.sock", free_port()
    me = (
        ["--user=" + getpass.getuser()] if os.geteuid() == 0 else []
    )  # mariadbd refuses root without it
    subprocess.run(
        ["mariadb-install-db", "--no-defaults", f"--datadir={data}", *me,
         "--auth-root-authentication-method=normal", "--skip-test-db"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    db.start(
        "mariadbd",
        ["mariadbd", "--no-defaults", f"--datadir={data}", *me, "--bind-address=127.0.0.1",
         f"--port={port}", f"--socket={sock}", f"--pid-file={db.root / 'mysql.pid'}",
         "--skip-log-bin", "--innodb-buffer-pool-size=32M", "--innodb-lock-wait-timeout=900",
         f"--log-error={db.root / 'log' / 'mariadbd.err'}"],
        env,
    )  # fmt: skip
    sql = ["mariadb", "--no-defaults", f"--socket={sock}", "--user=root"]
    up = lambda: subprocess.run([*sql, "-e", "SELECT 1"], capture_output=True).returncode == 0  # noqa: E731
    if not _wait(up, 30):
        raise AssertionError(f"MariaDB does not answer ({db.log()})")
    # The statements the role's database task runs (tasks/accounting.yml), for 127.0.0.1 (TCP:
    # the role's user is for localhost, its socket), with a password of the shape it makes.
    password = "Db" + os.urandom(12).hex()
    subprocess.run(
        sql,
        input="CREATE DATABASE IF NOT EXISTS `slurm_acct_db`;\n"
        "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1';\n"
        f"ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';\n"
        "GRANT ALL ON `slurm_acct_db`.* TO 'slurm'@'127.0.0.1';\n",
        text=True, check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    (db.root / "db-password").write_text(password)
    return port, sock


def _slurmdbd(db: Database, slurm: slurm_local.LocalSlurm, mysql_port: int, dbd_port: int) -> None:
    conf = (
        Path(slurm.env["SLURM_CONF"]).parent / "slurmdbd.conf"
    )  # slurmdbd reads it beside slurm.conf
    conf.write_text(
        f"""AuthType=auth/none
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser={getpass.getuser()}
PidFile={db.root / "slurmdbd.pid"}
LogFile={db.root / "log" / "slurmdbd.log"}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={mysql_port}
StorageUser=slurm
StoragePass={(db.root / "db-password").read_text()}
StorageLoc=slurm_acct_db
"""
    )
    conf.chmod(0o600)  # as the role's: slurmdbd.conf holds the password
    db.start("slurmdbd", ["slurmdbd", "-D"], slurm.env)
    up = lambda: slurm.run("sacctmgr", "-n", "show", "cluster", check=False).returncode == 0  # noqa: E731
    if not _wait(up, 30):
        raise AssertionError(f"slurmdbd does not answer ({db.log()})")
    accounts_script(
        slurm.env, {"cluster": "rackform-test", "qos": [], "accounts": []}, "--cluster-only"
    )


def _wait(what, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while not what():
        if time.monotonic() > end:
            return False
        time.sleep(0.1)
    return True


def start(root: Path) -> tuple[slurm_local.LocalSlurm, Database]:
    t0 = time.monotonic()
    db = Database(root)
    (root / "log").mkdir(parents=True, exist_ok=True)
    dbd_port = free_port()
    extra = ACCOUNTING.format(dbd_port=dbd_port, fairshare=FAIRSHARE_WEIGHT, qos=QOS_WEIGHT)

    def before(slurm: slurm_local.LocalSlurm) -> None:
        conf = Path(slurm.env["SLURM_CONF"])
        # Both partitions have GPUs: they bill GPUs alone, as the role writes them.
        conf.write_text(
            conf.read_text().replace(" State=UP", " TRESBillingWeights=GRES/gpu=1.0 State=UP")
        )
        mysql_port, _ = _mariadb(db, slurm.env)
        _slurmdbd(db, slurm, mysql_port, dbd_port)

    try:
        slurm = slurm_local.start(root, extra, before)
    except BaseException:
        db.stop()
        raise
    slurm.started_s = time.monotonic() - t0
    return slurm, db


_SHARED: list[tuple[slurm_local.LocalSlurm, Database]] = []


@pytest.fixture(scope="session")
def accounting_cluster(tmp_path_factory, request) -> slurm_local.LocalSlurm:
    """The session's one local Slurm with accounting (apart from slurm_local's)."""
    missing = [t for t in (*slurm_local.TOOLS, *TOOLS) if shutil.which(t) is None]
    if missing:  # as the other real servers of the suite: a missing tool fails, never skips
        pytest.fail(f"{', '.join(missing)} not installed: run scripts/setup.sh --test")
    if not _SHARED:
        _SHARED.append(start(tmp_path_factory.mktemp("slurm-accounting")))
        slurm, db = _SHARED[0]
        request.config.add_cleanup(
            db.stop
        )  # cleanups run last-added first: Slurm, then the database
        request.config.add_cleanup(slurm.shutdown)
    return _SHARED[0][0]


@pytest.fixture
def accounting_slurm(accounting_cluster: slurm_local.LocalSlurm) -> slurm_local.LocalSlurm:
    """The local Slurm with accounting, clean: no job, every node in service."""
    accounting_cluster.clean()
    return accounting_cluster
