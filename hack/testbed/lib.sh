# Shared settings and helpers of the local control plane scripts. Source it; it has no side effects.
HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_DIR="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=../versions.env
source "$HACK_DIR/versions.env"
# Everything built or downloaded lives outside the repository, keyed by the pins.
CACHE_DIR="${TORCHRUN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/torchrun-controller}"
BIN_DIR="$CACHE_DIR/bin"
KUBE_BIN="$BIN_DIR/kube-$KUBE_VERSION"
ETCD_BIN="$BIN_DIR/etcd-$ETCD_VERSION"
KWOK_BIN="$BIN_DIR/kwok-$KWOK_VERSION"
# Runtime state of a running control plane (certs, etcd data, logs, kubeconfig).
RUN_DIR="${TORCHRUN_RUN_DIR:-$CACHE_DIR/run}"
KUBECONFIG_PATH="$RUN_DIR/admin.kubeconfig"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# wrapper_build NAME MODULE VERSION LOCAL_VERSION OUT PKG...: build PKG... of MODULE@VERSION
# through a wrapper module (hack/testbed/wrapper_gomod.py) into OUT; $LDFLAGS are passed on.
wrapper_build() {
  local name=$1 module=$2 version=$3 local_version=$4 out=$5; shift 5
  local work="$CACHE_DIR/src/$name-$version"
  mkdir -p "$work" "$out"
  local gomod
  gomod=$(go mod download -json "$module@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  python3 "$HACK_DIR/testbed/wrapper_gomod.py" "$gomod" "$module" "$version" "$local_version" "$name" > "$work/go.mod"
  printf 'package main\n' > "$work/doc.go"  # a module needs one package of its own
  (cd "$work" && go build -trimpath -ldflags "${LDFLAGS:-} -s -w" -o "$out/" "$@")
}
