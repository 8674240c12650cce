#!/usr/bin/env bash
# Build Kubeflow's training-operator (github.com/kubeflow/training-operator@$TRAINING_OPERATOR_VERSION,
# cmd/training-operator.v1) from the Go module proxy, once per pin, into
# $TORCHRUN_CACHE_DIR/bin/training-operator-<version>/: the binary `training-operator` and its
# CRDs from the module's own manifests (crds/, manifests/base/crds). For hack/bench/bench_peers.py
# only: a benchmark peer, never built by hack/test.sh.
#   hack/testbed/build-training-operator.sh    build if needed; prints the directory
set -euo pipefail
source "$(dirname "$0")/lib.sh"
command -v go >/dev/null || { echo "go is required" >&2; exit 1; }

MODULE=github.com/kubeflow/training-operator
OUT="$BIN_DIR/training-operator-$TRAINING_OPERATOR_VERSION"
if [ ! -f "$OUT/.done" ]; then
  log "building training-operator $TRAINING_OPERATOR_VERSION (about a minute on 2 cores)"
  start=$(date +%s)
  # upstream has no replace directives: the wrapper module only pins it (no version list asked)
  LDFLAGS="" wrapper_build training-operator "$MODULE" "$TRAINING_OPERATOR_VERSION" \
    "$TRAINING_OPERATOR_VERSION" "$OUT" "$MODULE/cmd/training-operator.v1"
  mv "$OUT/training-operator.v1" "$OUT/training-operator"
  src=$(go mod download -json "$MODULE@$TRAINING_OPERATOR_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$OUT/crds"
  install -m 0644 "$src"/manifests/base/crds/kubeflow.org_*.yaml "$OUT/crds/"
  touch "$OUT/.done"
  log "training-operator built in $(( $(date +%s) - start ))s"
fi
echo "$OUT"
