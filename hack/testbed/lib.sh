# Shared settings and helpers of the local control plane scripts. Source it; it has no side effects.
HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_DIR="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=../versions.env
source "$HACK_DIR/versions.env"
# the Kueue compatibility bench (hack/bench/kueue_compat.py) runs the Kueue tests on an older Kueue
KUEUE_VERSION="${TORCHRUN_KUEUE_VERSION:-$KUEUE_VERSION}"
# Everything built or downloaded lives outside the repository, keyed by the pins.
CACHE_DIR="${TORCHRUN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/torchrun-controller}"
BIN_DIR="$CACHE_DIR/bin"
KUBE_BIN="$BIN_DIR/kube-$KUBE_VERSION"
ETCD_BIN="$BIN_DIR/etcd-$ETCD_VERSION"
KWOK_BIN="$BIN_DIR/kwok-$KWOK_VERSION"
# Runtime state of a running control plane (certs, etcd data, logs, kubeconfig).
RUN_DIR="${TORCHRUN_RUN_DIR:-$CACHE_DIR/run}"
KUBECONFIG_PATH="$RUN_DIR/admin.kubeconfig"
# The Services' ClusterIP range (kube-apiserver's --service-cluster-ip-range); the real node's pods
# route it to the node, where kube-proxy's rules are
SERVICE_CIDR=10.96.0.0/16
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# need_debian COMMAND:PACKAGE...: install with apt (as root) each PACKAGE whose COMMAND is not on
# PATH (a COMMAND starting with / is a file that must exist); returns 1, saying why, when it cannot
need_debian() {
  local missing=() pair cmd
  for pair in "$@"; do
    cmd=${pair%%:*}
    if [[ $cmd == /* ]]; then [ -e "$cmd" ] && continue; else command -v "$cmd" >/dev/null && continue; fi
    missing+=("${pair#*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    log "Debian's ${missing[*]} needed: not root or no apt-get, so not installed"
    return 1
  fi
  log "installing ${missing[*]} from Debian"
  # shellcheck disable=SC2015  # fail when either fails
  apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2 \
    || { log "apt-get could not install ${missing[*]}"; return 1; }
}

# kube_ldflags: the -X flags that stamp KUBE_VERSION into a Kubernetes binary (`--version`, and
# the version a kubelet reports on its Node)
kube_ldflags() {
  local minor=${KUBE_VERSION#v1.} v out=""
  minor=${minor%%.*}
  for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    out+=" -X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor"
    out+=" -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$out"
}

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
