"""`rackform diff` on real git repositories made here: each blueprint that changed between two
revisions, per environment, with resources from the offline plan (Pulumi's mocks, the path
`rackform plan` takes), findings and cost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gitrepo import clone, commit, git, make_remote

from rackform.gitops.diff_render import usd

ROOT = Path(__file__).resolve().parents[2]
AWS = (ROOT / "blueprints" / "aws-training.yaml").read_text()
METAL = (ROOT / "blueprints" / "baremetal-training.yaml").read_text()
COLO = (ROOT / "blueprints" / "colo-inference.yaml").read_text()


@pytest.fixture
def repo(tmp_path):
    _, work = make_remote(
        tmp_path, {"blueprints/aws-training.yaml": AWS, "blueprints/baremetal.yaml": METAL}
    )
    return work


def as_json(rackform, repo, *args):
    proc = rackform("diff", "--base", "HEAD~1", "--json", *args, cwd=repo)
    return proc, json.loads(proc.stdout) if proc.stdout else None


def by_path(doc):
    return {b["path"]: b for b in doc["blueprints"]}


def env(bp, name):
    return next(e for e in bp["environments"] if e["environment"] == name)


def test_a_bigger_node_group_adds_instances_and_costs_more(rackform, repo):
    commit(
        repo,
        "two more nodes",
        {"blueprints/aws-training.yaml": AWS.replace("count: 4", "count: 6", 1)},
    )
    proc, doc = as_json(rackform, repo)
    assert proc.returncode == 0, proc.stderr
    (bp,) = doc["blueprints"]  # baremetal.yaml did not change: not planned, not shown
    assert bp["status"] == "M" and bp["cluster"] == "llm-train-a"
    default = env(bp, "default")
    assert {"field": "node_groups[gpu].count", "old": 4, "new": 6} in default["fields"]
    created = [r["urn"] for r in default["resources"] if r["op"] == "create"]
    assert [u.rsplit("::", 1)[1] for u in created] == [
        "llm-train-a-default-gpu-4",
        "llm-train-a-default-gpu-5",
    ]
    assert all("aws:ec2/instance:Instance" in u for u in created)
    month = default["cost"]["month"]
    assert month["new"] == pytest.approx(month["old"] * 6 / 4, rel=0.01)
    assert month["delta"] == pytest.approx(month["new"] - month["old"])
    assert default["replaces_or_deletes_nodes"] == 0
    # An environment that overrides the count is untouched by the base's change.
    assert env(bp, "dev")["status"] == "unchanged" and env(bp, "dev")["resources"] == []


def test_markdown_comment_has_a_table_per_cluster_a_total_and_red_for_deleted_nodes(rackform, repo):
    commit(
        repo,
        "fewer nodes",
        {"blueprints/aws-training.yaml": AWS.replace("count: 4", "count: 3", 1)},
    )
    proc = rackform("diff", "--base", "HEAD~1", "-o", "comment.md", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert (repo / "comment.md").read_text() == text
    assert "### llm-train-a (`blueprints/aws-training.yaml`, modified)" in text
    assert "| environment | digest | resources | findings | per month | per run |" in text
    assert "`-` `urn:pulumi:llm-train-a-default::rackform::" in text
    assert "gpu-3` 🔴 **deletes running nodes**" in text
    assert "**Total: -$" in text and "per month" in text
    assert "🔴 2 change(s) delete or replace running nodes." in text  # default and prod
    assert "-$0.00" not in text  # the unchanged run cost of an unchanged environment is ±$0.00


def test_new_deleted_and_renamed_blueprints_all_show(rackform, repo):
    git(repo, "mv", "blueprints/baremetal.yaml", "blueprints/metal-renamed.yaml")
    commit(
        repo,
        "rename one, add one, delete one",
        {"blueprints/colo.yaml": COLO, "blueprints/aws-training.yaml": None},
    )
    proc, doc = as_json(rackform, repo)
    assert proc.returncode == 0, proc.stderr
    bps = by_path(doc)
    assert bps["blueprints/colo.yaml"]["status"] == "A"
    added = env(bps["blueprints/colo.yaml"], "default")
    assert added["status"] == "added" and added["resources"]
    assert all(r["op"] == "create" for r in added["resources"])
    assert added["cost"]["month"]["delta"] == added["cost"]["month"]["new"] > 0
    gone = bps["blueprints/aws-training.yaml"]
    assert gone["status"] == "D" and env(gone, "default")["status"] == "deleted"
    assert env(gone, "default")["replaces_or_deletes_nodes"] == 4
    renamed = bps["blueprints/metal-renamed.yaml"]
    assert renamed["status"] == "R" and renamed["old_path"] == "blueprints/baremetal.yaml"
    assert all(e["status"] == "unchanged" for e in renamed["environments"])


def test_a_blueprint_invalid_at_head_is_named_with_its_line_and_the_others_still_show(
    rackform, repo
):
    broken = AWS.replace("count: 4", "count: four", 1)
    line = next(i for i, t in enumerate(broken.splitlines(), 1) if "count: four" in t)
    commit(
        repo,
        "one broken, one fine",
        {
            "blueprints/aws-training.yaml": broken,
            "blueprints/baremetal.yaml": METAL.replace("owner: ", "owner: x", 1),
        },
    )
    proc, doc = as_json(rackform, repo)
    assert proc.returncode == 2
    err = [x for x in proc.stderr.splitlines() if "blueprints/aws-training.yaml@HEAD:" in x]
    assert err and err[0].startswith(f"blueprints/aws-training.yaml@HEAD:{line}:"), proc.stderr
    assert "node_groups" in err[0] and "Traceback" not in proc.stderr
    bps = by_path(doc)
    assert bps["blueprints/aws-training.yaml"]["environments"] == []
    assert bps["blueprints/baremetal.yaml"]["environments"]  # still compared


def test_a_new_unwaived_error_fails_the_check(rackform, repo):
    # One node cannot hold a 70B full fine-tune: preflight's memory-does-not-fit error.
    commit(
        repo, "one node", {"blueprints/aws-training.yaml": AWS.replace("count: 4", "count: 1", 1)}
    )
    proc, doc = as_json(rackform, repo)
    assert proc.returncode == 1, proc.stderr
    default = env(doc["blueprints"][0], "default")
    appeared = [f for f in default["findings"] if f["change"] == "appeared"]
    errors = [f for f in appeared if f["level"] == "error"]
    assert [(f["code"], f["waived"]) for f in errors] == [("memory-does-not-fit", False)]
    assert default["new_errors"] == 1
    # Blocked at head: its program is not run, so no resource reads as deleted.
    assert default["resources"] == []
    assert default["not_planned"] == "not planned at head: unwaived preflight errors"
    line = next(x for x in proc.stderr.splitlines() if "[env default]" in x)
    assert line.startswith("blueprints/aws-training.yaml@HEAD:15:20: node_groups[0].instance_type")
    assert "new error memory-does-not-fit" in line
    assert env(doc["blueprints"][0], "staging")["findings"] == []  # staging keeps 3 nodes


def test_bad_refs_and_a_shallow_clone_missing_the_base(rackform, repo, tmp_path):
    proc = rackform("diff", "--base", "no-such-branch", cwd=repo)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"rackform: --base no-such-branch: no such revision in {repo}"
    ]
    for i in range(2):
        commit(repo, f"change {i}", {"blueprints/baremetal.yaml": METAL + f"# {i}\n"})
    git(repo, "push", "-q", "origin", "main")
    base = git(repo, "rev-parse", "HEAD~2")
    shallow = clone(tmp_path / "remote.git", tmp_path / "shallow", "--depth", "1", "--no-local")
    proc = rackform("diff", "--base", base, cwd=shallow)
    assert proc.returncode == 2 and "git fetch --unshallow" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""


def test_promotion_rules_are_reviewed_like_code(rackform, tmp_path):
    """Adding, removing or re-pointing a `promotion:` rule changes no environment's blueprint
    digest, yet it decides what may be deployed where: always a finding, never "unchanged"."""
    from promotion_world import PIPE

    three = PIPE.replace("  prod: {}", "  dev: {}\n  prod: {}")
    _, work = make_remote(tmp_path, {"blueprints/pipe.yaml": three})
    repointed = three.replace("prod: {from: staging}", "prod: {from: dev}")
    dropped = repointed.replace("promotion:\n  prod: {from: dev}\n", "")
    assert "promotion" not in dropped
    steps = [
        ("re-point prod", repointed, "re-pointed", "staging", "dev",
         "promoted from dev instead of staging"),
        ("drop the rule", dropped, "removed", "dev", None,
         "no longer gated: deployed without a promotion from dev"),
        ("gate prod again", three, "added", None, "staging", "now only by promotion from staging"),
    ]  # fmt: skip
    for message, new, change, old_src, new_src, words in steps:
        commit(work, message, {"blueprints/pipe.yaml": new})
        proc, doc = as_json(rackform, work)
        assert proc.returncode == 0, proc.stderr
        prod = env(doc["blueprints"][0], "prod")
        assert prod["status"] == "changed", message
        assert prod["digest"][0] == prod["digest"][1]  # no digest moved: the rule did
        assert prod["promotion"] == {"change": change, "old": old_src, "new": new_src,
                                     "message": words}  # fmt: skip
        assert env(doc["blueprints"][0], "staging")["promotion"] is None
        md = rackform("diff", "--base", "HEAD~1", cwd=work).stdout
        assert f"⚠️ promotion rule {change}: prod {words}" in md
        assert f"promotion rule {change} |" in md  # in the table row too


def test_a_new_instance_type_marks_every_training_node_replaced_with_the_reason(rackform, repo):
    commit(
        repo,
        "p5e",
        {"blueprints/aws-training.yaml": AWS.replace("type: p5.48xlarge", "type: p5e.48xlarge")},
    )
    proc, doc = as_json(rackform, repo)
    assert proc.returncode == 0, proc.stderr
    default = env(by_path(doc)["blueprints/aws-training.yaml"], "default")
    nodes = [r for r in default["resources"] if r["type"] == "aws:ec2/instance:Instance"]
    assert len(nodes) == 4 and all(r["op"] == "replace" for r in nodes)
    for r in nodes:
        assert r["nodes"] == "replaces" and r["delete_before_replace"] is True
        assert "new version of llm-train-a-default-gpu-lt" in r["reason"]
        assert "instanceType: p5.48xlarge → p5e.48xlarge" in r["reason"]
    assert default["replaces_or_deletes_nodes"] == 4
    text = rackform("diff", "--base", "HEAD~1", cwd=repo).stdout
    assert "`-/+` `urn:pulumi:llm-train-a-default::rackform::" in text
    assert "gpu-0` 🔴 **replaces running nodes**: replaced, launchTemplate.version" in text
    assert "deleted first, down until replaced" in text


def test_an_inference_blueprint_shows_its_cost_per_million_output_tokens(rackform, tmp_path):
    # colo-inference: 70B in bf16 on nodes of 8 x L40S (6.912 TB/s). One sequence of 8192
    # tokens: 140 GB + 21.14 GB of KV cache (the estimated shape, 71 x 71 heads of 128) a step;
    # eight: 140 + 8 x 21.14 = 309.12 GB. Eight sequences a step of 309.12 GB against one of
    # 161.14 GB: 8 x 161.14 / 309.12 = 4.17 times the tokens for the same node-hour.
    _, repo = make_remote(tmp_path, {"blueprints/colo.yaml": COLO})
    busier = COLO.replace("  seq_len: 8192\n", "  seq_len: 8192\n  serving: {concurrency: 8}\n")
    assert busier != COLO
    commit(repo, "eight requests at once", {"blueprints/colo.yaml": busier})
    proc, doc = as_json(rackform, repo)
    assert proc.returncode == 0, proc.stderr
    tokens = env(by_path(doc)["blueprints/colo.yaml"], "default")["cost"]["tokens"]
    assert tokens["old"] / tokens["new"] == pytest.approx(8 * 161.1403 / 309.1224, rel=1e-4)
    assert tokens["delta"] == pytest.approx(tokens["new"] - tokens["old"])
    text = rackform("diff", "--base", "HEAD~1", cwd=repo).stdout
    assert (
        "| environment | digest | resources | findings | per month | per million output tokens |"
        in text
    )
    row = next(line for line in text.splitlines() if line.startswith("| default "))
    assert row.endswith(
        f"{usd(tokens['old'])} → {usd(tokens['new'])} ({usd(tokens['delta'], signed=True)}) |"
    )
