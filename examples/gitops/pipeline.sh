#!/usr/bin/env bash
# A GitOps pipeline for rackform blueprints, as plain shell: the same steps the GitHub Actions
# workflow beside it (rackform.yml) runs. Copy both into the repository that holds your
# blueprints/ and promotion-keys.yaml, and run from its top.
#
#   pipeline.sh pr BASE_BRANCH             validate every blueprint; diff against the base
#                                          (diff.md: the PR comment; exit 1 on a new error)
#   pipeline.sh staging BLUEPRINT          up staging: provision, configure, validate on the
#                                          cluster's nodes; the Validate stage signs its report
#                                          (needs RACKFORM_EVIDENCE_SIGNING_KEY)
#   pipeline.sh promote BLUEPRINT          promote staging -> prod on staging's own signed
#                                          evidence (read from its stack), commit and push the
#                                          record, then up prod (which verifies it again)
#   pipeline.sh drift BLUEPRINT ENV        nightly: exit 3 when the live cluster drifted
#
# Settings (environment): RACKFORM (the command, default `rackform`), MAX_AGE (default 24h),
# DRIFT_ARGS (extra `rackform drift` arguments), REMOTE (default origin). Secrets, each given
# only to the step that needs it: RACKFORM_EVIDENCE_SIGNING_KEY (the staging deploy's Ed25519
# private key, a PEM file or its text) and the state backend's (PULUMI_CONFIG_PASSPHRASE).
# Nothing here runs a validation on the runner: a report made here would prove nothing about
# the cluster.
set -euo pipefail

RACKFORM=${RACKFORM:-rackform}
MAX_AGE=${MAX_AGE:-24h}
REMOTE=${REMOTE:-origin}

step() { echo "== $*" >&2; }

case "${1:-}" in
  pr)
    base=${2:?usage: pipeline.sh pr BASE_BRANCH}
    git fetch -q "$REMOTE" "$base"
    step "validate every blueprint"
    for bp in blueprints/*.yaml; do
      $RACKFORM validate "$bp"
    done
    step "diff against $REMOTE/$base"
    # Exit 1 here fails the check (a new unwaived preflight error); the comment is written
    # either way, so it can still be posted.
    $RACKFORM diff --base "$REMOTE/$base" --head HEAD --output diff.md > /dev/null
    ;;
  staging)
    bp=${2:?usage: pipeline.sh staging BLUEPRINT}
    if [ -z "${RACKFORM_EVIDENCE_SIGNING_KEY:-}" ]; then
      echo "pipeline.sh staging: RACKFORM_EVIDENCE_SIGNING_KEY is not set: staging's evidence" \
        "would be unsigned and could not be promoted" >&2
      exit 2
    fi
    step "up staging: provision, configure, validate on its nodes (the report signed)"
    $RACKFORM up "$bp" --env staging
    ;;
  promote)
    bp=${2:?usage: pipeline.sh promote BLUEPRINT}
    step "promote staging -> prod on staging's signed evidence (its stack output)"
    $RACKFORM promote "$bp" --from staging --to prod --max-age "$MAX_AGE" --commit
    git push -q "$REMOTE" HEAD
    step "up prod (verifies the record's signature and evidence itself)"
    $RACKFORM up "$bp" --env prod
    ;;
  drift)
    bp=${2:?usage: pipeline.sh drift BLUEPRINT ENV}
    env=${3:?usage: pipeline.sh drift BLUEPRINT ENV}
    step "drift of $bp ($env)"
    # shellcheck disable=SC2086
    $RACKFORM drift "$bp" --env "$env" ${DRIFT_ARGS:-}
    ;;
  *)
    sed -n '2,22p' "$0" >&2
    exit 2
    ;;
esac
