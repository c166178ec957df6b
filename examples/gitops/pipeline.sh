#!/usr/bin/env bash
# A GitOps pipeline for rackform blueprints, as plain shell: the same steps the GitHub Actions
# workflow beside it (rackform.yml) runs. Copy both into the repository that holds your
# blueprints/ and run from its top.
#
#   pipeline.sh pr BASE_BRANCH             validate every blueprint; diff against the base
#                                          (diff.md: the PR comment; exit 1 on a new error)
#   pipeline.sh staging BLUEPRINT          up staging (provision, configure, validate), then
#                                          write the sealed validation report to $EVIDENCE
#   pipeline.sh promote BLUEPRINT          promote staging -> prod on $EVIDENCE, commit and
#                                          push the record, then up prod
#   pipeline.sh drift BLUEPRINT ENV        nightly: exit 3 when the live cluster drifted
#
# Settings (environment): RACKFORM (the command, default `rackform`), EVIDENCE (default
# evidence.json), MAX_AGE (default 24h), SMOKE_ARGS (extra `rackform smoke` arguments, e.g.
# --checkpoint-dir), DRIFT_ARGS (extra `rackform drift` arguments), REMOTE (default origin),
# RACKFORM_EVIDENCE_KEY (set it to sign reports and accept only signed ones).
set -euo pipefail

RACKFORM=${RACKFORM:-rackform}
EVIDENCE=${EVIDENCE:-evidence.json}
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
    step "up staging"
    $RACKFORM up "$bp" --env staging
    step "validate staging: the smoke job and host checks, report sealed into $EVIDENCE"
    # shellcheck disable=SC2086  # SMOKE_ARGS is a list of arguments
    $RACKFORM smoke --blueprint "$bp" --env staging --json "$EVIDENCE" ${SMOKE_ARGS:-}
    ;;
  promote)
    bp=${2:?usage: pipeline.sh promote BLUEPRINT}
    step "promote staging -> prod on $EVIDENCE"
    $RACKFORM promote "$bp" --from staging --to prod --evidence "$EVIDENCE" \
      --max-age "$MAX_AGE" --commit
    git push -q "$REMOTE" HEAD
    step "up prod (refused without the promotion record)"
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
    sed -n '2,20p' "$0" >&2
    exit 2
    ;;
esac
