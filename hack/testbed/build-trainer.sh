#!/usr/bin/env bash
# Build Kubeflow Trainer v2 (github.com/kubeflow/trainer/v2@$TRAINER_VERSION) and the JobSet
# controller it drives (sigs.k8s.io/jobset@$JOBSET_VERSION) from the Go module proxy, once per
# pin pair, into $TORCHRUN_CACHE_DIR/bin/trainer-<version>-jobset-<version>/:
#   trainer-controller-manager  <- cmd/trainer-controller-manager
#   jobset                      <- the JobSet module's main package (its controller manager)
#   crds/                       <- Trainer's manifests/base/crds, JobSet's config/components/crd/bases
#   runtimes/                   <- Trainer's ClusterTrainingRuntime for torch (torch_distributed.yaml)
#   webhooks/{trainer,jobset}/  <- each one's webhook kustomization (configurations and patches),
#                                  which hack/bench/trainer.py points at 127.0.0.1
# For hack/bench/bench_peers.py only: a benchmark peer, never built by hack/test.sh.
#   hack/testbed/build-trainer.sh    build if needed; prints the directory
set -euo pipefail
source "$(dirname "$0")/lib.sh"
command -v go >/dev/null || { echo "go is required" >&2; exit 1; }

TRAINER=github.com/kubeflow/trainer/v2
JOBSET=sigs.k8s.io/jobset
OUT="$BIN_DIR/trainer-$TRAINER_VERSION-jobset-$JOBSET_VERSION"
module_dir() { go mod download -json "$1@$2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'; }
if [ ! -f "$OUT/.done" ]; then
  log "building Trainer $TRAINER_VERSION and JobSet $JOBSET_VERSION (several minutes on 2 cores)"
  start=$(date +%s)
  renice -n 19 $$ >/dev/null  # the builds leave the cores to whatever else runs
  # neither upstream has replace directives: each wrapper module only pins it (no version list
  # asked, which the proxy refuses)
  LDFLAGS="" wrapper_build trainer "$TRAINER" "$TRAINER_VERSION" "$TRAINER_VERSION" "$OUT" \
    "$TRAINER/cmd/trainer-controller-manager"
  # JobSet's user agent (jobset/<version>) carries this stamp
  LDFLAGS="-X $JOBSET/pkg/version.GitVersion=$JOBSET_VERSION" \
    wrapper_build jobset "$JOBSET" "$JOBSET_VERSION" "$JOBSET_VERSION" "$OUT" "$JOBSET"
  trainer_src=$(module_dir "$TRAINER" "$TRAINER_VERSION")
  jobset_src=$(module_dir "$JOBSET" "$JOBSET_VERSION")
  mkdir -p "$OUT/crds" "$OUT/runtimes" "$OUT/webhooks/trainer" "$OUT/webhooks/jobset"
  install -m 0644 "$trainer_src"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$OUT/crds/"
  install -m 0644 "$jobset_src"/config/components/crd/bases/jobset.x-k8s.io_*.yaml "$OUT/crds/"
  install -m 0644 "$trainer_src/manifests/base/runtimes/torch_distributed.yaml" "$OUT/runtimes/"
  install -m 0644 "$trainer_src"/manifests/base/webhook/*.yaml "$OUT/webhooks/trainer/"
  cp -r "$jobset_src"/config/components/webhook/. "$OUT/webhooks/jobset/"
  chmod -R u+w "$OUT/webhooks"
  touch "$OUT/.done"
  log "Trainer and JobSet built in $(( $(date +%s) - start ))s"
fi
echo "$OUT"
