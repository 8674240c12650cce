#!/usr/bin/env bash
# Build Volcano's scheduler (volcano.sh/volcano@$VOLCANO_VERSION, cmd/scheduler: the gang plugin
# and the rest of its default actions) from the Go module proxy, once per pin, into
# $TORCHRUN_CACHE_DIR/bin/volcano-<version>/, with the module's own scheduler configuration
# (installer/helm/chart/volcano/config/volcano-scheduler.conf) beside it. Only the scheduler: it
# keeps the PodGroups' status itself; the controller-manager's parts (Volcano Jobs, PodGroups for
# bare pods, queue states) have nothing to do for a TorchrunJob, which makes its own PodGroup.
# Optional: only test/integration/test_gang.py runs it, and skips, saying so, when it is not built.
#   hack/testbed/build-volcano.sh    build if needed; prints the binaries' directory
set -euo pipefail
source "$(dirname "$0")/lib.sh"
command -v go >/dev/null || { echo "go is required" >&2; exit 1; }

MODULE=volcano.sh/volcano
OUT="$BIN_DIR/volcano-$VOLCANO_VERSION"
if [ ! -f "$OUT/.done" ]; then
  log "building the Volcano scheduler $VOLCANO_VERSION (a few minutes on 2 cores)"
  start=$(date +%s)
  work="$CACHE_DIR/src/volcano-$VOLCANO_VERSION"
  mkdir -p "$work" "$OUT"
  # a wrapper module (no version lists from the proxy); upstream pins its Kubernetes modules
  # (v1.30) by replace, which Go ignores in a dependency, so the wrapper carries upstream's
  # requires (wrapper_gomod.py) and its replace directives as they are
  read -r gomod src < <(go mod download -json "$MODULE@$VOLCANO_VERSION" \
    | python3 -c 'import json,sys; m = json.load(sys.stdin); print(m["GoMod"], m["Dir"])')
  {
    python3 "$HACK_DIR/testbed/wrapper_gomod.py" "$gomod" "$MODULE" "$VOLCANO_VERSION" "$VOLCANO_VERSION" volcano
    awk '/^replace \($/ {inside=1; print; next} inside {print; if ($0 == ")") inside=0; next}
         /^replace / {print}' "$gomod"
  } > "$work/go.mod"
  printf 'package main\n' > "$work/doc.go"  # a module needs one package of its own
  (cd "$work" && nice -n 19 go build -trimpath -ldflags "-s -w" -o "$OUT/" "$MODULE/cmd/scheduler")
  install -m 0644 "$src/installer/helm/chart/volcano/config/volcano-scheduler.conf" "$OUT/volcano-scheduler.conf"
  touch "$OUT/.done"
  log "Volcano scheduler built in $(( $(date +%s) - start ))s"
fi
echo "$OUT"
