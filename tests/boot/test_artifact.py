"""The pieces of a node that configures itself, checked with the real tools: the artifact is
deterministic and holds what the node script needs; the user data is valid sh under EC2's size
limit; the stack's keys are keys OpenSSH reads. The whole bootstrap runs in a fresh testbed VM in
tests/e2e/test_bootstrap_vm.py."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
from boothelp import KEY, self_signed
from gpu_collection import module
from planhelp import (
    AWS_INFERENCE,
    AWS_TRAINING,
    BARE_METAL,
    of_type,
    one,
    plan,
    variant,
    write_blueprint,
)

from rackform.blueprint.loader import load_effective
from rackform.boot.artifact import (
    NODE_ANSIBLE_CORE,
    NODE_MITOGEN,
    USER_DATA_LIMIT,
    build_artifact,
    manifest,
    user_data,
)
from rackform.boot.credentials import node_token
from rackform.boot.node.converge import inventory
from rackform.boot.node.machine import VALIDATORS
from rackform.boot.serve import BootServer, Tls, running
from rackform.engine import compile_effective
from rackform.plan.inventory import configure_vars
from rackform.plan.model import thaw
from rackform.targets.aws.access import NodeKeysProvider, known_hosts_line


def _plan(tmp_path, doc):
    return compile_effective(load_effective(write_blueprint(tmp_path, doc)))


def test_the_collections_are_found_with_ansibles_loader_installed(tmp_path):
    # `ansible_collections` has several portions once Ansible's collection loader runs in this
    # process (rackform's own first): ansible.posix is still taken from where it is installed.
    module("nvme_raid_probe")  # installs the loader over the package's collections root
    p = _plan(tmp_path, BARE_METAL)
    spec = manifest(configure_vars(thaw(p.group_vars)), "ng_hgx", p.ssh_user)
    with tarfile.open(build_artifact(spec, tmp_path / "a").path) as tar:
        names = set(tar.getnames())
    assert "collections/ansible_collections/ansible/posix/MANIFEST.json" in names
    assert "collections/ansible_collections/rackform/gpu/playbooks/site.yml" in names


def test_the_artifact_is_deterministic_and_holds_roles_collections_and_its_variables(tmp_path):
    p = _plan(tmp_path, BARE_METAL)
    spec = manifest(configure_vars(thaw(p.group_vars)), "ng_hgx", p.ssh_user)
    one = build_artifact(spec, tmp_path / "a")
    two = build_artifact(spec, tmp_path / "b")
    assert one.sha256 == two.sha256 and one.path.read_bytes() == two.path.read_bytes()
    with tarfile.open(one.path) as tar:
        names = set(tar.getnames())
        ours = "collections/ansible_collections/rackform/gpu/"
        assert {"node_bootstrap.py", ours + "playbooks/site.yml", "bootstrap.json"} <= names
        assert ours + "plugins/module_utils/sysfs.py" in names
        assert ours + "roles/smoke_train/files/validators/launch.py" in names
        assert not [n for n in names if "__pycache__" in n]
        assert "collections/ansible_collections/ansible/posix/MANIFEST.json" in names
        assert "collections/ansible_collections/community/general/MANIFEST.json" in names
        assert all(m.mtime == 0 and m.uid == 0 for m in tar.getmembers())
        shipped = json.loads(tar.extractfile("bootstrap.json").read())
    assert shipped["vars"]["smoke_train_run"] is False
    assert "rackform_digest" not in shipped["vars"]
    assert shipped["pip"]["requirements"] == [
        f"ansible-core=={NODE_ANSIBLE_CORE}",
        f"mitogen=={NODE_MITOGEN}",
    ]
    # Another variable, another artifact.
    other = manifest({**spec["vars"], "nvme_raid_level": 10}, "ng_hgx", p.ssh_user)
    assert build_artifact(other, tmp_path / "a").sha256 != one.sha256


def test_the_node_inventory_is_localhost_in_its_group():
    inv = inventory({"group": "ng_serve", "vars": {"nvme_raid_level": 0}})
    hosts = inv["all"]["children"]["gpu_nodes"]["children"]["ng_serve"]["hosts"]
    assert hosts["localhost"]["ansible_connection"] == "local"
    assert inv["all"]["vars"] == {"nvme_raid_level": 0}


def test_the_stacks_keys_are_openssh_keys_and_known_hosts_trusts_only_the_host_key(tmp_path):
    keys = NodeKeysProvider().create({"cluster": "c-dev"}).outs
    for private, public in (
        (keys["client_private_key"], keys["client_public_key"]),
        (keys["host_private_key"], keys["host_public_key"]),
    ):
        path = tmp_path / "key"
        path.write_text(private)
        path.chmod(0o600)
        derived = subprocess.run(
            ["ssh-keygen", "-y", "-f", str(path)], capture_output=True, text=True, check=True
        ).stdout.split()[:2]
        assert derived == public.split()[:2]
    line = known_hosts_line(keys["host_public_key"])
    assert line.startswith("* ssh-ed25519 ") and keys["host_public_key"].split()[1] in line
    # Created once: no later `up` makes new keys (that would change every node's user data).
    assert not NodeKeysProvider().diff("id", keys, {"cluster": "c-dev"}).changes
    assert NodeKeysProvider().diff("id", keys, {"cluster": "c-prod"}).replaces == ["cluster"]


def test_user_data_is_valid_sh_under_the_ec2_limit(tmp_path):
    keys = NodeKeysProvider().create({"cluster": "c"}).outs
    for url in ("", "https://bucket.s3.us-west-2.amazonaws.com/bootstrap/abc.tar.gz"):
        text = user_data(
            ssh_user="ubuntu",
            authorized_key=keys["client_public_key"],
            host_private_key=keys["host_private_key"],
            host_public_key=keys["host_public_key"],
            artifact_url=url,
            artifact_sha256="ab" * 32 if url else "",
        )
        assert text.startswith("#!/bin/sh\n")
        assert len(text.encode()) < USER_DATA_LIMIT
        script = tmp_path / "user-data"
        script.write_text(text)
        subprocess.run(["sh", "-n", str(script)], check=True)
        assert keys["host_private_key"].strip().splitlines()[1] in text
        assert ("node_bootstrap.py" in text) is bool(url)


def test_an_inference_plan_ships_its_artifact_by_sha_through_the_vpc_endpoint(tmp_path):
    recs = plan(tmp_path, AWS_INFERENCE)
    obj = one(recs, "bucketObjectv2:BucketObjectv2")
    assert obj.inputs["key"].startswith("bootstrap/") and obj.inputs["key"].endswith(".tar.gz")
    policy = json.loads(one(recs, "bucketPolicy:BucketPolicy").inputs["policy"])
    (statement,) = policy["Statement"]
    assert statement["Action"] == "s3:GetObject"
    assert list(statement["Condition"]["StringEquals"]) == ["aws:SourceVpce"]
    block = one(recs, "bucketPublicAccessBlock:BucketPublicAccessBlock").inputs
    assert all(block[k] for k in ("blockPublicAcls", "blockPublicPolicy", "restrictPublicBuckets"))
    endpoint = one(recs, "ec2/vpcEndpoint:VpcEndpoint").inputs
    assert endpoint["vpcEndpointType"] == "Gateway" and endpoint["serviceName"].endswith(".s3")
    asg = one(recs, "autoscaling/group:Group").inputs
    (hook,) = asg["initialLifecycleHooks"]
    assert hook["lifecycleTransition"] == "autoscaling:EC2_INSTANCE_LAUNCHING"
    assert hook["defaultResult"] == "ABANDON"
    assert asg["healthCheckGracePeriod"] > 0
    assert asg["instanceRefresh"]["strategy"] == "Rolling"
    assert all(t["propagateAtLaunch"] for t in asg["tags"])
    # A training cluster has no bucket: the controller configures its nodes.
    assert not of_type(plan(tmp_path, AWS_TRAINING), "bucketObjectv2:BucketObjectv2")


def test_the_dlami_is_adopted_by_the_roles(tmp_path):
    plain = _plan(tmp_path, AWS_TRAINING).group_vars
    assert "nvidia_driver_adopt_preinstalled" not in plain
    dlami = _plan(
        tmp_path, variant(AWS_TRAINING, **{"target.ami": {"image": "dlami-ubuntu-22.04"}})
    ).group_vars
    assert dlami["nvidia_driver_adopt_preinstalled"] is True
    assert dlami["nvme_raid_preexisting_mount"] == "/opt/dlami/nvme"
    assert dlami["nvme_raid_preexisting_action"] == "adopt"


def test_the_node_ansible_core_is_rackforms_pin_within_the_pinned_ansible_packages_range():
    from importlib import metadata

    from packaging.requirements import Requirement

    from rackform.boot.artifact import NODE_ANSIBLE_CORE, node_requirements

    pins = [f"ansible-core=={NODE_ANSIBLE_CORE}", f"mitogen=={NODE_MITOGEN}"]
    assert node_requirements(aws=False) == pins
    assert node_requirements(aws=True)[:2] == pins
    wanted = next(
        Requirement(r) for r in metadata.requires("ansible") if r.startswith("ansible-core")
    )
    assert NODE_ANSIBLE_CORE in wanted.specifier
    # The node's Mitogen is the controller's: the deploy extra's pin.
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    deploy = map(Requirement, project["project"]["optional-dependencies"]["deploy"])
    (mitogen,) = [r for r in deploy if r.name == "mitogen"]
    assert str(mitogen.specifier) == f"=={NODE_MITOGEN}"


def test_a_joining_node_may_heartbeat_and_complete_only_its_groups_hook(tmp_path):
    recs = plan(tmp_path, AWS_INFERENCE)
    (join,) = [r for r in of_type(recs, "iam/rolePolicy:RolePolicy") if r.name.endswith("-join")]
    statements = {s["Sid"]: s for s in json.loads(join.inputs["policy"])["Statement"]}
    hook = statements["CompleteItsLaunchHook"]
    assert sorted(hook["Action"]) == [
        "autoscaling:CompleteLifecycleAction",
        "autoscaling:RecordLifecycleActionHeartbeat",
    ]
    assert all(r.endswith(":autoScalingGroupName/t-serve-default-serve") for r in hook["Resource"])


def test_the_artifact_tells_the_node_its_heartbeat_and_gpus_and_ships_its_checks(tmp_path):
    from rackform.targets.aws.bootstrap import HEARTBEAT_S, group_artifact

    p = _plan(tmp_path, AWS_INFERENCE)
    (group,) = p.node_groups
    artifact = group_artifact(p, group, "llm-serve-a-default-serve")
    with tarfile.open(artifact.path) as tar:
        # The serving checks are the collection's validators, where the node script looks.
        assert {"node_bootstrap.py", f"{VALIDATORS}/validators/serving.py"} <= set(tar.getnames())
        shipped = json.loads(tar.extractfile("bootstrap.json").read())
    assert shipped["aws"]["heartbeat_s"] == HEARTBEAT_S
    # boto3 for the node's AWS calls; an artifact for another target installs ansible-core only.
    assert [r.split(">")[0] for r in shipped["pip"]["requirements"][2:]] == ["boto3"]
    assert shipped["expect_gpus"] == group.gpus_per_node == 4  # g6e.12xlarge: 4 x L40S


def test_the_node_script_runs_the_serving_checks_from_the_artifacts_validators(tmp_path):
    # Unpacked as the user data unpacks it, the node script (nothing of rackform importable, no
    # nvidia-smi here) runs validators.serving from the artifact's collection.
    from rackform.targets.aws.bootstrap import group_artifact

    p = _plan(tmp_path, AWS_INFERENCE)
    (group,) = p.node_groups
    root = tmp_path / "unpacked" / "sha"
    with tarfile.open(group_artifact(p, group, "llm-serve-a-default-serve").path) as tar:
        tar.extractall(root, filter="data")
    code = (
        "import json, sys; from pathlib import Path; import node_bootstrap as nb;"
        "root = Path(sys.argv[1]);"
        "spec = json.loads((root / 'bootstrap.json').read_text());"
        "checks = nb.Bootstrap(root, spec)._serving_checks();"
        "print(json.dumps([sys.modules['validators.serving'].__file__, checks]))"
    )
    env = {"PATH": "/usr/bin:/bin"}  # no PYTHONPATH: validators must come from the artifact
    done = subprocess.run(
        [sys.executable, "-c", code, str(root)], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    where, checks = json.loads(done.stdout)
    assert where == str(root / VALIDATORS / "validators" / "serving.py")
    checks = {c["name"]: c for c in checks}
    assert list(checks) == [
        "gpu_count",
        "driver_branch",
        "ecc_uncorrectable",
        "row_remap",
        "model_mount",
    ]
    # 4 GPUs expected and no nvidia-smi here: the count fails, what it would read is not run.
    assert checks["gpu_count"]["status"] == "fail"
    assert "nvidia-smi is not installed" in checks["gpu_count"]["detail"]


def test_a_baked_blueprints_node_checks_its_image_before_the_roles_and_others_ship_no_check(
    tmp_path,
):
    # A node of a blueprint that bakes its image carries the image check beside the node
    # script and runs it before the roles: here no image record exists (this machine is no
    # baked image), so it is configured in full, with the warning naming the blueprint's roles.
    from rackform.targets.aws.bootstrap import group_artifact

    for d in ("plain", "baked"):
        (tmp_path / d).mkdir()
    plain = _plan(tmp_path / "plain", AWS_INFERENCE)
    with tarfile.open(group_artifact(plain, plain.node_groups[0], "asg").path) as tar:
        assert "image_check.py" not in tar.getnames()
    baked = _plan(tmp_path / "baked", {**AWS_INFERENCE, "image": {"bake": True}})
    root = tmp_path / "unpacked" / "sha"
    with tarfile.open(group_artifact(baked, baked.node_groups[0], "asg").path) as tar:
        assert "image_check.py" in tar.getnames()
        tar.extractall(root, filter="data")
    code = (
        "import json, sys; from pathlib import Path; import node_bootstrap as nb;"
        "nb.LOG = Path(sys.argv[2]); root = Path(sys.argv[1]);"
        "spec = json.loads((root / 'bootstrap.json').read_text());"
        "print(json.dumps([nb.image_env(root, spec), spec['image']['roles']]))"
    )
    log = tmp_path / "node.log"
    env = {"PATH": "/usr/bin:/bin"}  # nothing of rackform importable: the check is shipped
    done = subprocess.run(
        [sys.executable, "-c", code, str(root), str(log)],
        cwd=root, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    skip, roles = json.loads(done.stdout.splitlines()[-1])
    assert skip == {}  # configured in full
    assert "WARNING: the node image does not match the blueprint" in log.read_text()
    assert roles in log.read_text()


def _stand_in(tmp_path):
    """An artifact whose node script records that it ran."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        script = b"import sys, pathlib\npathlib.Path(sys.argv[1], 'ran').write_text('yes')\n"
        info = tarfile.TarInfo("node_bootstrap.py")
        info.size = len(script)
        tar.addfile(info, io.BytesIO(script))
    path = tmp_path / "artifact.tar.gz"
    path.write_bytes(raw.getvalue())
    return path


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_user_data_writes_where_to_report_0600_and_fetches_signed(tmp_path, tls):
    # The real user data, run with sh (no keys given: nothing needs root), writes the report
    # file and fetches a stand-in artifact from the real boot server, signed with the node's
    # own token (the inlined signing agrees with the server's), over https verified against
    # the CA bundle the user data carries; the stand-in records that it ran, and where.
    path, node = _stand_in(tmp_path), "gpu-node-07.rack-3"
    token, report_file = node_token(KEY, node), tmp_path / "etc" / "rackform" / "report.json"
    site = Tls(*self_signed(tmp_path / "tls")) if tls else None
    ca = site.cert.read_text() if site else ""
    server = BootServer(
        path, [node], tmp_path / "reports", KEY, tls=site.context() if site else None
    )
    with running(server, "127.0.0.1") as url:
        assert url.startswith("https://" if tls else "http://")
        settings = {"url": url + "/", "token": token, "node": node, **({"ca": ca} if ca else {})}
        text = user_data(
            artifact_url=f"{url}/artifact/{server.sha256}",
            artifact_sha256=server.sha256,
            report=settings,
            report_file=report_file,
            unpack_root=str(tmp_path / "opt"),
        )
        assert "ssh" not in text  # no keys given: the site's provisioning has its own
        assert KEY.hex() not in text and "Bearer" not in text
        (tmp_path / "user-data").write_text(text)
        subprocess.run(["sh", str(tmp_path / "user-data")], check=True, timeout=120)
    assert stat.S_IMODE(os.stat(report_file).st_mode) == 0o600
    assert json.loads(report_file.read_text()) == {**settings, "url": url}
    assert (tmp_path / "opt" / server.sha256 / "ran").read_text() == "yes"
    assert server.statuses == {200: 1}  # one fetch, signed


def test_report_settings_are_checked(tmp_path):
    ca = "-----BEGIN CERTIFICATE-----\nMII...\n-----END CERTIFICATE-----\n"
    for bad in (
        {"url": "ftp://c", "token": "t", "node": "n"},
        {"url": "http://c", "token": "", "node": "n"},
        {"url": "http://c", "token": "a b", "node": "n"},
        {"url": "http://c", "token": "t", "node": "../x"},
        {"url": "http://c", "token": "t"},  # a token is one node's: the node is named
        {"url": "https://c", "token": "t", "node": "n", "ca": "not a certificate"},
        {"url": "http://c", "token": "t", "node": "n", "ca": ca},  # a CA for plain HTTP
    ):
        with pytest.raises(ValueError):
            user_data(report=bad)
    # Without report settings, nothing of them (as on AWS).
    assert "report.json" not in user_data(artifact_url="https://b/x", artifact_sha256="ab" * 32)


def test_a_serving_node_runs_the_serving_smoke_job_from_its_artifact_after_its_checks(tmp_path):
    # An inference blueprint with a serving workload: its group's artifact carries the job's
    # arguments, and the node script (nothing of rackform importable) runs validators.
    # serving_smoke from the artifact's collection in the node's torch environment (this
    # machine's virtualenv, torch's CPU build), on the stand-in model, after the checks pass.
    from fake_smi import fake_nvidia_smi

    from rackform.targets.aws.bootstrap import group_artifact

    workload = {
        "model_params_b": 8, "method": "serve", "seq_len": 64,
        "serving": {"concurrency": 2, "prompt_tokens": 16, "output_tokens": 4},
    }  # fmt: skip
    p = _plan(tmp_path, {**AWS_INFERENCE, "workload": workload})
    (group,) = p.node_groups
    root = tmp_path / "unpacked" / "sha"
    with tarfile.open(group_artifact(p, group, "llm-serve-a-default-serve").path) as tar:
        tar.extractall(root, filter="data")
    spec = json.loads((root / "bootstrap.json").read_text())
    job = spec["serving_job"]
    assert job[:6] == ["--concurrency", "2", "--prompt-tokens", "16", "--output-tokens", "4"]
    assert "--ttft-p99-ms" not in job  # no objective declared: reported, not judged
    fake_nvidia_smi(tmp_path / "bin", group.gpus_per_node)
    code = (
        "import json, sys; from pathlib import Path; import node_bootstrap as nb;"
        "nb.LOG = Path(sys.argv[2]); root = Path(sys.argv[1]);"
        "spec = json.loads((root / 'bootstrap.json').read_text());"
        "spec['vars'].update(nvme_raid_mount='/', smoke_train_venv=sys.argv[3]);"
        "print(json.dumps(nb.Bootstrap(root, spec)._serving_checks()))"
    )
    log = tmp_path / "node.log"
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(root), str(log), sys.prefix],
        cwd=root, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    checks = {c["name"]: c["status"] for c in json.loads(done.stdout.splitlines()[-1])}
    assert checks["gpu_count"] == "pass"
    assert checks["model_load"] == "pass", log.read_text()[-2000:]
    assert checks["generation"] == "pass"
    assert "-m validators.serving_smoke --report" in log.read_text()
    assert not list(Path("/tmp").glob("rackform-serving.*/report.json"))  # its scratch removed
    # A node whose read-only checks fail (a GPU missing) is failed on them: no job runs.
    fake_nvidia_smi(tmp_path / "bin", group.gpus_per_node - 1)
    log.unlink()
    done = subprocess.run(
        [sys.executable, "-c", code, str(root), str(log), sys.prefix],
        cwd=root, env=env, capture_output=True, text=True,
    )  # fmt: skip
    checks = {c["name"]: c["status"] for c in json.loads(done.stdout.splitlines()[-1])}
    assert checks["gpu_count"] == "fail" and "generation" not in checks
    assert "serving_smoke" not in (log.read_text() if log.exists() else "")


def test_a_serving_node_whose_environment_cannot_run_the_job_fails_it(tmp_path, monkeypatch):
    # No torch environment where the image should hold one: no report, one failed check.
    from rackform.boot.node import serving_job

    monkeypatch.setattr(serving_job, "LOG", tmp_path / "node.log")
    checks = serving_job.serving_job(["--concurrency", "2"], tmp_path, str(tmp_path / "no-venv"))
    assert [(c["name"], c["status"]) for c in checks] == [("serving_smoke", "fail")]
    assert "wrote no report" in checks[0]["detail"]
