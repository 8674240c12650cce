#!/usr/bin/env bash
# The CRDs of the schedulers of SPEC §5, for tests on the local control plane: taken from each
# scheduler's own published Go module through the Go module proxy (pins in hack/versions.env),
# copied into the cache outside the repository, never committed. Once per pin; a warm run is free.
#
#   kueue         sigs.k8s.io/kueue                   config/components/crd/bases/*.yaml
#   coscheduling  sigs.k8s.io/scheduler-plugins       config/crd/bases/scheduling.x-k8s.io_{podgroups,elasticquotas}.yaml
#                 (its PodGroup controller also watches ElasticQuotas, and exits without their CRD)
#   volcano       volcano.sh/apis                     scheduling/v1beta1 and nodeinfo/v1alpha1 types ->
#                 controller-gen, with the options of Volcano's own `make manifests` (volcano.sh/volcano
#                 at the APIs' version, which holds the generated YAML, is not served by the proxy; its
#                 types module is); Volcano's scheduler waits forever on its Numatopology cache
#                 without nodeinfo's CRD
#   kai           github.com/NVIDIA/KAI-scheduler     scheduling.run.ai_{queues,podgroups}.yaml; when the
#                 proxy does not serve that module, hack/testbed/kai-crds-standin.yaml instead
#
# Prints one line per scheduler, NAME=DIR; each DIR holds the CRD files and a SOURCE file that
# says where they came from ("module <path>@<version>" or "stand-in ...").
#   hack/testbed/scheduler-crds.sh            all of them
#   hack/testbed/scheduler-crds.sh kai kueue  just these
set -euo pipefail
source "$(dirname "$0")/lib.sh"
command -v go >/dev/null || { echo "go is required (CRDs come from the Go module proxy)" >&2; exit 1; }

OUT_ROOT="$CACHE_DIR/scheduler-crds"
TOOLS_BIN="$BIN_DIR/controller-gen-$CONTROLLER_TOOLS_VERSION"

module_dir() {  # module_dir MODULE VERSION: the module's source directory, or fail
  go mod download -json "$1@$2" | python3 -c '
import json, sys
info = json.load(sys.stdin)
if info.get("Error") or not info.get("Dir"):
    sys.exit(info.get("Error") or "no Dir")
print(info["Dir"])'
}

copy_crds() {  # copy_crds OUT SOURCE FILE...
  local out=$1 source=$2; shift 2
  local tmp="$out.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  cp "$@" "$tmp/"
  chmod u+w "$tmp"/*  # the module cache is read-only
  echo "$source" > "$tmp/SOURCE"
  rm -rf "$out" && mv "$tmp" "$out"
}

crds_kueue() {
  local dir; dir=$(module_dir sigs.k8s.io/kueue "$KUEUE_VERSION")
  copy_crds "$1" "module sigs.k8s.io/kueue@$KUEUE_VERSION" "$dir"/config/components/crd/bases/*.yaml
}

crds_coscheduling() {
  local dir; dir=$(module_dir sigs.k8s.io/scheduler-plugins "$SCHEDULER_PLUGINS_VERSION")
  copy_crds "$1" "module sigs.k8s.io/scheduler-plugins@$SCHEDULER_PLUGINS_VERSION" \
    "$dir/config/crd/bases/scheduling.x-k8s.io_podgroups.yaml" \
    "$dir/config/crd/bases/scheduling.x-k8s.io_elasticquotas.yaml"
}

controller_gen() {
  if [ ! -x "$TOOLS_BIN/controller-gen" ]; then
    log "building controller-gen $CONTROLLER_TOOLS_VERSION"
    mkdir -p "$TOOLS_BIN"
    GOBIN="$TOOLS_BIN" go install -trimpath -ldflags "-s -w" \
      "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_TOOLS_VERSION"
  fi
  echo "$TOOLS_BIN/controller-gen"
}

crds_volcano() {
  local gen work="$CACHE_DIR/src/volcano-crds-$VOLCANO_APIS_VERSION"
  gen=$(controller_gen)
  mkdir -p "$work"
  # a module of our own that depends on the API module, so controller-gen can load its packages
  printf 'module torchrun.local/volcanocrds\n\ngo 1.25\n\nrequire volcano.sh/apis %s\n' \
    "$VOLCANO_APIS_VERSION" > "$work/go.mod"
  printf 'package volcanocrds\n\nimport (\n\t_ "volcano.sh/apis/pkg/apis/nodeinfo/v1alpha1"\n\t_ "volcano.sh/apis/pkg/apis/scheduling/v1beta1"\n)\n' \
    > "$work/doc.go"
  (cd "$work" && go mod tidy >/dev/null 2>&1 &&
    "$gen" "crd:crdVersions=v1,generateEmbeddedObjectMeta=true" \
      paths=volcano.sh/apis/pkg/apis/scheduling/v1beta1 paths=volcano.sh/apis/pkg/apis/nodeinfo/v1alpha1 \
      output:crd:dir="$work/out")
  copy_crds "$1" "module volcano.sh/apis@$VOLCANO_APIS_VERSION (controller-gen $CONTROLLER_TOOLS_VERSION)" \
    "$work/out/scheduling.volcano.sh_podgroups.yaml" "$work/out/scheduling.volcano.sh_queues.yaml" \
    "$work/out/nodeinfo.volcano.sh_numatopologies.yaml"
}

crds_kai() {
  local dir queues podgroups
  if dir=$(module_dir github.com/NVIDIA/KAI-scheduler "$KAI_SCHEDULER_VERSION" 2>/dev/null); then
    queues=$(find "$dir" -name scheduling.run.ai_queues.yaml -path '*crds*' | head -n 1)
    podgroups=$(find "$dir" -name scheduling.run.ai_podgroups.yaml -path '*crds*' | head -n 1)
    copy_crds "$1" "module github.com/NVIDIA/KAI-scheduler@$KAI_SCHEDULER_VERSION" "$queues" "$podgroups"
  else
    log "the module proxy does not serve github.com/NVIDIA/KAI-scheduler@$KAI_SCHEDULER_VERSION; using the stand-in CRDs"
    copy_crds "$1" "stand-in hack/testbed/kai-crds-standin.yaml (module github.com/NVIDIA/KAI-scheduler@$KAI_SCHEDULER_VERSION not served by the module proxy)" \
      "$HACK_DIR/testbed/kai-crds-standin.yaml"
  fi
}

version_of() {
  case $1 in
    kueue) echo "$KUEUE_VERSION" ;;
    coscheduling) echo "$SCHEDULER_PLUGINS_VERSION" ;;
    volcano) echo "$VOLCANO_APIS_VERSION" ;;
    kai) echo "$KAI_SCHEDULER_VERSION" ;;
    *) echo "unknown scheduler: $1 (kueue, coscheduling, volcano, kai)" >&2; return 2 ;;
  esac
}

main() {
  local name out names=("$@")
  [ ${#names[@]} -gt 0 ] || names=(kueue coscheduling volcano kai)
  for name in "${names[@]}"; do
    out="$OUT_ROOT/$name-$(version_of "$name")"
    # a stand-in is re-tried on every run, in case the proxy serves the module by now
    # (and a copy from before it held the ElasticQuota or Numatopology CRD is made again)
    if [ ! -f "$out/SOURCE" ] || grep -q '^stand-in' "$out/SOURCE" \
      || { [ "$name" = coscheduling ] && [ ! -f "$out/scheduling.x-k8s.io_elasticquotas.yaml" ]; } \
      || { [ "$name" = volcano ] && [ ! -f "$out/nodeinfo.volcano.sh_numatopologies.yaml" ]; }; then
      "crds_$name" "$out"
    fi
    echo "$name=$out"
  done
}

main "$@"
