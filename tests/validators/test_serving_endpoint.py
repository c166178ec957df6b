"""The serving smoke job against an OpenAI-compatible endpoint, the way a site running vLLM,
SGLang or TensorRT-LLM points it at its engine. The engines' wheels need CUDA, so a small real
HTTP server on loopback stands in for one: it answers `GET /v1/models` and streams
`POST /v1/completions` as server-sent events, one chunk per token, a final chunk with the usage,
then `data: [DONE]`, as vLLM's OpenAI server does. The job's load and judging are the in-process
model's (test_serving_smoke.py). The fooling servers: one that sends no token, one that stalls
past the deadline, one that redirects to another host (which must never hear from the job, its
API key included), one that stops short of the tokens asked for."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from validators import serving_model, serving_smoke
from validators.report import FAIL, NOT_RUN, PASS, checks_of

SHAPE = ["--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "16"]
LOAD = ["--concurrency", "4", "--prompt-tokens", "8", "--output-tokens", "5", "--requests", "8"]
EASY = ["--ttft-p99-ms", "20000", "--itl-p99-ms", "5000"]
KEY = "sk-test-" + "k" * 24


@contextmanager
def engine(mode: str = "ok", gap_s: float = 0.002) -> Iterator[tuple[str, list[dict]]]:
    """The stand-in engine on loopback; yields its URL and the requests it took. `mode`: ok,
    silent (headers, then [DONE] with no token), stall (headers, then nothing for 30 s), short
    (two tokens of those asked), redirect:<url> (every request redirected there)."""
    seen: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _body(self) -> dict:
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n)) if n else {}

        def _json(self, doc: dict) -> None:
            data = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _any(self) -> None:
            body = self._body()
            seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
            if mode.startswith("redirect:"):
                self.send_response(307)
                self.send_header("Location", mode[len("redirect:") :] + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path == "/v1/models":
                self._json({"object": "list", "data": [{"id": "tiny-llama", "object": "model"}]})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            want = int(body.get("max_tokens", 0))
            n = {"ok": want, "silent": 0, "short": 2, "stall": 0}[mode]
            if mode == "stall":
                time.sleep(30)
            for i in range(n):
                time.sleep(gap_s)
                self._event({"choices": [{"index": 0, "text": f" t{i}"}]})
            self._event({"choices": [], "usage": {"prompt_tokens": len(body["prompt"]),
                                                  "completion_tokens": n}})  # fmt: skip
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")

        def _event(self, doc: dict) -> None:
            self._chunk(f"data: {json.dumps(doc)}\n\n".encode())

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        do_GET = do_POST = _any

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    finally:
        srv.shutdown()
        srv.server_close()


def run(tmp_path, url: str, *extra: str, monkeypatch=None) -> tuple[int, dict]:
    out = tmp_path / "serving.json"
    head = ["--device", "cpu", "--report", str(out), "--no-table", "--dtype-bytes", "2"]
    rc = serving_smoke.main([*head, *SHAPE, *LOAD, "--endpoint", url, *extra])
    return rc, json.loads(out.read_text())


def by_name(doc: dict) -> dict:
    return {c.name: c for c in checks_of(doc)}


def test_an_engine_is_driven_by_the_same_load_and_judged_alike(tmp_path, monkeypatch):
    model = serving_model.write_standin(
        str(tmp_path), serving_model.STANDINS["tiny"], torch.bfloat16, 0, torch.device("cpu")
    )
    monkeypatch.setenv("ENGINE_KEY", KEY)
    with engine() as (url, seen):
        rc, doc = run(
            tmp_path,
            url + "/v1",
            *EASY,
            "--api-key-env",
            "ENGINE_KEY",
            "--model-path",
            model,
            "--hbm-tbps",
            "3.35",
            "--gpu-model",
            "H100-SXM",
            "--price-usd-hr",
            "2",
        )
    c = by_name(doc)
    assert rc == 0 and doc["ok"], doc
    assert c["model_load"].measured == "tiny-llama" and c["model_shape"].status == PASS
    assert c["generation"].measured == 8 and c["ttft_p99"].status == c["itl_p99"].status == PASS
    # On the engine's GPU (named by its bandwidth): MBU from the mount's weight bytes, shown as
    # still to be measured (no calibrated floor for the H100 yet).
    assert c["mbu"].status == NOT_RUN and c["mbu"].measured > 0
    assert "still to be measured" in c["mbu"].detail and "H100-SXM" in c["mbu"].detail
    assert c["peak_memory"].status == NOT_RUN and "engine" in c["peak_memory"].detail
    assert c["cost_per_mtok"].measured > 0
    posts = [s for s in seen if s["path"] == "/v1/completions"]
    assert len(posts) == 8
    body = posts[0]["body"]
    assert body["stream"] is True and body["max_tokens"] == 5 and len(body["prompt"]) == 8
    assert body["model"] == "tiny-llama" and body["ignore_eos"] is True
    assert all(s["headers"].get("Authorization") == f"Bearer {KEY}" for s in seen)
    s = doc["metrics"]["serving"]
    assert s["itl_ms_p50"] >= 1.0  # the server's 2 ms between tokens, as the job timed them


def test_an_engine_that_sends_no_token_fails(tmp_path):
    with engine("silent") as (url, _seen):
        rc, doc = run(tmp_path, url, *EASY)
    c = by_name(doc)["generation"]
    assert rc == 1 and c.status == FAIL and c.measured == 0
    assert "no token" in c.detail
    assert by_name(doc)["ttft_p99"].status == FAIL  # nothing measured fails, never passes


def test_an_engine_that_stops_short_fails(tmp_path):
    with engine("short") as (url, _seen):
        rc, doc = run(tmp_path, url, *EASY)
    c = by_name(doc)["generation"]
    assert rc == 1 and c.status == FAIL and c.measured == 0 and c.expected == 8


def test_an_engine_that_stalls_is_cut_off_at_the_deadline(tmp_path):
    t0 = time.monotonic()
    with engine("stall") as (url, _seen):
        rc, doc = run(tmp_path, url, *EASY, "--deadline-s", "1.5", "--stall-s", "60")
    took = time.monotonic() - t0
    c = by_name(doc)["generation"]
    assert rc == 1 and c.status == FAIL and "stalled" in c.detail
    assert took < 10, f"the job took {took:.1f} s against a 1.5 s deadline"


def test_a_redirect_to_another_host_is_refused_and_the_key_never_leaves(tmp_path, monkeypatch):
    monkeypatch.setenv("ENGINE_KEY", KEY)
    with engine() as (elsewhere, reached), engine(f"redirect:{elsewhere}") as (url, asked):
        rc, doc = run(tmp_path, url, *EASY, "--api-key-env", "ENGINE_KEY")
    assert rc == 1 and asked and not reached
    c = by_name(doc)["model_load"]
    assert c.status == FAIL and "refused a redirect (307)" in c.detail and KEY not in c.detail
    # Named model: the completions themselves are refused the same way.
    with engine() as (elsewhere, reached), engine(f"redirect:{elsewhere}") as (url, asked):
        rc, doc = run(tmp_path, url, *EASY, "--served-model", "m", "--api-key-env", "ENGINE_KEY")
    g = by_name(doc)["generation"]
    assert rc == 1 and not reached and g.status == FAIL and "refused a redirect" in g.detail


@pytest.mark.parametrize("url", ["http://127.0.0.1:1/v1?x=1", "file:///etc/passwd"])
def test_an_endpoint_url_that_is_not_plain_http_is_refused(url):
    with pytest.raises(SystemExit):
        serving_smoke.parse(["--dtype-bytes", "2", *SHAPE, *LOAD, *EASY, "--endpoint", url])
