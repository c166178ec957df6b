"""The controller's side of configuring at boot, for a target whose nodes the blueprint lists
(bare metal, colocation): each listed node fetches its group's pinned artifact from the
controller's boot server, configures and checks itself, and reports; the controller builds the
artifacts, writes the user data the site's provisioning (PXE, MAAS, cloud-init's NoCloud) hands
to the nodes, serves the artifacts and takes the reports, and waits for every listed node's.

A round's directory (`out`) holds, each file 0600 (they carry credentials):

    key                       the round's key (hex; a new one each round), the controller's
                              alone: each node's token is derived from it
                              (`credentials.node_token`), and it is in no user data
    user-data/<node>          the node's user data (`artifact.user_data`):
                              where to report, under which name, with its own token (and, for
                              an https server, the CA bundle to verify it against), then its
                              group's artifact fetched, checked and run
    reports/<node>.json       each node's report as the boot server took it (the round's own:
                              the listed nodes' reports of an earlier round are removed first)

Tokens and the URL go into the user data only: the artifact, and so its sha256, is the same
whatever the round's key and wherever it is served from. The key lives as long as the round's
directory; nothing of it is in the stack (its state, outputs or config) or in a log line.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rackform.boot.artifact import Artifact, user_data
from rackform.boot.credentials import new_key, node_token
from rackform.boot.groups import group_artifact
from rackform.boot.reports import Judged, path_of, wait
from rackform.boot.serve import MAX_CONNECTIONS, BootServer, Tls, open_files, running
from rackform.plan.inventory import host_vars
from rackform.plan.model import NodeGroupPlan, Plan, stack_name

WILDCARDS = ("", "0.0.0.0", "::")


class BootError(ValueError):
    """What the user asked cannot be served: one line saying why."""


@dataclass(frozen=True)
class Round:
    out: Path
    key: bytes = field(repr=False)  # never printed
    artifacts: dict[str, Artifact]  # node group -> its artifact
    nodes: dict[str, str]  # listed node -> its node group, in the blueprint's order
    host_vars: dict[str, dict] = field(default_factory=dict)  # node -> its own (rack, drives)

    @property
    def pinned(self) -> dict[str, str]:
        """Each node's artifact sha256."""
        return {n: self.artifacts[g].sha256 for n, g in self.nodes.items()}

    def token(self, node: str) -> str:
        """Node `node`'s own token for this round (its user data's, and no other's)."""
        return node_token(self.key, node)

    @property
    def reports(self) -> Path:
        return self.out / "reports"

    def user_data_path(self, node: str) -> Path:
        return self.out / "user-data" / node


def default_out(plan: Plan) -> Path:
    """Where a round's files go unless told: `rackform-boot/<stack>` in the working directory."""
    return Path("rackform-boot") / stack_name(plan.effective)


def announced(round_: Round, bound: str, written: list[Path], deadline_s: float) -> list[str]:
    """What the operator is told once the server listens: where, each group's artifact, where
    the user data to hand out is, and how long the wait is."""
    return [
        f"listening on {bound}",
        *(f"node group {name}: artifact {a.sha256}" for name, a in round_.artifacts.items()),
        f"user data for {len(written)} nodes in {round_.out / 'user-data'} (each node its own "
        "file, through the site's provisioning)",
        f"waiting up to {deadline_s / 60:g} min for their reports",
    ]


def check_bind(bind: str, url: str | None, tls: Tls | None = None) -> None:
    """BootError where the nodes' URL cannot be told from where the server listens, or is not
    what it serves (https with `tls`)."""
    if url is None and bind in WILDCARDS:
        raise BootError(
            f"--bind {bind or '(empty)'} listens on every address: say with --url where the "
            "nodes reach it"
        )
    if url is not None and not url.startswith(("http://", "https://")):
        raise BootError(f"--url {url!r} is no http(s) URL")
    if tls is not None and url is not None and not url.startswith("https://"):
        raise BootError(f"--url {url!r}: the server speaks TLS, so the nodes' URL is https://")


def tls_of(cert: Path | None, key: Path | None, ca: Path | None) -> Tls | None:
    """The site's certificate as the options give it (none of them: None, plain HTTP), or
    BootError where they do not go together."""
    if cert is None and key is None:
        if ca is not None:
            raise BootError("a CA bundle for the nodes is for a TLS server: give its certificate")
        return None
    if cert is None or key is None:
        raise BootError("the boot server's TLS needs its certificate and its key, both")
    return Tls(cert, key, ca)


def listed_groups(plan: Plan, only: str | None = None) -> list[NodeGroupPlan]:
    """The node groups whose hosts the blueprint lists (`only`: that one), or BootError."""
    if not plan.nodes_listed:
        raise BootError(
            f"target {plan.target_type} does not list its nodes in the blueprint (the stack "
            "creates them): `boot serve` serves the nodes a blueprint lists"
        )
    groups = [g for g in plan.node_groups if g.hosts]
    if only is not None:
        groups = [g for g in groups if g.name == only]
        if not groups:
            names = ", ".join(g.name for g in plan.node_groups if g.hosts) or "none"
            raise BootError(f"no node group {only!r} with listed hosts (those with hosts: {names})")
    if not groups:
        raise BootError("the blueprint lists no hosts")
    return groups


def prepare(plan: Plan, out: Path, groups: list[NodeGroupPlan]) -> Round:
    """Each group's artifact built, a new key written, the listed nodes' old reports removed."""
    artifacts = {g.name: group_artifact(plan, g) for g in groups}
    nodes = {h.name: g.name for g in groups for h in g.hosts}
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = new_key()
    _private(out / "key", key.hex() + "\n")
    (out / "token").unlink(missing_ok=True)  # an older rackform's one token for every node
    own = {h.name: host_vars(h) for g in groups for h in g.hosts}
    round_ = Round(out, key, artifacts, nodes, own)
    for node in nodes:
        path_of(round_.reports, node).unlink(missing_ok=True)
    return round_


def write_user_data(round_: Round, url: str, ca: str = "") -> list[Path]:
    """Each listed node's user data, for nodes that reach the boot server at `url` (`ca`: the
    CA bundle an https server is verified against; "": the nodes' own trust store)."""
    written = []
    for node, group in round_.nodes.items():
        artifact = round_.artifacts[group]
        own = round_.host_vars.get(node) or {}
        report = {"url": url, "token": round_.token(node), "node": node, "vars": own}
        text = user_data(
            artifact_url=f"{url}/artifact/{artifact.sha256}",
            artifact_sha256=artifact.sha256,
            report={**report, **({"ca": ca} if ca else {})},
        )
        path = round_.user_data_path(node)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _private(path, text)
        written.append(path)
    return written


def serve(
    round_: Round,
    bind: str,
    port: int,
    deadline_s: float,
    *,
    url: str | None = None,
    tls: Tls | None = None,
    listening: Callable[[str, list[Path]], None] = lambda url, paths: None,
    poll_s: float = 5.0,
) -> Judged:
    """Serve the round's artifacts and take its nodes' reports on `bind`:`port` (0: a free
    port) until every listed node has reported or `deadline_s` passes; the nodes as judged.
    `url`: where the nodes reach the server (default: the address it is bound to; required
    for a wildcard `bind`); `tls`: the site's certificate (None: plain HTTP).
    `listening(url, user_data_paths)` is called once the server listens and the user data is
    written."""
    check_bind(bind, url, tls)
    open_files(len(round_.nodes) + 64, MAX_CONNECTIONS + 64)
    context, ca = (tls.context(), tls.ca_text()) if tls else (None, "")
    server = BootServer(
        [a.path for a in round_.artifacts.values()],
        round_.nodes,
        round_.reports,
        round_.key,
        tls=context,
    )
    with running(server, bind, port) as bound:  # closes the server after
        listening(bound, write_user_data(round_, (url or bound).rstrip("/"), ca))
        return wait(round_.nodes, round_.reports, round_.pinned, deadline_s, poll_s=poll_s)


def _private(path: Path, text: str) -> None:
    """`text` written to `path`, readable by its owner only (0600 also where it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)
