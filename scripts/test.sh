#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh machine (scripts/setup.sh --test), then
# runs the linters and the whole suite, end-to-end tests included. Extra arguments go to one
# pytest run over them. Without any, the suite runs as two pytest processes at once: the
# end-to-end files (tests/e2e: VMs under emulation, in order) and the rest, whose report follows
# the e2e's, with ansible-lint beside them; the run fails if any of the three does. The e2e
# leaves a core idle at times (one VM busy, SSH round trips, waits for a job or a boot), which
# the rest uses.
#
# At the end it prints where the time went: wall seconds per phase (setup, each linter, the e2e
# and the rest, which overlap), after the e2e's own table of its phases and pytest's slowest
# tests, so every CI log shows it and a regression is visible in the next one.
set -euo pipefail
cd "$(dirname "$0")/.."

run_start=$(date +%s)
# The machine's CPU counters (/proc/stat's first line: busy and idle jiffies) at the start, so the
# end can say how busy its cores were: a run whose cores were busy throughout is bound by CPU work,
# and only doing less work shortens it.
cpu_jiffies() { awk 'NR == 1 { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }
read -r busy0 idle0 < <(cpu_jiffies)
timings=()
work=$(mktemp -d -t rackform-test.XXXXXX)
# The CPU seconds (user + system) of what this (sub)shell has run and waited for: bash's `times`,
# run here rather than in a pipeline's own subshell, whose children are none.
children_cpu() {
  local f="$work/times.$BASHPID"
  times >"$f"
  tail -n 1 "$f" | awk '{ s = 0; for (i = 1; i <= NF; i++) { split($i, t, /[ms]/); s += t[1] * 60 + t[2] } printf "%d", s }'
  rm -f "$f"
}
# timed NAME COMMAND...: run it, and write its wall and CPU seconds to $work/NAME.time (also when
# it fails); its exit status is the command's.
timed() {
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s)
  (
    rc=0
    "$@" || rc=$?
    children_cpu >"$work/$name.cpu"
    exit "$rc"
  ) || rc=$?
  printf '%6d %6s' "$(($(date +%s) - t0))" "$(cat "$work/$name.cpu")" >"$work/$name.time"
  return "$rc"
}
# phase NAME COMMAND...: `timed`, and its times recorded under NAME for the table at the end.
phase() {
  local name=$1 rc=0
  shift
  timed phase "$@" || rc=$?
  timings+=("$(cat "$work/phase.time")  $name")
  return "$rc"
}
print_timings() {
  echo "== where the time went (seconds: wall, then CPU; the two pytest processes overlap)"
  printf '%6s %6s  %s\n' wall cpu phase
  printf '%s\n' "${timings[@]}"
  local busy idle
  read -r busy idle < <(cpu_jiffies)
  printf '%6d %6s  total\n' "$(($(date +%s) - run_start))" ""
  echo "The machine's $(nproc) cores were busy $((100 * (busy - busy0) / (busy - busy0 + idle - idle0 + 1)))% of the" \
    "time (QEMU's VMs included; the cpu column counts each phase's own processes, not the VMs)."
  rm -rf "$work"
}
trap print_timings EXIT

phase "setup (Debian packages, venv, testbed images, package repository)" \
  bash scripts/setup.sh --test

echo "== ruff check"
phase "ruff check" .venv/bin/ruff check --no-cache .
echo "== ruff format --check"
phase "ruff format --check" .venv/bin/ruff format --no-cache --check .
echo "== ansible-lint (production profile) on the rackform.gpu collection"
# The collection as rackform runs it, put together from roles/, validators/ and collection/
# (build/ansible_collections/rackform/gpu): from its root, so ansible-lint lints it as a
# collection (galaxy.yml, meta/, roles, playbooks, modules). The paths it prints are the same
# under roles/ at the top level.
collection=$(.venv/bin/python -c 'from rackform.paths import collection; print(collection())')
lint() {
  (cd "$collection" &&
    PATH="$OLDPWD/.venv/bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$(dirname "$(dirname "$(dirname "$collection")")")" \
      "$OLDPWD/.venv/bin/ansible-lint" --profile production --offline)
}
if [ $# -gt 0 ]; then
  phase "ansible-lint" lint
  echo "== pytest $*"
  phase "pytest $*" .venv/bin/python -m pytest --durations=15 "$@"
  exit
fi
# The whole suite: ansible-lint (half a minute of one core) runs beside the e2e, which starts at
# once, rather than before it; its report and exit status come with the rest's at the end.
echo "(in the background beside the e2e; its report is shown at the end)"
(
  rc=0
  timed lint lint >"$work/lint.log" 2>&1 || rc=$?
  echo "$rc" >"$work/lint.rc"
) &
lint_pid=$!
# Beside the e2e (its VMs are the critical path), everything but tests/e2e at a lower priority,
# into a log shown after the e2e's report; its wall and CPU time go into the table at the end.
# Lower in two ways: nice 10, and a session of its own whose autogroup is niced too. Where the
# kernel groups the scheduler's work by session (autogroup, Linux's default on desktops and these
# machines), a process's nice counts only inside its session, and each VM's QEMU (a daemon, in a
# session of its own) would get as much CPU as the whole rest of the suite: measured, the e2e's
# two VMs and a third VM started at nice 10 got half a core each.
pytest=(.venv/bin/python -m pytest -p no:cacheprovider --durations=15)
echo "== pytest (two at once): tests/e2e here, the rest into $work/rest.log (shown after)"
(
  rc=0
  timed rest setsid --wait sh -c \
    'echo $$ >"$1"; echo 10 >/proc/self/autogroup 2>/dev/null; shift; exec nice -n 10 "$@"' \
    rest "$work/rest.sid" "${pytest[@]}" tests --ignore=tests/e2e >"$work/rest.log" 2>&1 || rc=$?
  echo "$rc" >"$work/rest.rc"
) &
# A session of its own gets no Ctrl-C from the terminal: it is stopped with the run, however the
# run ends (a signal too: the EXIT trap runs on a normal exit only).
stop_rest() {
  { [[ -s $work/rest.sid ]] && pkill -TERM -s "$(cat "$work/rest.sid")"; } 2>/dev/null || true
  kill "$lint_pid" 2>/dev/null || true
}
trap 'stop_rest; print_timings' EXIT
trap 'exit 130' INT TERM
e2e_rc=0
phase "pytest tests/e2e (VMs under emulation; its phases are in its own table above)" \
  "${pytest[@]}" tests/e2e || e2e_rc=$?
wait
timings+=("$(cat "$work/lint.time")  ansible-lint (beside the e2e)")
timings+=("$(cat "$work/rest.time")  pytest: everything but tests/e2e (beside the e2e)")
echo "== ansible-lint (production profile) on the rackform.gpu collection, beside the e2e"
cat "$work/lint.log"
lint_rc=$(cat "$work/lint.rc")
echo "== pytest: everything but tests/e2e"
cat "$work/rest.log"
rest_rc=$(cat "$work/rest.rc")
echo "== ansible-lint exit $lint_rc; pytest: tests/e2e exit $e2e_rc, the rest exit $rest_rc"
[ "$lint_rc" -eq 0 ] && [ "$e2e_rc" -eq 0 ] && [ "$rest_rc" -eq 0 ]
