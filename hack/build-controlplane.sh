#!/usr/bin/env bash
# Build the local control plane from the Go module proxy (SPEC §10), once per pin.
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl  <- k8s.io/kubernetes
#   kube-proxy (the real node's Services)                               <- k8s.io/kubernetes, same pin
#   etcd, etcdctl                                                       <- go.etcd.io/etcd
#   kwok                                                                <- sigs.k8s.io/kwok
# Binaries land in $TORCHRUN_CACHE_DIR (default ~/.cache/torchrun-controller/bin/<name>-<version>);
# a finished build is marked with a .done file, so a warm run costs nothing.
set -euo pipefail
source "$(dirname "$0")/testbed/lib.sh"
command -v go >/dev/null || { echo "go is required (the Go toolchain builds the control plane)" >&2; exit 1; }

build_kube() {
  [ -f "$KUBE_BIN/.done" ] && return 0
  log "building Kubernetes $KUBE_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl)"
  LDFLAGS="$(kube_ldflags)" wrapper_build kube k8s.io/kubernetes "$KUBE_VERSION" "v0.${KUBE_VERSION#v1.}" "$KUBE_BIN" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
  touch "$KUBE_BIN/.done"
}

# kube-proxy routes the real node's Services (hack/testbed/realnode.sh): the same wrapper module and
# pin as the control plane, marked apart so a cache built before it was added builds just this one
build_kube_proxy() {
  [ -f "$KUBE_BIN/.kube-proxy-done" ] && return 0
  log "building kube-proxy $KUBE_VERSION"
  LDFLAGS="$(kube_ldflags)" wrapper_build kube k8s.io/kubernetes "$KUBE_VERSION" "v0.${KUBE_VERSION#v1.}" "$KUBE_BIN" \
    k8s.io/kubernetes/cmd/kube-proxy
  touch "$KUBE_BIN/.kube-proxy-done"
}

build_etcd() {
  [ -f "$ETCD_BIN/.done" ] && return 0
  log "building etcd $ETCD_VERSION"
  if ! LDFLAGS="" wrapper_build etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "$ETCD_VERSION" "$ETCD_BIN" \
      go.etcd.io/etcd/server/v3; then
    log "etcd did not build from the module proxy; falling back to Debian's etcd-server"
    command -v etcd >/dev/null || { apt-get update -qq && apt-get install -y -qq etcd-server >/dev/null; }
    mkdir -p "$ETCD_BIN" && ln -sf "$(command -v etcd)" "$ETCD_BIN/etcd"
  fi
  # go names the binary after the package directory (server/)
  if [ -x "$ETCD_BIN/server" ]; then mv "$ETCD_BIN/server" "$ETCD_BIN/etcd"; fi
  touch "$ETCD_BIN/.done"
}

build_kwok() {
  [ -f "$KWOK_BIN/.done" ] && return 0
  log "building kwok $KWOK_VERSION"
  mkdir -p "$KWOK_BIN"
  GOBIN="$KWOK_BIN" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  touch "$KWOK_BIN/.done"
}

# kwok's Exec/ClusterExec/Logs/ClusterLogs CRDs, from the same module version (kustomize/crd/bases/):
# hack/controlplane.sh applies them before kwok starts with --enable-crds.
build_kwok_crds() {
  [ -f "$KWOK_BIN/crds/.done" ] && return 0
  local dir kind
  dir=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$KWOK_BIN/crds"
  for kind in execs clusterexecs logs clusterlogs; do
    cp "$dir/kustomize/crd/bases/kwok.x-k8s.io_$kind.yaml" "$KWOK_BIN/crds/"
  done
  chmod u+w "$KWOK_BIN/crds"/*.yaml  # the module cache is read-only
  touch "$KWOK_BIN/crds/.done"
}

# two runs at once (parallel sessions, one checkout or two): one builds, the others wait for it
mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/build-controlplane.lock"
flock 9

start=$(date +%s)
build_etcd
build_kwok
build_kwok_crds
build_kube
build_kube_proxy
log "control plane binaries ready in $BIN_DIR ($(( $(date +%s) - start ))s)"
