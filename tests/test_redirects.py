"""No credential follows a redirect to another host, for every HTTP client rackform has
(rackform/http_opener.py on the controller; the nodes' own lines in rackform/boot/node/ and in
the validators, validators/redirects.py, the user data's fetch in rackform/boot/artifact.py and
the bake's in rackform/boot/bake.py).

Two real servers on loopback: the one each client is told of answers every request with a
redirect (301, 302, 307 or 308) to the second, on another port; the second records whatever
reaches it. A client passes when the second server never hears from it (so neither the
Authorization header nor the password can have reached it) and the client says why in one line
that does not show the secret. A redirect on the same origin still works where a client needs
it, and without credentials a redirect elsewhere is urllib's (but never https to http)."""

from __future__ import annotations

import http.server
import json
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from loopback import free_port
from servers import Web

from rackform import http_opener
from rackform.blueprint.targets.onprem.host_spec import Bmc
from rackform.boot import bake
from rackform.boot.artifact import user_data
from rackform.boot.node import aws as node_aws
from rackform.boot.node import log as bootstrap_log
from rackform.boot.node import report as node_report
from rackform.reap.notify import Notifier
from rackform.reap.verdict import Decision
from rackform.targets.onprem.redfish import BmcError, Redfish
from rackform.telemetry.prometheus import (
    PASSWORD_ENV,
    TOKEN_ENV,
    USER_ENV,
    Prometheus,
    TelemetryError,
)
from validators import serving_endpoint

SECRET = "s3cret-Pa55-" + "q" * 12
CODES = [301, 302, 307, 308]
VECTOR = {"status": "success", "data": {"resultType": "vector", "result": []}}


@contextmanager
def server(answer, tls: Web | None = None) -> Iterator[tuple[str, list[dict]]]:
    """A loopback server: `answer(handler, base)` answers each request (base: its own URL);
    yields its URL and the requests it took (method, path, headers, body)."""
    seen: list[dict] = []
    base: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _any(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            seen.append(
                {"method": self.command, "path": self.path, "headers": dict(self.headers),
                 "body": body}
            )  # fmt: skip
            answer(self, base[0])

        do_GET = do_POST = do_PUT = _any

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    scheme = "http"
    if tls is not None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(tls.cert, tls.key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        scheme = "https"
    base.append(f"{scheme}://127.0.0.1:{srv.server_address[1]}")
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield base[0], seen
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join()


def reply(h, status: int, body: bytes = b"{}", headers: dict | None = None) -> None:
    h.send_response(status)
    for k, v in {"Content-Type": "application/json", **(headers or {})}.items():
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def ok(body: object = VECTOR):
    return lambda h, base: reply(h, 200, json.dumps(body).encode())


@dataclass
class Pair:
    first: str  # the URL a client is told of: every request redirected to `second`
    second: str
    asked: list[dict]  # the requests each took
    reached: list[dict]


@contextmanager
def elsewhere(code: int) -> Iterator[Pair]:
    """The server a client is told of, redirecting every request (path kept) to a second."""
    with server(ok()) as (second, reached):
        moved = lambda h, base: reply(h, code, b"", {"Location": second + h.path})  # noqa: E731
        with server(moved) as (first, asked):
            yield Pair(first, second, asked, reached)


def attempt(call, *errors: type[BaseException]) -> str:
    """What `call()` raised of `errors`, as its message; what it returned otherwise (then the
    test fails further on, after saying what reached the second server)."""
    try:
        return f"returned {call()!r}"
    except errors as exc:
        return str(exc.reason) if isinstance(exc, urllib.error.URLError) else str(exc)


def never_reached(reached: list[dict]) -> None:
    assert reached == [], "the second server was sent: " + repr(reached)


def refused(message: str, first: str, second: str, code: int) -> None:
    assert f"refused a redirect ({code}) from {first}" in message, message
    assert f"to {second}" in message and "credentials are not sent to another host" in message
    assert SECRET not in message


def decision() -> Decision:
    return Decision(
        source="bp.yaml", cluster="c1", environment="prod", purpose="training", stack="c1-prod",
        target="bare_metal", window_min=60, threshold_pct=5.0, verdict="idle", action="notify",
        reasons=["idle"], util_avg=1.0, gpus_expected=8, gpus_reporting=8, nodes=[],
        idle_gpu_hours=1.0, usd_per_gpu_hour=None,
    )  # fmt: skip


# ---------------------------------------------------------------- the controller's clients


@pytest.mark.parametrize("code", CODES)
@pytest.mark.parametrize(
    "environ",
    [{TOKEN_ENV: SECRET}, {USER_ENV: "prom", PASSWORD_ENV: SECRET}],
    ids=["bearer", "basic"],
)
def test_prometheus_sends_its_credentials_to_no_other_host(code, environ):
    with elsewhere(code) as w:
        prom = Prometheus(w.first, timeout_s=5, environ=environ)
        said = attempt(lambda: prom.query("up", time.time()), TelemetryError)
    never_reached(w.reached)
    assert len(w.asked) == 1 and w.asked[0]["headers"]["Authorization"]  # sent where it was told
    refused(said, f"{w.first}/api/v1/query", f"{w.second}/api/v1/query", code)
    assert said.startswith(f"Prometheus at {w.first}: refused")


@pytest.mark.parametrize("code", [302, 307])
def test_prometheus_with_user_and_password_in_its_url_shows_neither(code):
    with elsewhere(code) as w:
        with_password = w.first.replace("://", f"://prom:{SECRET}@")
        prom = Prometheus(with_password, timeout_s=5, environ={})
        said = attempt(lambda: prom.query("up", time.time()), TelemetryError)
    never_reached(w.reached)
    assert (
        w.asked[0]["headers"]["Authorization"]
        == http_opener.basic_auth("prom", SECRET)["Authorization"]
    )
    refused(said, f"{w.first}/api/v1/query", f"{w.second}/api/v1/query", code)


@pytest.fixture
def bmc_env(monkeypatch, tmp_path):
    monkeypatch.setenv("RF_USER", "admin")
    monkeypatch.setenv("RF_PASSWORD", SECRET)

    def make(address: str) -> Redfish:
        bmc = Bmc(address=address, username_env="RF_USER", password_env="RF_PASSWORD",
                  system="1", timeout_s=5)  # fmt: skip
        return Redfish(bmc, tmp_path)

    return make


@pytest.mark.parametrize("code", CODES)
def test_redfish_sends_the_bmc_password_to_no_other_host(code, bmc_env):
    with elsewhere(code) as w:
        said = attempt(lambda: bmc_env(w.first).power_state("/redfish/v1/Systems/1"), BmcError)
    never_reached(w.reached)
    assert w.asked[0]["headers"]["Authorization"].startswith("Basic ")
    refused(said, f"{w.first}/redfish/v1/Systems/1", f"{w.second}/redfish/v1/Systems/1", code)


def test_redfish_follows_a_redirect_on_its_own_bmc_with_its_credentials(bmc_env):
    def bmc(h, base):
        if h.path == "/redfish/v1/Systems/1":
            reply(h, 301, b"", {"Location": f"{base}/redfish/v1/Systems/1/"})
        else:
            reply(h, 200, json.dumps({"PowerState": "On"}).encode())

    with server(bmc) as (url, seen):
        assert bmc_env(url).power_state("/redfish/v1/Systems/1") == "On"
    assert [r["path"] for r in seen] == ["/redfish/v1/Systems/1", "/redfish/v1/Systems/1/"]
    assert seen[0]["headers"]["Authorization"] == seen[1]["headers"]["Authorization"]


def test_a_system_path_the_bmc_names_cannot_take_the_password_elsewhere(bmc_env, tmp_path):
    # root + "@odata.id" is the next request's URL: ":port/..." would be another port.
    members = {"Members": [{"@odata.id": ":1/redfish/v1/Systems/1"}]}
    with server(ok(members)) as (url, seen):
        bmc = Bmc(address=url, username_env="RF_USER", password_env="RF_PASSWORD")
        with pytest.raises(BmcError, match="not a path on it"):
            Redfish(bmc, tmp_path).system()
    assert len(seen) == 1


@pytest.mark.parametrize("code", [301, 302])
@pytest.mark.parametrize("kind", ["alertmanager", "webhook", "silence"])
def test_alertmanager_and_webhooks_send_their_password_to_no_other_host(code, kind):
    with elsewhere(code) as w:
        url = w.first.replace("://", f"://rackform:{SECRET}@")
        if kind == "silence":
            out = Notifier(alertmanager=url).silence(decision(), time.time(), 600)
        elif kind == "alertmanager":
            out = Notifier(alertmanager=url).send(decision())
        else:
            out = Notifier(webhook=url + "/hook/T0/B0").send(decision())
    never_reached(w.reached)
    assert (
        w.asked[0]["headers"]["Authorization"]
        == http_opener.basic_auth("rackform", SECRET)["Authorization"]
    )
    assert not out.ok and SECRET not in json.dumps(out.as_dict())
    assert "refused a redirect" in out.detail and "not sent to another host" in out.detail
    # A webhook is named by its origin (its path is often its secret); Alertmanager by its URL.
    if kind == "webhook":
        assert out.subject == f"webhook at {w.first}"
    else:
        assert out.subject.startswith(f"{w.first}/api/v2/")


# ---------------------------------------------------------------- the nodes' clients


@pytest.fixture
def node_log(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(bootstrap_log, "LOG", tmp_path / "bootstrap.log")
    return tmp_path / "bootstrap.log"


@pytest.mark.parametrize("code", CODES)
def test_a_nodes_report_sends_its_token_to_no_other_host(code, node_log):
    with elsewhere(code) as w:
        to = {"url": w.first, "token": SECRET, "node": "gpu-node-07"}
        sent = node_report.send_report(to, {"outcome": "configured"}, tries=3, sleep=lambda s: None)
    never_reached(w.reached)
    assert sent is False
    assert len(w.asked) == 1  # a refused redirect is not tried again (as a 4xx is not)
    log = node_log.read_text()
    assert f"refused a redirect ({code}) from {w.first}/report/gpu-node-07 to {w.second}" in log
    assert "credentials are not sent to another host" in log and SECRET not in log


@pytest.mark.parametrize("code", [301, 307])
def test_a_nodes_metadata_token_goes_to_no_other_host(code, monkeypatch):
    with server(ok()) as (second, reached):

        def imds(h, base):
            if h.command == "PUT":
                reply(h, 200, SECRET.encode(), {"Content-Type": "text/plain"})
            else:
                reply(h, code, b"", {"Location": second + h.path})

        with server(imds) as (first, asked):
            monkeypatch.setattr(node_aws, "IMDS", f"{first}/latest")
            said = attempt(lambda: node_aws.imds("instance-id"), OSError)
    never_reached(reached)
    assert said.startswith("refused a redirect") and "not sent to another host" in said
    assert asked[1]["headers"]["X-Aws-Ec2-Metadata-Token"] == SECRET


def test_the_nodes_opener_follows_a_redirect_on_its_own_origin(monkeypatch):
    def imds(h, base):
        if h.command == "PUT":
            reply(h, 200, b"tok", {"Content-Type": "text/plain"})
        elif h.path.endswith("/old"):
            reply(h, 301, b"", {"Location": "/latest/meta-data/instance-id"})
        else:
            reply(h, 200, b"i-0abc", {"Content-Type": "text/plain"})

    with server(imds) as (url, seen):
        monkeypatch.setattr(node_aws, "IMDS", f"{url}/latest")
        assert node_aws.imds("old") == "i-0abc"
    assert seen[2]["headers"]["X-Aws-Ec2-Metadata-Token"] == "tok"


@pytest.mark.parametrize("code", CODES)
def test_the_serving_smoke_jobs_engine_key_goes_to_no_other_host(code):
    with elsewhere(code) as w:
        client = serving_endpoint.Client(w.first, SECRET, timeout_s=5)
        said = attempt(client.served_model, serving_endpoint.EndpointError)
    never_reached(w.reached)
    refused(said, f"{w.first}/v1/models", w.second, code)
    assert w.asked[0]["headers"]["Authorization"] == f"Bearer {SECRET}"


def test_the_serving_smoke_job_follows_a_redirect_on_its_engines_own_origin():
    def engine(h, base):
        if h.path == "/v1/models":
            reply(h, 308, b"", {"Location": "/v2/models"})
        else:
            reply(h, 200, json.dumps({"data": [{"id": "llama"}]}).encode())

    with server(engine) as (url, seen):
        assert serving_endpoint.Client(url, SECRET, timeout_s=5).served_model() == "llama"
    assert [s["path"] for s in seen] == ["/v1/models", "/v2/models"]
    assert seen[1]["headers"]["Authorization"] == f"Bearer {SECRET}"


@pytest.mark.parametrize("code", [302, 307])
def test_the_user_datas_fetch_sends_its_token_to_no_other_host(code, tmp_path):
    report_file = tmp_path / "etc" / "report.json"
    with elsewhere(code) as w:
        text = user_data(
            artifact_url=f"{w.first}/artifact/{'ab' * 32}",
            artifact_sha256="ab" * 32,
            report={"url": w.first, "token": SECRET, "node": "gpu-node-07"},
            report_file=report_file,
            unpack_root=str(tmp_path / "opt"),
        )
        (tmp_path / "user-data").write_text(text)
        done = subprocess.run(
            ["sh", str(tmp_path / "user-data")], capture_output=True, text=True, timeout=60
        )
    never_reached(w.reached)
    assert done.returncode != 0 and len(w.asked) == 1  # refused at once, not tried 30 times
    assert f"refused a redirect ({code}) to {w.second}/artifact/" in done.stderr, done.stderr
    assert "nothing is fetched from another host" in done.stderr


def test_the_bakes_fetch_takes_nothing_from_another_host(tmp_path):
    with elsewhere(302) as w:
        url = f"{w.first}/a?X-Amz-Signature={SECRET}"
        said = attempt(lambda: bake.fetch(url, "ab" * 32, tmp_path), SystemExit)
    never_reached(w.reached)
    assert f"refused a redirect (302) to {w.second}/a:" in said and SECRET not in said


# ---------------------------------------------------------------- the opener itself


def test_without_credentials_a_redirect_elsewhere_is_followed():
    with elsewhere(302) as w, http_opener.urlopen(f"{w.first}/x", timeout=5) as r:
        assert r.status == 200
    assert [r["path"] for r in w.reached] == ["/x"]


@pytest.mark.parametrize(
    ("headers", "url"),
    [
        ({"Cookie": "session=" + SECRET}, "/x"),
        ({"X-Auth-Token": SECRET}, "/x"),
        ({"X-Api-Key": SECRET}, "/x"),
        ({}, f"/x?access_token={SECRET}"),
    ],
    ids=["cookie", "x-auth-token", "api-key", "token-in-query"],
)
def test_any_credential_a_request_carries_keeps_it_home(headers, url):
    with elsewhere(302) as w:
        req = urllib.request.Request(w.first + url, headers=headers)
        with pytest.raises(http_opener.RedirectRefused) as err:
            http_opener.urlopen(req, timeout=5)
    never_reached(w.reached)
    assert SECRET not in str(err.value.reason)


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> Web:
    return Web.make(tmp_path_factory.mktemp("tls"), "u", "p")


def test_https_to_http_is_never_followed_even_without_credentials(tls):
    ctx = ssl.create_default_context(cafile=str(tls.cert))
    with server(ok()) as (second, reached):
        moved = lambda h, base: reply(h, 302, b"", {"Location": second + h.path})  # noqa: E731
        with (
            server(moved, tls=tls) as (first, asked),
            pytest.raises(http_opener.RedirectRefused) as err,
        ):
            http_opener.urlopen(f"{first}/x", timeout=5, context=ctx)
    never_reached(reached)
    assert len(asked) == 1
    assert err.value.reason == (
        f"refused a redirect (302) from {first}/x to {second}/x: "
        "a redirect from https to http is never followed"
    )


def test_messages_show_no_userinfo_or_query():
    url = f"https://u:{SECRET}@bmc.example:8443/redfish/v1?token={SECRET}#f"
    assert http_opener.shown(url) == "https://bmc.example:8443/redfish/v1"
    bare, auth = http_opener.split_userinfo(f"http://am%40corp:{SECRET}@[::1]:9093/x")
    assert bare == "http://[::1]:9093/x"
    assert auth == http_opener.basic_auth("am@corp", SECRET)
    assert http_opener.split_userinfo("http://h/x") == ("http://h/x", {})


def test_a_password_in_a_prometheus_url_is_never_shown():
    url = f"http://prom:{SECRET}@127.0.0.1:{free_port()}"
    with pytest.raises(TelemetryError) as err:
        Prometheus(url, timeout_s=5, environ={}).query("up", time.time())
    assert str(err.value).startswith("Prometheus at http://127.0.0.1:")
    assert SECRET not in str(err.value)
