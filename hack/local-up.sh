#!/usr/bin/env bash
# Run torchrun-controller against a local control plane with fake GPU nodes.
# Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (4 fake nodes with
# 8 nvidia.com/gpu each), installs the CRDs, prints the KUBECONFIG line, then runs the controller
# in the foreground. Ctrl-C stops the controller and the whole control plane.
# TORCHRUN_REAL_NODE=1 (root) adds the real node realnode-0 (README: The real node).
set -euo pipefail
source "$(dirname "$0")/testbed/lib.sh"
cd "$REPO_DIR"

VENV="$("$HACK_DIR/venv.sh")"
export PATH="$VENV/bin:$PATH"

cleanup() {
  trap - INT TERM EXIT
  log "stopping the control plane"
  "$HACK_DIR/controlplane.sh" down
}
trap cleanup INT TERM EXIT

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
SYNC_IMAGE=()
if [ -f "$RUN_DIR/realnode/images.env" ]; then
  SYNC_IMAGE=(--sync-image "$(sed -n 's/^CONTROLLER_IMAGE=//p' "$RUN_DIR/realnode/images.env")")
  # the progress endpoint where the real node's pods reach this host: the node's address, the .1
  # of its pod subnet (hack/testbed/realnode.sh)
  subnet=${TORCHRUN_REAL_NODE_SUBNET:-10.199.0.0/24}
  node_ip="${subnet%.*}.1"
  SYNC_IMAGE+=(--progress-bind-address "$node_ip:9443" --progress-url "https://$node_ip:9443/v1/progress")
  log "real node realnode-0: queues pin to it with nodeSelector kubernetes.io/hostname=realnode-0 and a"
  log "toleration of torchrun.ai/real-node; its torch image: $(sed -n 's/^TRAIN_IMAGE=//p' "$RUN_DIR/realnode/images.env")"
fi
if command -v torchrun-controller >/dev/null && [ -f controller/cmd/main.py ]; then
  torchrun-controller --kubeconfig "$KUBECONFIG_PATH" --log-format console "${SYNC_IMAGE[@]}" "$@" &
else
  log "the controller program is not built yet; serving the bare control plane"
  sleep infinity &
fi
wait $!
