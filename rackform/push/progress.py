"""The live display of a push: ansible-runner's events as lines, and the failures they carry, each
named by host, role and task."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rackform.push.site import site_playbook


@dataclass(frozen=True)
class Failure:
    host: str
    role: str
    task: str
    message: str
    unreachable: bool = False

    def __str__(self) -> str:
        where = f"{self.role} : {self.task}" if self.role else self.task
        lost = "UNREACHABLE at " if self.unreachable else ""
        return f"{self.host}: {lost}{where}: {self.message}"


def failure_message(res: Mapping[str, Any], max_lines: int = 6) -> str:
    """A failed task's message: Ansible's msg, then the last lines of the command's output."""
    lines = [str(res.get("msg") or "").strip()]
    for key in ("stderr", "stdout", "module_stderr"):
        text = str(res.get(key) or "").strip()
        if text and text not in lines[0]:
            lines.append(f"{key}: " + " / ".join(text.splitlines()[-3:]))
    text = "\n".join(line for line in lines if line) or "failed without a message"
    out = text.splitlines()
    if len(out) > max_lines:  # a module that returns a whole log in msg (pip) keeps its tail
        out = [out[0], "...", *out[-(max_lines - 2) :]]
    return " / ".join(out)


def diff_lines(diff: Any) -> list[str]:
    """A task's --diff result (one or a list of before/after pairs) as unified diff lines."""
    out: list[str] = []
    for d in diff if isinstance(diff, list) else [diff] if diff else []:
        if not isinstance(d, Mapping):
            continue
        if "prepared" in d:  # modules that format their own diff (apt, ...)
            out += str(d["prepared"]).splitlines()
            continue
        before, after = d.get("before", ""), d.get("after", "")
        if not isinstance(before, str) or not isinstance(after, str):
            before, after = json.dumps(before, indent=1), json.dumps(after, indent=1)
        out += [
            line.rstrip("\n")
            for line in difflib.unified_diff(
                before.splitlines(keepends=True),
                after.splitlines(keepends=True),
                fromfile=str(d.get("before_header", "before")),
                tofile=str(d.get("after_header", "after")),
            )
        ]
    return out


class Progress:
    """Turns runner events into a live display: one line as each task starts, then one line
    per host that changed or failed (hosts that were merely ok or skipped are only counted),
    and the message of every debug task, which is how the roles explain a skip. Each host's
    line follows its own task's line: where nodes go at their own pace (`strategy: free`), a
    result for another task than the last line named names its task again first (what a reader
    of the display, as `rackform drift`'s, attributes it by). A failure of the site playbook's
    check before a batch (`batch_check`) marks the play it stopped in (`held_in`)."""

    def __init__(self, out: Callable[[str], None], batch_check: str | None = None):
        self.out = out
        self.batch_check = site_playbook().batch_check if batch_check is None else batch_check
        self.failures: list[Failure] = []
        self.changed: dict[str, list[str]] = {}  # host -> "role : task" that changed
        self.plays: dict[str, int] = {}  # a play in batches starts once a batch
        self.started: set[str] = set()  # under `strategy: free` each host starts each task
        self.last = ""  # the task the last task line named
        self.play = ""
        self.seen: dict[str, set[str]] = {}  # play -> the hosts that ran a task of it
        self.held_in = ""  # the play whose batch check stopped the run

    def __call__(self, event: Mapping[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {}) or {}
        if kind == "playbook_on_play_start":
            play = self.play = data.get("play", "")
            self.plays[play] = self.plays.get(play, 0) + 1
            n = self.plays[play]
            self.started.clear()
            self.last = ""
            self.out(f"== {play}" + (f" (batch {n})" if n > 1 else ""))
        elif kind in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            role = data.get("role", "")
            task = data.get("task", "")
            uuid = data.get("task_uuid")
            if uuid and uuid in self.started:
                return True
            self.started.add(uuid or "")
            quiet = data.get("task_action", "").split(".")[-1] == "meta" or task.startswith(
                "Validating arguments against arg spec"
            )
            if not quiet:
                handler = "handler " if kind == "playbook_on_handler_task_start" else ""
                self._task(f"{handler}{role + ' : ' if role else ''}{task}")
        elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
            self._result(kind, data)
        return True

    def _task(self, line: str) -> None:
        self.last = line.removeprefix("handler ")
        self.out(line)

    def _result(self, kind: str, data: Mapping[str, Any]) -> None:
        res = data.get("res", {}) or {}
        host, role, task = data.get("host", "?"), data.get("role", ""), data.get("task", "")
        self.seen.setdefault(self.play, set()).add(host)
        took = data.get("duration")
        took = f" ({took:.1f} s)" if isinstance(took, int | float) else ""
        label = f"{role} : {task}" if role else task
        shown = (
            kind != "runner_on_ok"
            or res.get("changed")
            or (data.get("task_action", "").endswith("debug") and "msg" in res)
        )
        if shown and label != self.last:
            self._task(label)
        if kind == "runner_on_ok":
            if data.get("task_action", "").endswith("debug") and "msg" in res:
                self.out(f"    {host}: {res['msg']}")
            elif res.get("changed"):
                self.changed.setdefault(host, []).append(label)
                self.out(f"    {host}: changed{took}")
                for line in diff_lines(res.get("diff")):
                    self.out(f"      {line}")
            return
        if task == self.batch_check:
            self.held_in = self.play
        lost = kind == "runner_on_unreachable"
        failure = Failure(host, role, task, failure_message(res), unreachable=lost)
        self.failures.append(failure)
        what = "UNREACHABLE" if lost else "FAILED"
        self.out(f"    {host}: {what}{took}: {failure.message}")
