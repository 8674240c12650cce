#!/usr/bin/env bash
# Build the real node's binaries from the Go module proxy (SPEC §10), once per pin, cached beside
# the control plane's:
#   kubelet  <- k8s.io/kubernetes/cmd/kubelet, through the same wrapper module as kube-apiserver
#   coredns  <- github.com/coredns/coredns, a main of our own with just the plugins the test bed
#               uses (bind, ready, errors, log, kubernetes): none of upstream's cloud SDKs
#   pause    <- hack/testbed/pause.c (the pods' sandbox process), a static binary in an image
#               archive that containerd imports (no registry serves registry.k8s.io/pause here)
# Installs containerd, runc, the CNI plugins and buildah from Debian when they are missing (root).
#   hack/testbed/build-realnode.sh     build if needed; prints KUBELET=, COREDNS=, PAUSE_IMAGE=
#                                      and PAUSE_ARCHIVE= lines
set -euo pipefail
source "$(dirname "$0")/lib.sh"
command -v go >/dev/null || { echo "go is required (the Go toolchain builds the real node)" >&2; exit 1; }

COREDNS_BIN="$BIN_DIR/coredns-$COREDNS_VERSION"

build_kubelet() {
  [ -f "$KUBE_BIN/.kubelet-done" ] && return 0
  log "building kubelet $KUBE_VERSION"
  LDFLAGS="$(kube_ldflags)" wrapper_build kube k8s.io/kubernetes "$KUBE_VERSION" "v0.${KUBE_VERSION#v1.}" "$KUBE_BIN" \
    k8s.io/kubernetes/cmd/kubelet
  touch "$KUBE_BIN/.kubelet-done"
}

build_coredns() {
  [ -f "$COREDNS_BIN/.done" ] && return 0
  log "building CoreDNS $COREDNS_VERSION (bind, ready, errors, log and kubernetes plugins)"
  local work="$CACHE_DIR/src/coredns-$COREDNS_VERSION"
  mkdir -p "$work" "$COREDNS_BIN"
  printf 'module torchrun.local/corednsbuild\n\ngo 1.24.0\n\nrequire github.com/coredns/coredns %s\n' \
    "$COREDNS_VERSION" > "$work/go.mod"
  # CoreDNS's own main imports every plugin (zplugin.go); this one imports the few we use and sets
  # the order they run in (upstream's plugin.cfg order, filtered)
  cat > "$work/main.go" <<'GO'
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "errors", "log", "kubernetes"}
}

func main() { coremain.Run() }
GO
  (cd "$work" && go mod tidy && go build -trimpath -ldflags "-s -w" -o "$COREDNS_BIN/coredns" .)
  touch "$COREDNS_BIN/.done"
}

PAUSE_DIR="$CACHE_DIR/pause"
IMAGE_STORAGE=(--storage-driver vfs --root "$CACHE_DIR/image/storage" --runroot "$CACHE_DIR/image/run")

build_pause() {  # a static pause binary in a one-file image archive, keyed by its source
  local key; key=$(cat "$HACK_DIR/testbed/pause.c" "$0" | sha256sum | cut -c1-12)
  PAUSE_IMAGE="localhost/torchrun-pause:$key"
  PAUSE_ARCHIVE="$PAUSE_DIR/pause-$key.tar"
  [ -f "$PAUSE_ARCHIVE" ] && return 0
  log "building the pause image $PAUSE_IMAGE"
  mkdir -p "$PAUSE_DIR"
  gcc -static -Os -o "$PAUSE_DIR/pause" "$HACK_DIR/testbed/pause.c"
  local ctr
  ctr=$(buildah "${IMAGE_STORAGE[@]}" from scratch)
  buildah "${IMAGE_STORAGE[@]}" copy "$ctr" "$PAUSE_DIR/pause" /pause >/dev/null
  buildah "${IMAGE_STORAGE[@]}" config --entrypoint '["/pause"]' --user 65535:65535 "$ctr"
  buildah "${IMAGE_STORAGE[@]}" commit --quiet --rm "$ctr" "$PAUSE_IMAGE" >/dev/null
  # docker-archive keeps the full name, so `ctr images import` names it exactly PAUSE_IMAGE
  buildah "${IMAGE_STORAGE[@]}" push --quiet "$PAUSE_IMAGE" "docker-archive:$PAUSE_ARCHIVE.tmp:$PAUSE_IMAGE" >/dev/null
  buildah "${IMAGE_STORAGE[@]}" rmi "$PAUSE_IMAGE" >/dev/null 2>&1 || true
  mv "$PAUSE_ARCHIVE.tmp" "$PAUSE_ARCHIVE"
}

# the node's runtime and the tools that make its pause image, from Debian
need_debian containerd:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins \
  buildah:buildah ip:iproute2 gcc:gcc || exit 1
mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/build-realnode.lock"
flock 9
start=$(date +%s)
build_kubelet
build_coredns
build_pause
log "real node binaries ready ($(( $(date +%s) - start ))s)"
echo "KUBELET=$KUBE_BIN/kubelet"
echo "COREDNS=$COREDNS_BIN/coredns"
echo "PAUSE_IMAGE=$PAUSE_IMAGE"
echo "PAUSE_ARCHIVE=$PAUSE_ARCHIVE"
