"""The e2e's phase timer. Each phase's time is printed when the module's tests end and again
in pytest's closing summary, just above the short test summary, where the tail of a CI log
shows it."""

from __future__ import annotations

import time
from contextlib import contextmanager

import pytest

PHASE_LINES = pytest.StashKey[list[str]]()


class Phases:
    def __init__(self):
        self.times: list[tuple[str, float]] = []
        self.notes: list[str] = []

    @contextmanager
    def __call__(self, name: str):
        start = time.monotonic()
        try:
            yield
        finally:
            self.times.append((name, time.monotonic() - start))

    def lines(self) -> list[str]:
        total = sum(t for _, t in self.times)
        out = ["", "e2e phases (seconds):"]
        out += [f"  {t:7.1f}  {name}" for name, t in self.times]
        out += [f"  {total:7.1f}  total", *[f"  note: {n}" for n in self.notes]]
        return out


@pytest.fixture(scope="module")
def phases(request):
    p = Phases()
    yield p
    request.config.stash[PHASE_LINES] = p.lines()
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print("\n".join(p.lines()), flush=True)


def pytest_terminal_summary(terminalreporter, config):
    lines = config.stash.get(PHASE_LINES, None)
    if lines:
        terminalreporter.write_sep("=", lines[1].rstrip(":"))
        for line in lines[2:]:
            terminalreporter.write_line(line)
