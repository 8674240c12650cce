#!/usr/bin/env bash
# Build etcd $ETCD_V2_VERSION (3.5: the last etcd serving the v2 API that torchrun's etcd-v2
# rendezvous speaks) from the Go module proxy, like hack/build-controlplane.sh builds etcd 3.6,
# once per pin, into $TORCHRUN_CACHE_DIR/bin/etcd-<version>/etcd. Debian's etcd-server is no
# fallback here: bookworm ships 3.4. Only the managed-etcd test needs it.
#   hack/testbed/build-etcd-v2.sh        build if needed; prints the binary's path
set -euo pipefail
source "$(dirname "$0")/lib.sh"
command -v go >/dev/null || { echo "go is required (etcd $ETCD_V2_VERSION is built from the Go module proxy)" >&2; exit 1; }

ETCD_V2_BIN="$BIN_DIR/etcd-$ETCD_V2_VERSION"
if [ ! -f "$ETCD_V2_BIN/.done" ]; then
  log "building etcd $ETCD_V2_VERSION (v2 API, for etcd-v2 rendezvous)"
  start=$(date +%s)
  LDFLAGS="" wrapper_build etcd "go.etcd.io/etcd/server/v3" "$ETCD_V2_VERSION" "$ETCD_V2_VERSION" \
    "$ETCD_V2_BIN" go.etcd.io/etcd/server/v3 >&2
  # go names the binary after the package directory (server/)
  mv "$ETCD_V2_BIN/server" "$ETCD_V2_BIN/etcd"
  touch "$ETCD_V2_BIN/.done"
  log "etcd $ETCD_V2_VERSION built in $(( $(date +%s) - start ))s"
fi
echo "$ETCD_V2_BIN/etcd"
