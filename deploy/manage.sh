#!/usr/bin/env bash
# Run a manage.py command as the agentops user with the production settings (the same
# file the systemd units read), e.g.
#   sudo /srv/agentops/deploy/manage.sh migrate
#   sudo /srv/agentops/deploy/manage.sh check --deploy --fail-level WARNING
set -euo pipefail
ENV_FILE=${AGENTOPS_ENV_FILE:-/etc/agentops/agentops.env}
cd "$(dirname "$0")/.."
set -a
# shellcheck source=/dev/null
. "$ENV_FILE"
set +a
exec runuser -u agentops -- .venv/bin/python manage.py "$@"
