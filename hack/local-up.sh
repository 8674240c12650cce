#!/usr/bin/env bash
# Run torchrun-controller against a local control plane with fake GPU nodes.
# Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (4 fake nodes with
# 8 nvidia.com/gpu each), installs the CRDs, prints the KUBECONFIG line, then runs the controller
# in the foreground. Ctrl-C, SIGINT or SIGTERM to this script alone, or the controller ending,
# stops the controller first, then the whole control plane (exit 130, 143, or the controller's).
# TORCHRUN_REAL_NODE=1 (root) adds the real node realnode-0 (README: The real node).
# What a run leaves in the run directory never changes the next one: the real node's files go with
# the real node (hack/testbed/realnode.sh keeps them after its `down`; they are removed here).
set -euo pipefail
# bash cannot trap a signal that was ignored when it started, and a command started with `&` by a
# non-interactive shell (or by many supervisors) starts with SIGINT ignored: start again with it
# restored, so SIGINT stops everything as SIGTERM does
if [ "$(trap -p INT)" = "trap -- '' SIGINT" ] && [ -z "${TORCHRUN_LOCAL_UP_SIGINT:-}" ]; then
  TORCHRUN_LOCAL_UP_SIGINT=restored exec env --default-signal=INT "$BASH" "$0" "$@"
fi
unset TORCHRUN_LOCAL_UP_SIGINT
source "$(dirname "$0")/testbed/lib.sh"
cd "$REPO_DIR"
REAL_NODE_DIR="$RUN_DIR/realnode"

# The files a real node left in the run directory once its `down` finished (host.saved, the record
# of what `down` must restore, lives from its `up` to the end of its `down`): removed, so they
# neither configure this run's controller nor send a later `down` cleaning host-wide real node
# state (the bridge) that another run on this machine may own. A real node still up is left alone.
forget_real_node() {
  [ -d "$REAL_NODE_DIR" ] && [ ! -e "$REAL_NODE_DIR/host.saved" ] || return 0
  if findmnt -rn -o TARGET | awk -v d="$REAL_NODE_DIR/" 'index($0, d) == 1 { m = 1 } END { exit !m }'; then
    return 0  # something is still mounted there: not files alone
  fi
  rm -rf --one-file-system "$REAL_NODE_DIR"
}
forget_real_node

CONTROLLER_PID=""
stop_controller() {  # first: a controller without its API server logs `watch failed` forever
  # $!: a signal may come between starting it and recording its pid (the only background job)
  local pid=${CONTROLLER_PID:-${!:-}}
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || return 0
  # it lets the reconciles in flight finish, at most 20 s (controller/cmd/main.py SHUTDOWN_TIMEOUT)
  for _ in $(seq 1 250); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  trap - EXIT
  trap '' INT TERM  # a second Ctrl-C does not cut the cleanup short
  stop_controller
  log "stopping the control plane"
  "$HACK_DIR/controlplane.sh" down
  forget_real_node
}
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap cleanup EXIT

VENV="$("$HACK_DIR/venv.sh")"
export PATH="$VENV/bin:$PATH"

"$HACK_DIR/controlplane.sh" up
export KUBECONFIG="$KUBECONFIG_PATH"
KUBECTL="$KUBE_BIN/kubectl"
if [ -d crd ] && ls crd/*.yaml >/dev/null 2>&1; then
  "$KUBECTL" apply --server-side -f crd/ >/dev/null
  # kubectl wait fails at once on a CRD whose status has no conditions yet: try again
  for _ in 1 2 3 4 5 6 7 8 9 10 11; do
    "$KUBECTL" wait --for=condition=Established crd --all --timeout=10s >/dev/null 2>&1 && break
    sleep 1
  done
  "$KUBECTL" wait --for=condition=Established crd --all --timeout=10s >/dev/null
  log "CRDs installed"
fi

cat <<MSG

  The local control plane is up. In another terminal:

    export KUBECONFIG=$KUBECONFIG_PATH
    export PATH=$KUBE_BIN:$VENV/bin:\$PATH   # kubectl built with the control plane, kubectl-torchrun
    kubectl get nodes
    kubectl torchrun list

  Press Ctrl-C here to stop everything.

MSG

# with the real node (TORCHRUN_REAL_NODE=1), sync pods there run the controller image imported into it
# (images.env, written by this run's `up`)
SYNC_IMAGE=()
if [ "${TORCHRUN_REAL_NODE:-0}" = 1 ]; then
  SYNC_IMAGE=(--sync-image "$(sed -n 's/^CONTROLLER_IMAGE=//p' "$REAL_NODE_DIR/images.env")")
  # the progress endpoint where the real node's pods reach this host: the node's address, the .1
  # of its pod subnet (hack/testbed/realnode.sh)
  subnet=${TORCHRUN_REAL_NODE_SUBNET:-10.199.0.0/24}
  node_ip="${subnet%.*}.1"
  SYNC_IMAGE+=(--progress-bind-address "$node_ip:9443" --progress-url "https://$node_ip:9443/v1/progress")
  log "real node realnode-0: queues pin to it with nodeSelector kubernetes.io/hostname=realnode-0 and a"
  log "toleration of torchrun.ai/real-node; its torch image: $(sed -n 's/^TRAIN_IMAGE=//p' "$REAL_NODE_DIR/images.env")"
fi
if command -v torchrun-controller >/dev/null && [ -f controller/cmd/main.py ]; then
  torchrun-controller --kubeconfig "$KUBECONFIG_PATH" --log-format console "${SYNC_IMAGE[@]}" "$@" &
else
  log "the controller program is not built yet; serving the bare control plane"
  sleep infinity &
fi
CONTROLLER_PID=$!
wait "$CONTROLLER_PID"
