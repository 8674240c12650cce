#!/usr/bin/env bash
# Build Helm (helm.sh/helm/v4@$HELM_VERSION, cmd/helm) from the Go module proxy, once per pin, into
# $TORCHRUN_CACHE_DIR/bin/helm-<version>/helm, stamped with its version (`helm version`). The chart
# tests (test/integration/test_helm_chart.py) lint, render and install charts/torchrun-controller
# with it; they fail, saying so, when it is not there.
#   hack/testbed/build-helm.sh    build if needed; prints the binary's path
set -euo pipefail
source "$(dirname "$0")/lib.sh"
command -v go >/dev/null || { echo "go is required" >&2; exit 1; }

HELM_BIN="$BIN_DIR/helm-$HELM_VERSION"
if [ ! -f "$HELM_BIN/.done" ]; then
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/build-helm.lock"
  flock 9
fi
if [ ! -f "$HELM_BIN/.done" ]; then
  log "building Helm $HELM_VERSION (a few minutes on 2 cores)"
  start=$(date +%s)
  # a wrapper module with the upstream's requires (no `go install pkg@version`: the proxy here
  # refuses the version list it asks for); Helm replaces nothing, so LOCAL_VERSION is unused
  LDFLAGS="-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
    wrapper_build helm helm.sh/helm/v4 "$HELM_VERSION" "$HELM_VERSION" "$HELM_BIN" helm.sh/helm/v4/cmd/helm
  "$HELM_BIN/helm" version >&2
  touch "$HELM_BIN/.done"
  log "Helm built in $(( $(date +%s) - start ))s"
fi
echo "$HELM_BIN/helm"
