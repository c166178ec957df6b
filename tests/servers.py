"""Real servers for the reap and heal tests, each on 127.0.0.1 and stopped at the end of its
block:

- Prometheus (Debian's package) over hours of dcgm-exporter history (and any other series a
  test gives: node_exporter's, DCGM's error counters), made as OpenMetrics and backfilled with
  `promtool tsdb create-blocks-from openmetrics` before Prometheus starts on that data directory
  (seconds, however long the history); or scraping live exporters (the VM e2e's node_exporter);
- sushy-tools' Redfish emulator with its fake systems driver and HTTP basic auth;
- Alertmanager (Debian's package), with its own data directory and clustering off.
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest
from loopback import free_port

from rackform.telemetry import labels as L

STEP_S = 60  # one sample a minute (dcgm-exporter is scraped more often; the stats are the same)


@dataclass(frozen=True)
class Gpu:
    """One GPU's history: utilization and framebuffer in use, from `start_min` minutes ago to
    `end_min` minutes ago."""

    cluster: str
    environment: str
    purpose: str
    node: str
    gpu: int
    util: float | Callable[[int], float]
    fb_mib: float | Callable[[int], float] = 0.0
    start_min: int = 180
    end_min: int = 0
    # Labels beyond the scrape config's (e.g. dcgm-exporter's instance or driver version): a
    # relabelled GPU is two Gpu entries with different extras and adjoining time ranges.
    extra: tuple[tuple[str, str], ...] = ()
    # The node's job heartbeat (unix time of its last step) as a function of minutes ago, or
    # None (no heartbeat series); written once per node, from its GPU 0.
    heartbeat: Callable[[int, float], float] | None = None


@dataclass(frozen=True)
class Series:
    """Any other series: its metric name, its labels (in order), and its value, as given or as
    a function of (minutes ago, the sample's unix time) (None: no sample then, a gap), from
    `start_min` minutes ago to `end_min` minutes ago."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float | Callable[[int, int], float | None]
    start_min: int = 180
    end_min: int = 0


def _value(v, i: int) -> float:
    return v(i) if callable(v) else v


def openmetrics(gpus: list[Gpu], now: float, series: Sequence[Series] = ()) -> str:
    """The GPUs' history, then the other series', as OpenMetrics: each metric family
    contiguous (every family a gauge: PromQL reads counters the same), each series in order."""
    out: list[str] = []
    end = int(now) - int(now) % STEP_S
    families = (
        (L.GPU_UTIL, lambda g, i: _value(g.util, i), lambda g: True),
        (L.FB_USED, lambda g, i: _value(g.fb_mib, i), lambda g: True),
        (L.HEARTBEAT, lambda g, i: g.heartbeat(i, end),
         lambda g: g.heartbeat is not None and g.gpu == 0),
    )  # fmt: skip
    for name, value, has in families:
        out.append(f"# TYPE {name} gauge")
        for g in gpus:
            if not has(g):
                continue
            labels = (
                f'{L.CLUSTER}="{g.cluster}",{L.ENVIRONMENT}="{g.environment}",'
                f'{L.PURPOSE}="{g.purpose}",{L.NODE}="{g.node}"'
            )
            if name != L.HEARTBEAT:
                labels += f',{L.GPU}="{g.gpu}",UUID="GPU-{g.cluster}-{g.node}-{g.gpu}"'
            labels += "".join(f',{k}="{v}"' for k, v in g.extra)
            for i in range(g.start_min * 60 // STEP_S, g.end_min * 60 // STEP_S - 1, -1):
                t = end - i * STEP_S
                # repr: every digit (`:g` kept six, so a heartbeat's unix time was rounded to
                # 10,000 s and read as stopped or running depending on the hour of the run).
                out.append(f"{name}{{{labels}}} {float(value(g, i))!r} {t}")
    names = list(dict.fromkeys(s.name for s in series))
    for name in names:
        out.append(f"# TYPE {name} gauge")
        for s in (s for s in series if s.name == name):
            labels = ",".join(f'{k}="{v}"' for k, v in s.labels)
            for i in range(s.start_min * 60 // STEP_S, s.end_min * 60 // STEP_S - 1, -1):
                t = end - i * STEP_S
                v = s.value(i, t) if callable(s.value) else s.value
                if v is not None:
                    out.append(f"{name}{{{labels}}} {float(v)!r} {t}")
    out.append("# EOF")
    return "\n".join(out) + "\n"


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed: run scripts/setup.sh --test")
    return path


def _wait(
    url: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0, ctx=None, **req
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{url} exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, **req), timeout=2, context=ctx):
                return
        except urllib.error.HTTPError as exc:
            # Prometheus and Alertmanager answer /-/ready with 503 until they have loaded their
            # data: that is not ready (CI's stop 50 queried a Prometheus still opening its TSDB).
            if exc.code < 500:
                return  # it answers (e.g. 401 without credentials)
            time.sleep(0.2)
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"{url} did not come up in {timeout:.0f} s: {log.read_text()[-2000:]}")


@contextmanager
def _process(argv: list[str], log: Path, ready: str, ctx=None, **req) -> Iterator[None]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait(ready, proc, log, ctx=ctx, **req)
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def backfill(gpus: list[Gpu], data: Path, now: float, series: Sequence[Series] = ()) -> Path:
    """Write the history and turn it into TSDB blocks under data/tsdb."""
    data.mkdir(parents=True, exist_ok=True)
    src = data / "history.om"
    src.write_text(openmetrics(gpus, now, series))
    tsdb = data / "tsdb"
    done = subprocess.run(
        [need("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(src), str(tsdb)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    src.unlink()
    return tsdb


@contextmanager
def prometheus(
    gpus: list[Gpu],
    data: Path,
    now: float | None = None,
    web: Web | None = None,
    series: Sequence[Series] = (),
) -> Iterator[str]:
    """Prometheus over the GPUs' (and the other series') backfilled history; yields its URL.
    With `web`, behind Prometheus's own web config: TLS with a certificate for 127.0.0.1 and
    basic auth."""
    tsdb = backfill(gpus, data, time.time() if now is None else now, series)
    config = data / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1m\nscrape_configs: []\n")
    port = free_port()
    scheme = "https" if web else "http"
    url = f"{scheme}://127.0.0.1:{port}"
    argv = [
        need("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={tsdb}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    ctx, headers = None, {}
    if web:
        argv.append(f"--web.config.file={web.config(data)}")
        ctx = ssl.create_default_context(cafile=str(web.cert))
        headers = {"Authorization": web.basic()}  # else a 401 would pass for ready
    with _process(argv, data / "prometheus.log", f"{url}/-/ready", ctx=ctx, headers=headers):
        yield url


@contextmanager
def scraping(scrape_configs: str, data: Path, interval_s: int = 2) -> Iterator[str]:
    """Prometheus scraping live targets (`scrape_configs`: the YAML list under that key, as the
    dcgm role writes it); yields its URL."""
    data.mkdir(parents=True, exist_ok=True)
    config = data / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {interval_s}s\n  scrape_timeout: {interval_s}s\n"
        "scrape_configs:\n" + scrape_configs
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        need("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={data / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with _process(argv, data / "prometheus.log", f"{url}/-/ready"):
        yield url


def query(url: str, expr: str) -> list[dict]:
    """An instant PromQL query against the Prometheus at `url`: its result vector."""
    q = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as r:
        return json.load(r)["data"]["result"]


def wait_for(
    url: str, expr: str, count: int, what: str, timeout: float = 90, poll_s: float = 1.0
) -> None:
    """Until `expr` gives `count` series at the Prometheus at `url`; a test failure naming
    `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if len(query(url, expr)) == count:
            return
        time.sleep(poll_s)
    pytest.fail(f"Prometheus: not within {timeout:.0f} s: {what} ({expr})")


@dataclass(frozen=True)
class Web:
    """A self-signed certificate for 127.0.0.1 (openssl) and one basic-auth user."""

    cert: Path
    key: Path
    user: str
    password: str

    @staticmethod
    def make(directory: Path, user: str, password: str) -> Web:
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = directory / "cert.pem", directory / "key.pem"
        subprocess.run(
            [need("openssl"), "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True, capture_output=True,
        )  # fmt: skip
        return Web(cert, key, user, password)

    def basic(self) -> str:
        return _basic(self.user, self.password)

    def config(self, directory: Path) -> Path:
        digest = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=4)).decode()
        path = directory / "web.yml"
        path.write_text(
            f"tls_server_config:\n  cert_file: {self.cert}\n  key_file: {self.key}\n"
            f"basic_auth_users:\n  {self.user}: '{digest}'\n"
        )
        return path


@contextmanager
def redfish(systems: dict[str, str], data: Path, user: str, password: str) -> Iterator[str]:
    """sushy-tools' emulator with fake systems ({uuid: power state}) behind basic auth."""
    data.mkdir(parents=True, exist_ok=True)
    htpasswd = data / "htpasswd"
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    htpasswd.write_text(f"{user}:{digest}\n")
    fake = [{"uuid": u, "name": u, "power_state": s, "external_notifier": False, "nics": []}
            for u, s in systems.items()]  # fmt: skip
    config = data / "sushy.conf"
    config.write_text(
        f"SUSHY_EMULATOR_FAKE_DRIVER = True\n"
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {fake!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(data / 'state')!r}\n"
    )
    port = free_port()
    exe = Path(sys.executable).parent / "sushy-emulator"
    argv = [str(exe), "--config", str(config), "--fake", "-i", "127.0.0.1", "-p", str(port)]
    url = f"http://127.0.0.1:{port}"
    with _process(argv, data / "sushy.log", f"{url}/redfish/v1/"):
        yield url


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def power_state(url: str, system: str, user: str, password: str) -> str:
    req = urllib.request.Request(
        f"{url}/redfish/v1/Systems/{system}", headers={"Authorization": _basic(user, password)}
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)["PowerState"]


def wait_power(url: str, system: str, want: str, user: str, password: str) -> str:
    """The fake driver applies a power change 1-11 s after it is asked for (like hardware)."""
    deadline = time.monotonic() + 20
    state = power_state(url, system, user, password)
    while state != want and time.monotonic() < deadline:
        time.sleep(0.5)
        state = power_state(url, system, user, password)
    return state


@contextmanager
def alertmanager(data: Path) -> Iterator[str]:
    data.mkdir(parents=True, exist_ok=True)
    config = data / "alertmanager.yml"
    config.write_text("route:\n  receiver: none\nreceivers:\n  - name: none\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        need("prometheus-alertmanager"),
        f"--config.file={config}",
        f"--storage.path={data / 'am'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    with _process(argv, data / "alertmanager.log", f"{url}/-/ready"):
        yield url


def alerts(url: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5) as r:
        return json.load(r)
