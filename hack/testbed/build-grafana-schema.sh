#!/usr/bin/env bash
# Grafana's published dashboard schema, @grafana/schema@$GRAFANA_SCHEMA_VERSION from npm (the
# TypeScript declarations Grafana generates from its CUE kinds: no JSON Schema is published), and
# TypeScript's compiler @$TYPESCRIPT_VERSION to check the dashboard against it
# (test/unit/test_dashboard_schema.py), once per pin, into
# $TORCHRUN_CACHE_DIR/grafana-schema-<version>/node_modules. Needs node and npm (Debian's nodejs
# and npm are installed when missing, as root).
#   hack/testbed/build-grafana-schema.sh   fetch if needed; prints nothing on stdout
set -euo pipefail
source "$(dirname "$0")/lib.sh"

SCHEMA_DIR="$CACHE_DIR/grafana-schema-$GRAFANA_SCHEMA_VERSION"
[ -f "$SCHEMA_DIR/.done-$TYPESCRIPT_VERSION" ] && exit 0
need_debian node:nodejs npm:npm || exit 1
mkdir -p "$SCHEMA_DIR"
exec 9>"$SCHEMA_DIR.lock"
flock 9
[ -f "$SCHEMA_DIR/.done-$TYPESCRIPT_VERSION" ] && exit 0
start=$(date +%s)
log "fetching @grafana/schema $GRAFANA_SCHEMA_VERSION and typescript $TYPESCRIPT_VERSION from npm"
(cd "$SCHEMA_DIR" && npm install --silent --no-audit --no-fund --no-save \
  "@grafana/schema@$GRAFANA_SCHEMA_VERSION" "typescript@$TYPESCRIPT_VERSION" >&2) \
  || { log "npm could not install @grafana/schema@$GRAFANA_SCHEMA_VERSION typescript@$TYPESCRIPT_VERSION"; exit 1; }
touch "$SCHEMA_DIR/.done-$TYPESCRIPT_VERSION"
log "Grafana's schema ready in $(( $(date +%s) - start ))s"
