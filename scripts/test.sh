#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh machine (scripts/setup.sh --test), then
# runs the linters and the whole suite, end-to-end tests included. Extra arguments go to one
# pytest run over them. Without any, the suite runs as two pytest processes at once: the
# end-to-end files (tests/e2e: VMs under emulation, in order, on the session's testbed) and the
# rest, whose report follows the e2e's; the run fails if either does. The e2e leaves a core idle
# for long stretches (one VM booting or bootstrapping, SSH round trips), which the rest uses.
#
# At the end it prints where the time went: wall seconds per phase (setup, each linter, the e2e
# and the rest, which overlap), after the e2e's own table of its phases and pytest's slowest
# tests, so every CI log shows it and a regression is visible in the next one.
set -euo pipefail
cd "$(dirname "$0")/.."

run_start=$(date +%s)
timings=()
# phase NAME COMMAND...: run it, and record its wall seconds under NAME (also when it fails).
phase() {
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s)
  "$@" || rc=$?
  timings+=("$(printf '%6d  %s' "$(($(date +%s) - t0))" "$name")")
  return "$rc"
}
print_timings() {
  echo "== where the time went (wall seconds; the e2e and the rest overlap)"
  printf '%s\n' "${timings[@]}"
  printf '%6d  %s\n' "$(($(date +%s) - run_start))" "total"
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
phase "ansible-lint" lint
if [ $# -gt 0 ]; then
  echo "== pytest $*"
  phase "pytest $*" .venv/bin/python -m pytest --durations=15 "$@"
  exit
fi
rest_log=$(mktemp -t rackform-pytest-rest.XXXXXX)
rest_time=$(mktemp -t rackform-pytest-rest-time.XXXXXX)
trap 'rm -f "$rest_log" "$rest_time"; print_timings' EXIT
echo "== pytest (two at once): tests/e2e here, the rest into $rest_log (shown after)"
(
  t0=$(date +%s)
  rc=0
  nice -n 10 .venv/bin/python -m pytest tests --ignore=tests/e2e -p no:cacheprovider --durations=15 \
    >"$rest_log" 2>&1 || rc=$?
  echo "$(($(date +%s) - t0))" >"$rest_time"
  exit "$rc"
) &
rest=$!
e2e_rc=0
phase "pytest tests/e2e (VMs under emulation; its phases are in its own table above)" \
  .venv/bin/python -m pytest tests/e2e -p no:cacheprovider --durations=15 || e2e_rc=$?
rest_rc=0
wait "$rest" || rest_rc=$?
timings+=("$(printf '%6d  %s' "$(cat "$rest_time" 2>/dev/null || echo 0)" "pytest: everything but tests/e2e (beside the e2e)")")
echo "== pytest: everything but tests/e2e"
cat "$rest_log"
echo "== pytest: tests/e2e exit $e2e_rc, the rest exit $rest_rc"
[ "$e2e_rc" -eq 0 ] && [ "$rest_rc" -eq 0 ]
