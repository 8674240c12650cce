#!/usr/bin/env bash
# Build the real Kueue controller manager from the Go module proxy (sigs.k8s.io/kueue@$KUEUE_VERSION),
# once per pin, into $TORCHRUN_CACHE_DIR/bin/kueue-<version>/kueue. Optional: only the test that
# runs the real Kueue needs it, and it skips (saying so) when the binary is not there.
#   hack/testbed/build-kueue.sh        build if needed; prints the binary's path
set -euo pipefail
source "$(dirname "$0")/lib.sh"
command -v go >/dev/null || { echo "go is required" >&2; exit 1; }

KUEUE_BIN="$BIN_DIR/kueue-$KUEUE_VERSION"
if [ ! -f "$KUEUE_BIN/.done" ]; then
  log "building Kueue $KUEUE_VERSION (a few minutes on 2 cores)"
  mkdir -p "$KUEUE_BIN"
  start=$(date +%s)
  # a wrapper module, not `go install pkg@version`: that asks the proxy for the module's version
  # list (to report deprecation), which the proxy here refuses; a pinned require needs no list
  work="$CACHE_DIR/src/kueue-$KUEUE_VERSION"
  mkdir -p "$work"
  printf 'module torchrun.local/kueuebuild\n\ngo 1.25.0\n\nrequire sigs.k8s.io/kueue %s\n' "$KUEUE_VERSION" > "$work/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/kueue/cmd/kueue"\n' > "$work/tools.go"
  (cd "$work" && go mod tidy && go build -trimpath -ldflags "-s -w" -o "$KUEUE_BIN/kueue" sigs.k8s.io/kueue/cmd/kueue)
  touch "$KUEUE_BIN/.done"
  log "Kueue built in $(( $(date +%s) - start ))s"
fi
echo "$KUEUE_BIN/kueue"
