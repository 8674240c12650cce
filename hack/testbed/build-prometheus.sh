#!/usr/bin/env bash
# Debian's Prometheus ($PROMETHEUS_DEBIAN_VERSION: `prometheus` and `promtool`) for the tests that
# run the shipped dashboard's queries and alert rules (test/unit/test_alert_rules.py,
# test/integration/test_dashboard_queries.py), once per pin, into
# $TORCHRUN_CACHE_DIR/bin/prometheus-<version>/. The package is downloaded and unpacked, not
# installed: an install starts a system Prometheus on :9090 and pulls in its web UI's dozen
# JavaScript packages, and the tests run their own on a free port. Needs apt-get (not root).
#   hack/testbed/build-prometheus.sh   fetch if needed; prints nothing on stdout
set -euo pipefail
source "$(dirname "$0")/lib.sh"

PROMETHEUS_BIN="$BIN_DIR/prometheus-$PROMETHEUS_DEBIAN_VERSION"
[ -f "$PROMETHEUS_BIN/.done" ] && exit 0
command -v apt-get >/dev/null || { log "apt-get is needed to fetch Debian's prometheus"; exit 1; }

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/build-prometheus.lock"
flock 9
[ -f "$PROMETHEUS_BIN/.done" ] && exit 0
start=$(date +%s)
log "fetching Debian's prometheus $PROMETHEUS_DEBIAN_VERSION"
work="$CACHE_DIR/src/prometheus-$PROMETHEUS_DEBIAN_VERSION"
rm -rf "$work" && mkdir -p "$work"
# a pinned version apt has not heard of yet needs fresh package lists
apt-cache show "prometheus=$PROMETHEUS_DEBIAN_VERSION" >/dev/null 2>&1 || apt-get update -qq >&2 \
  || { log "apt-get update failed"; exit 1; }
(cd "$work" && apt-get download -qq "prometheus=$PROMETHEUS_DEBIAN_VERSION" >&2) \
  || { log "apt-get could not download prometheus=$PROMETHEUS_DEBIAN_VERSION"; exit 1; }
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
mkdir -p "$PROMETHEUS_BIN"
install -m 0755 "$work/root/usr/bin/prometheus" "$work/root/usr/bin/promtool" "$PROMETHEUS_BIN/"
"$PROMETHEUS_BIN/prometheus" --version >&2
rm -rf "$work"
touch "$PROMETHEUS_BIN/.done"
log "prometheus $PROMETHEUS_DEBIAN_VERSION ready in $(( $(date +%s) - start ))s"
