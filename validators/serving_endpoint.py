"""The serving smoke job's load against a serving engine (vLLM, SGLang, TensorRT-LLM) through
its OpenAI-compatible endpoint: `concurrency` threads, each sending streaming completions
(`POST /v1/completions`, `stream: true`) one after another until the run's requests are sent,
each request's tokens timed as they arrive. The prompt is a list of token ids (the completions
API takes one), so its length is exact whatever the tokenizer; `ignore_eos` (an extension vLLM
and SGLang take) asks for every output token. A server that streams a chunk per token gives one
timed event per token; the count is the final chunk's `usage.completion_tokens` where the server
sends one (`stream_options.include_usage`), else the events counted.

HTTP goes through validators/redirects.py (redirects on the same origin only); the API key comes
from an environment variable, never the command line. Standard library only.
"""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from validators import redirects
from validators.serving_load import Load, Request

# Token ids drawn for the prompts: inside every current model's vocabulary, past the special
# tokens at its start.
PROMPT_IDS = (1000, 30000)


class EndpointError(RuntimeError):
    """The endpoint cannot be used at all (no model listed, a refused redirect)."""


def base_url(url: str) -> str:
    """The endpoint's base (`.../v1` stripped, no trailing slash); ValueError for a URL that is
    not plain http(s) to a host, or that carries a user:password (give --api-key-env)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--endpoint {url!r}: give http(s)://HOST[:PORT]")
    if parts.username is not None or parts.query or parts.fragment:
        raise ValueError("--endpoint: no user:password, query or fragment (the key: --api-key-env)")
    path = parts.path.rstrip("/")
    path = path[: -len("/v1")] if path.endswith("/v1") else path
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class Client:
    def __init__(self, base: str, key: str = "", timeout_s: float = 30.0):
        self.base, self.timeout_s = base, timeout_s
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}

    def _req(self, path: str, body: dict | None = None) -> urllib.request.Request:
        data = json.dumps(body).encode() if body is not None else None
        headers = {**self.headers, **({"Content-Type": "application/json"} if data else {})}
        return urllib.request.Request(self.base + path, data=data, headers=headers)

    def served_model(self) -> str:
        """The first model `GET /v1/models` lists."""
        try:
            with redirects.urlopen(self._req("/v1/models"), self.timeout_s) as r:
                doc = json.loads(r.read(1 << 20))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise EndpointError(f"{self.base}/v1/models: {_why(exc)}") from None
        data = doc.get("data") if isinstance(doc, dict) else None
        ids = [m.get("id") for m in data or [] if isinstance(m, dict)]
        if not ids or not isinstance(ids[0], str):
            raise EndpointError(f"{self.base}/v1/models lists no model")
        return ids[0]

    def complete(
        self,
        model: str,
        prompt: list[int],
        load: Load,
        req: Request,
        stall_s: float,
        until: float,
        clock,
    ) -> None:
        """One streaming completion, its token times and count recorded into `req`: a read
        that waits `stall_s` for the server fails it, and so does the clock passing `until`
        (a server that trickles bytes but no tokens)."""
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": load.output_tokens,
            "min_tokens": load.output_tokens,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        usage = None
        req.sent = clock()
        try:
            with redirects.urlopen(self._req("/v1/completions", body), stall_s) as r:
                for raw in r:
                    if clock() > until:
                        req.error = "the run's deadline passed mid-stream"
                        break
                    line = raw.decode("utf-8", "replace").strip()
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    choices = chunk.get("choices") or []
                    if choices and choices[0].get("text"):
                        req.token_times.append(clock())
                    if isinstance(chunk.get("usage"), dict):
                        usage = chunk["usage"].get("completion_tokens")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            req.error = _why(exc, stall_s)
        req.tokens = usage if isinstance(usage, int) else len(req.token_times)
        if req.error:
            return
        if not req.token_times:
            req.error = "the stream ended with no token"


def _why(exc: BaseException, stall_s: float | None = None) -> str:
    if isinstance(exc, TimeoutError | socket.timeout) or "timed out" in str(exc):
        return f"no answer for {stall_s:g} s (stalled)" if stall_s else "timed out"
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return f"{type(exc).__name__}: {exc}"


def run(
    client: Client,
    model: str,
    load: Load,
    stall_s: float,
    seed: int,
    left_s: Callable[[], float],
    beat: Callable[[str], None] = lambda _what: None,
    clock=time.perf_counter,
) -> list[Request]:
    """Every request of the run, `concurrency` at a time; a request still due when the run's
    time is out is never sent (the records say so)."""
    rng = random.Random(seed)
    prompts = [
        [rng.randrange(*PROMPT_IDS) for _token in range(load.prompt_tokens)]
        for _request in range(load.requests)
    ]
    records = [Request(sent=0.0) for _request in range(load.requests)]
    todo = iter(range(load.requests))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            left = left_s()
            if left <= 0:
                records[i].sent, records[i].error = clock(), "not sent: the run's deadline passed"
                continue
            until = clock() + left
            client.complete(model, prompts[i], load, records[i], min(stall_s, left), until, clock)
            beat(f"request {i + 1} of {load.requests}")

    threads = [threading.Thread(target=worker, daemon=True) for _stream in range(load.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        # Every read is bounded by stall_s and every request by the deadline; the join is too.
        t.join(timeout=max(0.0, left_s()) + stall_s + 5)
    return records


def api_key(env_name: str | None) -> str:
    return os.environ.get(env_name, "") if env_name else ""
