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
# From the collection's root, so ansible-lint lints it as a collection (galaxy.yml, meta/,
# roles, playbooks, modules); the collection is found where the package keeps it.
(cd rackform/ansible_collections/rackform/gpu &&
  PATH="$OLDPWD/.venv/bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$OLDPWD/rackform" \
    "$OLDPWD/.venv/bin/ansible-lint" --profile production --offline)
echo "== pytest"
.venv/bin/python -m pytest "$@"
