"""rackform's spot interruption agent for a Slurm node on EC2 Spot capacity (the slurm role
installs it as the rackform-spot-agent service when `slurm_spot_agent` is true).

It asks the instance metadata service (IMDSv2: a session token from `PUT /latest/api/token`,
then `GET /latest/meta-data/spot/instance-action` with it) every `--interval-s` seconds. That
item is absent (HTTP 404) until EC2 decides to interrupt the instance; from then on it is
`{"action": "terminate", "time": "2017-09-18T08:22:00Z"}` (the action: terminate, stop or
hibernate; the time: about two minutes ahead, UTC). AWS, "Spot Instance interruption notices",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
(read 2026-11-30), recommends checking every 5 seconds.

On a notice, once per notice:
1. the node is drained (`scontrol update nodename=NODE state=drain reason=...`): no new job
   starts on it, and the reason names the notice;
2. every running job on it is asked to checkpoint: SIGUSR1 to its steps (`scancel
   --signal=USR1 JOB`; not `--batch` or `--full`: a batch shell that does not trap SIGUSR1
   would die of it);
3. after `--requeue-after-s` seconds (cut short so the requeue still comes `--kill-margin-s`
   before the notice's time), each of those jobs is requeued (`scontrol requeue JOB`): Slurm
   sends it SIGTERM, then SIGKILL KillWait seconds later, and puts it back in the queue, where
   it resumes from the checkpoint it just wrote, at most two minutes old, on whatever nodes
   are then up.

A node drained by the agent stays drained (its replacement registers as a new node, or an
operator runs `scontrol update nodename=NODE state=resume`). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime

TOKEN_PATH = "/latest/api/token"
NOTICE_PATH = "/latest/meta-data/spot/instance-action"
TOKEN_TTL_S = 21600  # the longest IMDSv2 allows (six hours)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """EC2's metadata service answers where it is asked and never redirects: a redirect is an
    error here (its status), never a second request, which would carry the session token to
    wherever it pointed."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


class Imds:
    """IMDSv2: a session token, renewed before it lapses or when the service refuses it."""

    def __init__(self, base: str, timeout_s: float = 2.0, clock=time.monotonic):
        self.base, self.timeout_s, self.clock = base.rstrip("/"), timeout_s, clock
        self._token: str | None = None
        self._until = 0.0

    def _request(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        req = urllib.request.Request(self.base + path, method=method, headers=headers)
        try:
            with _OPENER.open(req, timeout=self.timeout_s) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, b""

    def token(self) -> str:
        if self._token is None or self.clock() >= self._until:
            status, body = self._request(
                "PUT", TOKEN_PATH, {"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)}
            )
            if status != 200:
                raise OSError(f"IMDS token: HTTP {status}")
            self._token, self._until = body.decode(), self.clock() + TOKEN_TTL_S - 60
        return self._token

    def notice(self) -> dict | None:
        """The interruption notice, or None when there is none (404)."""
        for _attempt in (1, 2):
            status, body = self._request(
                "GET", NOTICE_PATH, {"X-aws-ec2-metadata-token": self.token()}
            )
            if status == 401:  # the token lapsed (the instance was stopped, say): a new one
                self._token = None
                continue
            if status == 404:
                return None
            if status != 200:
                raise OSError(f"IMDS {NOTICE_PATH}: HTTP {status}")
            doc = json.loads(body)
            if not isinstance(doc, dict) or "action" not in doc or "time" not in doc:
                raise ValueError(f"IMDS {NOTICE_PATH}: not a notice: {body[:200]!r}")
            return doc
        raise OSError(f"IMDS {NOTICE_PATH}: HTTP 401 with a new token")


def seconds_until(when: str, now: float) -> float:
    """Seconds from `now` (unix time) to the notice's `time` (ISO 8601 UTC, e.g.
    2017-09-18T08:22:00Z); negative once it has passed."""
    at = datetime.strptime(when, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return at.timestamp() - now


def run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout


def act(
    notice: dict,
    node: str,
    requeue_after_s: float,
    kill_margin_s: float,
    sleep=time.sleep,
    now=time.time,
    log=print,
) -> list[str]:
    """Drain the node, signal its running jobs to checkpoint, then requeue them. Returns the
    jobs. A command that fails is logged and the rest go on: each step helps on its own."""

    def attempt(argv: list[str]) -> str:
        try:
            return run(argv)
        except (OSError, subprocess.SubprocessError) as exc:
            err = getattr(exc, "stderr", "") or exc
            log(f"spot agent: {' '.join(argv)} failed: {str(err).strip()}")
            return ""

    reason = f"spot interruption notice: {notice['action']} at {notice['time']}"
    log(f"spot agent: {node}: {reason}")
    attempt(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])
    jobs = attempt(
        ["squeue", "--noheader", f"--nodelist={node}", "--states=RUNNING", "--format=%A"]
    ).split()
    for job in jobs:
        attempt(["scancel", "--signal=USR1", job])
    if jobs:
        log(f"spot agent: asked jobs {', '.join(jobs)} to checkpoint (SIGUSR1)")
        left = seconds_until(notice["time"], now()) - kill_margin_s
        sleep(max(0.0, min(requeue_after_s, left)))
    for job in jobs:
        attempt(["scontrol", "requeue", job])
    if jobs:
        log(f"spot agent: requeued jobs {', '.join(jobs)}")
    return jobs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="rackform-spot-agent", description=__doc__.split("\n\n", maxsplit=1)[0]
    )
    p.add_argument("--node", required=True, help="This node's name in Slurm.")
    p.add_argument("--imds", default="http://169.254.169.254", help="The metadata service.")
    p.add_argument("--interval-s", type=float, default=5.0, help="Seconds between checks.")
    p.add_argument(
        "--requeue-after-s",
        type=float,
        default=60.0,
        help="Seconds between the checkpoint signal and the requeue.",
    )
    p.add_argument(
        "--kill-margin-s",
        type=float,
        default=40.0,
        help="The requeue comes at least this long before the notice's time (KillWait and more).",
    )
    args = p.parse_args(argv)
    imds = Imds(args.imds)
    handled: set[str] = set()
    print(f"spot agent: {args.node}: watching {imds.base}{NOTICE_PATH}", flush=True)
    while True:
        try:
            notice = imds.notice()
        except (OSError, ValueError) as exc:  # the service is unreachable or says nonsense
            print(f"spot agent: {exc}", file=sys.stderr, flush=True)
            notice = None
        if notice is not None and json.dumps(notice, sort_keys=True) not in handled:
            handled.add(json.dumps(notice, sort_keys=True))
            act(
                notice,
                args.node,
                args.requeue_after_s,
                args.kill_margin_s,
                log=lambda line: print(line, flush=True),
            )
        time.sleep(args.interval_s)


if __name__ == "__main__":
    sys.exit(main())
