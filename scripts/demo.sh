#!/usr/bin/env bash
# The main job on a fresh machine: set up, validate every example blueprint in every
# environment, then compile the AWS training cluster's dev environment into build/.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
rf=.venv/bin/rackform

echo "== rackform validate blueprints/*.yaml"
$rf validate blueprints/*.yaml
echo "== rackform compile blueprints/aws-training.yaml --env dev -o build/llm-train-a-dev"
$rf compile blueprints/aws-training.yaml --env dev -o build/llm-train-a-dev
