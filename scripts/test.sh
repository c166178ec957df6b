#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh machine (scripts/setup.sh --test), then
# runs the linters and the whole suite, end-to-end tests included. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh --test

echo "== ruff check"
.venv/bin/ruff check .
echo "== ruff format --check"
.venv/bin/ruff format --check .
if compgen -G "roles/*/tasks/main.yml" >/dev/null; then
  echo "== ansible-lint (production profile)"
  PATH="$PWD/.venv/bin:$PATH" .venv/bin/ansible-lint --profile production --offline roles/
fi
echo "== pytest"
.venv/bin/python -m pytest "$@"
