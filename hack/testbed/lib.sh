# Shared settings of the local control plane scripts. Source it; it defines no side effects.
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
