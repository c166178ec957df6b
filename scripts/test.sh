#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh machine (scripts/setup.sh --test), then
# runs the linters and the whole suite, end-to-end tests included. Extra arguments go to one
# pytest run over them. Without any, the suite runs as two pytest processes at once: the
# end-to-end files (tests/e2e: VMs under emulation, in order, on the session's testbed) and the
# rest, whose report follows the e2e's; the run fails if either does. The e2e leaves a core idle
# for long stretches (one VM booting or bootstrapping, SSH round trips), which the rest uses.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh --test

echo "== ruff check"
.venv/bin/ruff check --no-cache .
echo "== ruff format --check"
.venv/bin/ruff format --no-cache --check .
echo "== ansible-lint (production profile) on the rackform.gpu collection"
# The collection as rackform runs it, put together from roles/, validators/ and collection/
# (build/ansible_collections/rackform/gpu): from its root, so ansible-lint lints it as a
# collection (galaxy.yml, meta/, roles, playbooks, modules). The paths it prints are the same
# under roles/ at the top level.
collection=$(.venv/bin/python -c 'from rackform.paths import collection; print(collection())')
(cd "$collection" &&
  PATH="$OLDPWD/.venv/bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$(dirname "$(dirname "$(dirname "$collection")")")" \
    "$OLDPWD/.venv/bin/ansible-lint" --profile production --offline)
if [ $# -gt 0 ]; then
  echo "== pytest $*"
  exec .venv/bin/python -m pytest "$@"
fi
rest_log=$(mktemp -t rackform-pytest-rest.XXXXXX)
trap 'rm -f "$rest_log"' EXIT
echo "== pytest (two at once): tests/e2e here, the rest into $rest_log (shown after)"
.venv/bin/python -m pytest tests --ignore=tests/e2e -p no:cacheprovider >"$rest_log" 2>&1 &
rest=$!
e2e_rc=0
.venv/bin/python -m pytest tests/e2e -p no:cacheprovider || e2e_rc=$?
rest_rc=0
wait "$rest" || rest_rc=$?
echo "== pytest: everything but tests/e2e"
cat "$rest_log"
echo "== pytest: tests/e2e exit $e2e_rc, the rest exit $rest_rc"
[ "$e2e_rc" -eq 0 ] && [ "$rest_rc" -eq 0 ]
