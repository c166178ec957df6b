#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh machine (scripts/setup.sh --test), then
# runs the linters and the whole suite, end-to-end tests included. Extra arguments go to pytest.
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
echo "== pytest"
.venv/bin/python -m pytest "$@"
