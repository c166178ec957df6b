"""The controller's cost per node when nodes configure themselves at boot: N simulated nodes
fetch the pinned artifact and post their report at once against the boot server
(rackform/boot/serve.py), run as its own process on loopback; then the controller reads every
report (rackform/boot/reports.py's `judge`).

The artifact is a real one (rackform/boot/artifact.py's `build_artifact`, as
tests/boot/test_artifact.py builds it: the roles, validators and the Ansible collections they
use, about 2.2 MB) or, where the deploy extra's `ansible` package is missing, random bytes of
the same size (the output says which). Each node is an asyncio client; the nodes are spread
over `--procs` processes, all released at one instant. The server's CPU time is read from
/proc/PID/stat before and after the load, its peak RSS from /proc/PID/status (VmHWM).

The open-files limit (RLIMIT_NOFILE) is raised to what the run needs, soft up to hard, and the
run is refused when the hard limit is lower. Every wait has a deadline (`--timeout` for the
whole load): the benchmark stops by itself, killing what it started.

    .venv/bin/python benchmarks/boot_load.py [--nodes 512] [--procs 4] [--timeout 300]

Linux only (/proc). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import multiprocessing as mp
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rackform.boot.credentials import new_key, node_token  # noqa: E402
from rackform.boot.node import authorization  # noqa: E402
from rackform.boot.reports import PASSED, judge  # noqa: E402
from rackform.boot.serve import open_files  # noqa: E402

REAL_SIZE = 2_190_488  # bytes of a real artifact (2026-11-28), for the random stand-in
TICK = os.sysconf("SC_CLK_TCK")
CHECKS = [
    {"name": "gpu_count", "status": "pass", "measured": 8, "expected": 8, "unit": "GPUs"},
    {"name": "driver_branch", "status": "pass", "measured": "550", "expected": "550"},
    {"name": "ecc_uncorrectable", "status": "pass", "measured": 0, "expected": 0},
    {"name": "row_remap", "status": "pass", "measured": 0, "expected": 0},
    {"name": "model_mount", "status": "pass", "measured": "/mnt/models", "expected": "mounted"},
]


def artifact(cache: Path) -> tuple[Path, str]:
    """(path, what it is): the real artifact, or random bytes of its size."""
    try:
        from rackform.boot.artifact import build_artifact, manifest

        spec = manifest({"nvme_raid_level": 0}, "ng_hgx", "ubuntu", expect_gpus=8)
        return build_artifact(spec, cache).path, "a real artifact"
    except (ImportError, FileNotFoundError) as exc:
        path = cache / "random.tar.gz"
        path.write_bytes(os.urandom(REAL_SIZE))
        return path, f"random bytes of a real artifact's size (no real one: {exc})"


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15)


def memory_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


async def node(host, port, key, sha, name, deadline) -> tuple[str, float]:
    """One node: GET the artifact (streamed through sha256, never held whole), check it, POST
    its report, each request signed with its own token. ("ok" or why not, seconds taken)."""
    t = time.perf_counter()
    token, path = node_token(key, name), f"/artifact/{sha}"
    head = f"Host: {host}\r\nAuthorization: {authorization(name, token, 'GET', path)}\r\n"
    try:
        async with asyncio.timeout(deadline):
            r, w = await asyncio.open_connection(host, port)
            w.write(f"GET {path} HTTP/1.1\r\n{head}\r\n".encode())
            status = await r.readuntil(b"\r\n\r\n")
            digest = hashlib.sha256()
            while chunk := await r.read(256 * 1024):
                digest.update(chunk)
            w.close()
            if not status.startswith(b"HTTP/1.1 200 "):
                return f"fetch: {_first_line(status)}", 0.0
            if digest.hexdigest() != sha:
                return "fetch: sha256 mismatch", 0.0
            body = json.dumps(
                {"node": name, "artifact": sha, "outcome": "configured", "checks": CHECKS}
            ).encode()
            path = f"/report/{name}"
            signed = authorization(name, token, "POST", path, body)
            head = f"Host: {host}\r\nAuthorization: {signed}\r\n"
            r, w = await asyncio.open_connection(host, port)
            w.write(
                f"POST {path} HTTP/1.1\r\n{head}Content-Length: {len(body)}\r\n\r\n"
                .encode() + body
            )  # fmt: skip
            answer = await r.read()
            w.close()
            if not answer.startswith(b"HTTP/1.1 200 "):
                return f"report: {_first_line(answer)}", 0.0
    except TimeoutError:
        return "timed out", 0.0
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}", 0.0
    return "ok", time.perf_counter() - t


def _first_line(response: bytes) -> str:
    return response.partition(b"\r\n")[0].decode("latin-1")


def worker(url, key, sha, names, deadline, ready, go, out) -> None:
    """A process of nodes: ready, wait for the common start, run them all at once."""
    host, port = url.removeprefix("http://").rsplit(":", 1)

    async def run():
        return await asyncio.gather(*(node(host, int(port), key, sha, n, deadline) for n in names))

    ready.set()
    if not go.wait(deadline):
        out.put([("never started", 0.0)] * len(names))
        return
    out.put(asyncio.run(run()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=512)
    ap.add_argument("--procs", type=int, default=4, help="client processes")
    ap.add_argument("--timeout", type=float, default=300, help="seconds for the whole load")
    args = ap.parse_args()
    # The server holds a socket per node; each client process its share and a few more.
    need = args.nodes + 256
    try:
        limit = open_files(need)
    except OSError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        path, what = artifact(tmp / "cache")
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        size = path.stat().st_size
        names = [f"gpu-node-{i:05d}.rack-{i // 32}" for i in range(args.nodes)]
        (tmp / "nodes.txt").write_text("\n".join(names) + "\n")
        key = new_key()
        (tmp / "key").write_text(key.hex())
        print(f"{args.nodes} nodes over {args.procs} client processes; artifact: {what},"
              f" {size:,} bytes; open-files limit {limit}; {os.cpu_count()} CPUs")  # fmt: skip
        argv = [sys.executable, "-m", "rackform.boot.serve", "--artifact", str(path)]
        argv += ["--nodes", str(tmp / "nodes.txt"), "--reports", str(tmp / "reports")]
        argv += ["--key-file", str(tmp / "key"), "--bind", "127.0.0.1"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        server = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, text=True)
        procs: list[mp.Process] = []
        try:
            if not select.select([server.stdout], [], [], 30)[0]:
                raise TimeoutError("the server did not start in 30 s")
            url = server.stdout.readline().split()[-1]  # "listening on URL"
            cpu0, rss0 = cpu_s(server.pid), memory_kib(server.pid, "VmRSS")
            ctx = mp.get_context("fork")
            out, go = ctx.Queue(), ctx.Event()
            readies = []
            for i in range(args.procs):
                ready = ctx.Event()
                share = names[i :: args.procs]
                p = ctx.Process(
                    target=worker, args=(url, key, sha, share, args.timeout, ready, go, out)
                )
                p.start()
                procs.append(p)
                readies.append(ready)
            for ready in readies:
                ready.wait(30)
            t = time.perf_counter()
            go.set()
            results = []
            end = time.monotonic() + args.timeout + 10
            for _ in procs:
                results += out.get(timeout=max(1.0, end - time.monotonic()))
            wall = time.perf_counter() - t
            cpu = cpu_s(server.pid) - cpu0
            peak = memory_kib(server.pid, "VmHWM")
            t = time.perf_counter()
            judged = judge(names, tmp / "reports", sha)
            read_s = time.perf_counter() - t
        except Exception as exc:  # a timeout, a dead server: stop, saying why
            print(f"stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        finally:
            for p in procs:
                p.kill()
                p.join(5)
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
    failures: dict[str, int] = {}
    for why, _ in results:
        if why != "ok":
            failures[why] = failures.get(why, 0) + 1
    took = sorted(s for why, s in results if why == "ok")
    n = args.nodes
    print(f"wall {wall:.2f} s for every node to fetch and report"
          f" ({n * size / wall / 1e9 * 8:.2f} Gbit/s served)")  # fmt: skip
    if took:
        p99 = took[min(len(took) - 1, int(len(took) * 0.99))]
        print(f"per node: median {statistics.median(took):.2f} s, p99 {p99:.2f} s,"
              f" slowest {took[-1]:.2f} s")  # fmt: skip
    print(f"server CPU {cpu:.2f} s (user+sys) = {cpu / n * 1000:.3f} CPU-ms per node")
    print(f"server RSS {rss0 / 1024:.1f} MiB idle, {peak / 1024:.1f} MiB peak"
          f" = {(peak - rss0) / n:.1f} KiB per node")  # fmt: skip
    print(f"reading {n} reports: {read_s:.3f} s = {read_s / n * 1000:.3f} ms per node;"
          f" {len(judged.names(PASSED))} passed")  # fmt: skip
    print(
        f"failures: {sum(failures.values())}" + "".join(f"; {k}: {v}" for k, v in failures.items())
    )
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
