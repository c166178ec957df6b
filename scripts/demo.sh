#!/usr/bin/env bash
# The main job on a fresh machine: set up, validate every example blueprint in every
# environment, then plan the AWS training cluster's staging environment offline (every resource
# `pulumi up` would create, the preflight findings and the cost) and compile it into build/.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
rf=.venv/bin/rackform

echo "== rackform validate blueprints/*.yaml"
$rf validate blueprints/*.yaml
echo "== rackform plan blueprints/aws-training.yaml --env staging"
$rf plan blueprints/aws-training.yaml --env staging
echo "== rackform compile blueprints/aws-training.yaml --env staging -o build/llm-train-a-staging"
$rf compile blueprints/aws-training.yaml --env staging -o build/llm-train-a-staging
