#!/usr/bin/env bash
# The local control plane of SPEC §10: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and kwok with fake GPU nodes, all on loopback, all from hack/build-controlplane.sh;
# and the node agent (hack/testbed/nodeagent): hostPath volumes for the default StorageClass
# `standard`, sync pods run as local processes, exec and logs through kwok (hack/testbed/README.md).
#
#   hack/controlplane.sh up                 build if needed, start everything, create the nodes
#   hack/controlplane.sh down               stop everything (no process is left behind)
#   hack/controlplane.sh stop COMPONENT     stop one component (etcd, kube-apiserver, ..., node-agent)
#   hack/controlplane.sh start COMPONENT    start one component again (same ports and data)
#   hack/controlplane.sh env                print the export line for kubectl
#   hack/controlplane.sh leftovers          what a real node left on the host (mounts, links,
#                                           cgroups, processes); prints nothing when clean
#   hack/controlplane.sh python             the Python of the node agent and the sync pods
#
# Environment: TORCHRUN_RUN_DIR (state dir; default ~/.cache/torchrun-controller/run),
# TORCHRUN_NODES (fake GPU nodes, default 4), TORCHRUN_NODE_GPUS (8), TORCHRUN_NODE_CPUS (96),
# TORCHRUN_NODE_MEMORY (1Ti), TORCHRUN_NODE_PODS (110), TORCHRUN_KCM_QPS and TORCHRUN_KCM_BURST
# (kube-controller-manager's client rate limit, default Kubernetes' own 20 and 30), TORCHRUN_PYTHON
# (the Python of the node agent and the sync pods; default: the first of `python`, `python3` on
# PATH that imports this checkout's `controller` and the node agent's dependencies from outside
# the checkout, else hack/venv.sh's).
# TORCHRUN_REAL_NODE=1 adds one real node, `realnode-0` (hack/testbed/realnode.sh: containerd,
# kubelet, bridge CNI, CoreDNS, kube-proxy; root only), components containerd, coredns, kubelet and
# kube-proxy; the API server is then reachable from its pods (the `kubernetes` Service), and
# kube-controller-manager also runs Deployments. TORCHRUN_REAL_NODE_INDEX=1 makes it `realnode-1`
# instead, which runs beside node 0 (another run dir) but without kube-proxy (realnode.sh).
# kube-apiserver's audit log of every write (verb, user agent, time) is $RUN_DIR/audit.log.
set -euo pipefail
source "$(dirname "$0")/testbed/lib.sh"
source "$(dirname "$0")/testbed/realnode.sh"

NODES=${TORCHRUN_NODES:-4}
NODE_GPUS=${TORCHRUN_NODE_GPUS:-8}
NODE_CPUS=${TORCHRUN_NODE_CPUS:-96}
NODE_MEMORY=${TORCHRUN_NODE_MEMORY:-1Ti}
# kube-controller-manager's own client rate (its Job controller creates every worker pod through
# it); Kubernetes' defaults, a production control plane typically runs 100/200
KCM_QPS=${TORCHRUN_KCM_QPS:-20}
KCM_BURST=${TORCHRUN_KCM_BURST:-30}
PKI="$RUN_DIR/pki"
PIDS="$RUN_DIR/pids"
LOGS="$RUN_DIR/logs"
KUBECTL="$KUBE_BIN/kubectl"
AGENT_BIN="$RUN_DIR/node-agent/bin"  # `python`/`python3` of the sync pods and of kwok's exec
KWOK_CRDS=(execs.kwok.x-k8s.io clusterexecs.kwok.x-k8s.io logs.kwok.x-k8s.io clusterlogs.kwok.x-k8s.io)

free_ports() {  # N free loopback TCP ports
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

ensure_ports() {
  if [ ! -f "$RUN_DIR/ports.env" ]; then
    read -r a b c d e < <(free_ports 5)
    printf 'ETCD_PORT=%s\nETCD_PEER_PORT=%s\nAPISERVER_PORT=%s\nKWOK_PORT=%s\nKWOK_METRICS_PORT=%s\n' \
      "$a" "$b" "$c" "$d" "$e" > "$RUN_DIR/ports.env"
  fi
  source "$RUN_DIR/ports.env"
}

cert() {  # cert NAME CN [O] [SAN]: a key pair signed by the test bed's CA
  local name=$1 cn=$2 org=${3:-} san=${4:-}
  [ -f "$PKI/$name.crt" ] && return 0
  local subj="/CN=$cn"; [ -n "$org" ] && subj="/O=$org/CN=$cn"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  local ext="$PKI/$name.ext"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' > "$ext"
  [ -n "$san" ] && printf 'subjectAltName=%s\n' "$san" >> "$ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
}

ensure_pki() {
  mkdir -p "$PKI"
  if [ ! -f "$PKI/ca.crt" ]; then
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -days 3650 \
      -subj "/CN=torchrun-testbed-ca" -out "$PKI/ca.crt" 2>/dev/null
  fi
  # the names a client may use: loopback, the `kubernetes` Service (its ClusterIP, the first of
  # SERVICE_CIDR, and DNS names) and the real node's address, where pods reach it
  cert apiserver kube-apiserver "" "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1,IP:$REAL_NODE_IP"
  cert admin admin system:masters
  cert controller-manager system:kube-controller-manager
  cert scheduler system:kube-scheduler
  cert kwok kwok-controller system:masters
  cert node-agent testbed-node-agent system:masters
  if [ ! -f "$PKI/sa.key" ]; then
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
}

kubeconfig() {  # kubeconfig NAME CERT
  local file="$RUN_DIR/$1.kubeconfig"
  cat > "$file" <<KC
apiVersion: v1
kind: Config
clusters:
- name: torchrun-local
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: torchrun-local
  context: {cluster: torchrun-local, user: $2, namespace: default}
current-context: torchrun-local
KC
}

running() { [ -f "$PIDS/$1.pid" ] && kill -0 "$(cat "$PIDS/$1.pid")" 2>/dev/null; }

launch() {  # launch NAME CMD...: start in its own process group, log to $LOGS/NAME.log
  local name=$1; shift
  running "$name" && return 0
  setsid "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! > "$PIDS/$name.pid"
}

wait_for() {  # wait_for WHAT SECONDS CMD...
  local what=$1 secs=$2; shift 2
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      log "timed out waiting for $what; last log lines:"; tail -n 30 "$LOGS"/*.log >&2 || true; return 1
    fi
    sleep 0.2
  done
}

start_etcd() {
  launch etcd "$ETCD_BIN/etcd" --name testbed --data-dir "$RUN_DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "testbed=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn \
    --quota-backend-bytes 4294967296
  wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
}

write_audit_policy() {  # Metadata of every write (who wrote what, when), nothing else: stays small
  # plus the reads of the deployed controller's ServiceAccount (used by one test only), so
  # test/integration/test_config.py derives every request the controller really makes from it
  cat > "$RUN_DIR/audit-policy.yaml" <<'YAML'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: Metadata
  users: ["system:serviceaccount:torchrun-system:torchrun-controller"]
  verbs: [get, list, watch]
- level: None
YAML
}

start_apiserver() {
  write_audit_policy
  # loopback only, and no `kubernetes` endpoints (nothing routes a ClusterIP); with the real node,
  # every address (realnode.sh's table keeps all but loopback and the bridge out) and the node's
  # address advertised as the `kubernetes` endpoints, so its pods reach it through kube-proxy
  local listen=(--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --endpoint-reconciler-type none)
  if realnode_mode; then
    realnode_claim_host || return 1
    listen=(--bind-address 0.0.0.0 --advertise-address "$REAL_NODE_IP" --endpoint-reconciler-type lease)
  fi
  launch kube-apiserver "$KUBE_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    "${listen[@]}" --secure-port "$APISERVER_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" --authorization-mode RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged=true \
    --enable-priority-and-fairness=false \
    --disable-admission-plugins TaintNodesByCondition \
    --kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types InternalIP \
    --kubelet-client-certificate "$PKI/admin.crt" --kubelet-client-key "$PKI/admin.key" \
    --cert-dir "$PKI/serving" \
    --audit-policy-file "$RUN_DIR/audit-policy.yaml" --audit-log-path "$RUN_DIR/audit.log" \
    --audit-log-format json --audit-log-mode blocking -v=1
  wait_for kube-apiserver 120 api_get /readyz
}

api_get() {  # api_get PATH: GET it as the admin, fail unless 2xx (a curl, not a kubectl run, per poll)
  curl -fsS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT$1"
}

start_controller_manager() {
  # resourcequota-controller: a namespace's ResourceQuota is enforced as in a real cluster (a quota
  # without it refuses every pod: "status unknown for quota"); test_workers_not_starting.py meets one
  local controllers="job-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,pod-garbage-collector-controller,ttl-after-finished-controller,endpointslice-controller,root-ca-certificate-publisher-controller,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller,persistentvolume-binder-controller,resourcequota-controller"
  # with the real node, Deployments run (the controller's own Deployment, as shipped, on the node)
  if realnode_mode; then controllers+=",deployment-controller,replicaset-controller"; fi
  launch kube-controller-manager "$KUBE_BIN/kube-controller-manager" \
    --kubeconfig "$RUN_DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$RUN_DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$RUN_DIR/controller-manager.kubeconfig" \
    --controllers "$controllers" \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" --use-service-account-credentials \
    --kube-api-qps "$KCM_QPS" --kube-api-burst "$KCM_BURST" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 -v=1
}

start_scheduler() {
  # --pod-max-in-unschedulable-pods-duration (5m by default; deprecated, still read by v1.34): a pod
  # rejected for an unbound claim can be retried on the claim's Bound event before the scheduler's
  # own claim cache has seen it (kubernetes/kubernetes#93552, open: two informer handlers, no
  # order), and then waits for this flush. Seen once here: a sync pod Pending for the whole of a
  # test's 120 s with its claim Bound. 20 s (as test_gang.py's scheduler-plugins scheduler) bounds
  # that wait to under a minute (the queue flushes every 30 s); a pod that cannot fit stays Pending.
  launch kube-scheduler "$KUBE_BIN/kube-scheduler" \
    --kubeconfig "$RUN_DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig "$RUN_DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig "$RUN_DIR/scheduler.kubeconfig" \
    --pod-max-in-unschedulable-pods-duration=20s \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 -v=1
}

install_cluster_objects() {  # what kwok and the node agent need before they start
  "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" apply --server-side -f "$KWOK_BIN/crds" \
    -f "$HACK_DIR/testbed/storageclass.yaml" >/dev/null
  wait_established "${KWOK_CRDS[@]/#/crd/}"
}

# `kubectl wait --for=condition=Established` fails at once (".status.conditions accessor error:
# <nil>") on a CRD so new that its status has no conditions yet, instead of waiting: try again.
wait_established() {  # CRD references (crd/<name>), or `crd --all`
  local try
  for try in 1 2 3 4 5 6 7 8 9 10 11; do
    "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" wait --for=condition=Established --timeout=10s "$@" \
      >/dev/null 2>&1 && return 0
    sleep 1
  done
  "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" wait --for=condition=Established --timeout=10s "$@" >/dev/null
}

testbed_python() {  # the Python that runs the node agent from this checkout (TORCHRUN_PYTHON first)
  local py
  for py in "${TORCHRUN_PYTHON:-}" "$(command -v python || true)" "$(command -v python3 || true)"; do
    [ -n "$py" ] || continue
    # from / and with the node agent's PYTHONPATH: run from the repository root, `import
    # controller` would find the checkout through the current directory in any Python, even
    # one without the project's dependencies, and the node agent would then die on its first
    # import (structlog); importing the agent itself proves every dependency it needs is there
    if (cd / && PYTHONPATH="$HACK_DIR/testbed" "$py" - "$REPO_DIR" >/dev/null 2>&1) <<'PY'
import os, sys
import controller, nodeagent.__main__, structlog
here = os.path.realpath(sys.argv[1]) + os.sep
sys.exit(0 if os.path.realpath(controller.__file__).startswith(here) else 1)
PY
    then echo "$py"; return 0; fi
  done
  echo "$("$HACK_DIR/venv.sh")/bin/python"
}

write_python_shims() {  # the sync pods' `python` and kwok exec's: the test bed's Python
  local py name; py=$(testbed_python)
  mkdir -p "$AGENT_BIN"
  for name in python python3; do
    printf '#!/bin/sh\nexec %q "$@"\n' "$py" > "$AGENT_BIN/$name"
    chmod +x "$AGENT_BIN/$name"
  done
}

start_kwok() {
  # kwok looks up an exec's command on its own PATH (Go's exec.Command resolves it before the
  # Exec's envs apply), so `kubectl exec ... -- python` must find the test bed's Python there
  [ -x "$AGENT_BIN/python" ] || write_python_shims
  launch kwok env "PATH=$AGENT_BIN:$PATH" "$KWOK_BIN/kwok" --kubeconfig "$RUN_DIR/kwok.kubeconfig" \
    --config "$HACK_DIR/testbed/kwok/stages.yaml" --enable-crds Exec,ClusterExec,Logs,ClusterLogs \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-ip 127.0.0.1 --node-port "$KWOK_PORT" --server-address "127.0.0.1:$KWOK_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --node-lease-duration-seconds 40 -v=INFO
}

start_node_agent() {
  [ -x "$AGENT_BIN/python" ] || write_python_shims
  local started; started=$(grep -c "caches synced" "$LOGS/node-agent.log" 2>/dev/null || true)
  launch node-agent env "PYTHONPATH=$HACK_DIR/testbed" "$AGENT_BIN/python" -m nodeagent \
    --kubeconfig "$RUN_DIR/node-agent.kubeconfig" --run-dir "$RUN_DIR" \
    --image-path "$AGENT_BIN:/usr/local/bin:/usr/bin:/bin"
  wait_for "the node agent" 60 agent_synced_since "${started:-0}"
}

agent_synced_since() {  # agent_synced_since N: the agent's log says "caches synced" more than N times
  [ "$(grep -c "caches synced" "$LOGS/node-agent.log" 2>/dev/null || true)" -gt "$1" ]
}

create_nodes() {
  local i docs=""
  for i in $(seq 0 $(( NODES - 1 ))); do
    docs+="---
apiVersion: v1
kind: Node
metadata:
  name: gpu-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: \"0\"
  labels:
    kubernetes.io/hostname: gpu-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node.kubernetes.io/instance-type: fake-gpu-${NODE_GPUS}x
    topology.kubernetes.io/zone: zone-$(( i % 2 ))
    type: kwok
    nvidia.com/gpu.present: \"true\"
    nvidia.com/gpu.count: \"$NODE_GPUS\"
    nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
spec: {}
status:
  capacity:
    cpu: \"$NODE_CPUS\"
    memory: $NODE_MEMORY
    pods: \"${TORCHRUN_NODE_PODS:-110}\"
    ephemeral-storage: 1Ti
    nvidia.com/gpu: \"$NODE_GPUS\"
"
  done
  printf '%s' "$docs" | "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" apply -f - >/dev/null
  # kwok makes a few nodes Ready a second on a busy machine: a minute, and a second more per node
  wait_for "nodes Ready" $(( 60 + NODES )) nodes_ready
}

nodes_ready() {  # every node is Ready, read from one list (`kubectl wait` asks for each node in
  # turn, ~0.1 s apiece: at 256 nodes longer than any short timeout)
  local ready
  ready=$("$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" get nodes \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}') || return 1
  [ "$(grep -c '^True$' <<<"$ready")" -ge "$NODES" ]
}

start_component() {
  ensure_ports
  case $1 in
    etcd) start_etcd ;;
    kube-apiserver) start_apiserver ;;
    kube-controller-manager) start_controller_manager ;;
    kube-scheduler) start_scheduler ;;
    kwok) start_kwok ;;
    node-agent) start_node_agent ;;
    containerd) start_containerd ;;
    coredns) realnode_ports; start_coredns ;;
    kubelet) realnode_ports; start_kubelet ;;
    kube-proxy) realnode_ports; start_kube_proxy ;;
    *) echo "unknown component: $1" >&2; return 2 ;;
  esac
}

stop_component() {
  local pidfile="$PIDS/$1.pid" pid i
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

up() {
  "$HACK_DIR/build-controlplane.sh"
  local t0; t0=$(date +%s.%N)
  mkdir -p "$RUN_DIR" "$PIDS" "$LOGS"
  ensure_ports
  ensure_pki
  kubeconfig admin admin
  kubeconfig controller-manager controller-manager
  kubeconfig scheduler scheduler
  kubeconfig kwok kwok
  kubeconfig node-agent node-agent
  write_python_shims
  start_etcd
  start_apiserver
  install_cluster_objects
  start_controller_manager
  start_scheduler
  start_kwok
  start_node_agent
  create_nodes
  if [ "${TORCHRUN_REAL_NODE:-0}" = 1 ]; then realnode_up; fi
  wait_for "default service account" 60 api_get /api/v1/namespaces/default/serviceaccounts/default
  log "control plane up in $(python3 -c "import time;print(round(time.time()-$t0,1))")s: $NODES fake GPU nodes$(
    [ "${TORCHRUN_REAL_NODE:-0}" = 1 ] && echo " and the real node $REAL_NODE")"
  env_line
}

down() {
  local c
  realnode_down  # first: it drains its pods through the API server
  for c in node-agent kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_component "$c"; done
}

env_line() { echo "export KUBECONFIG=$KUBECONFIG_PATH"; }

case ${1:-} in
  up) up ;;
  down) down ;;
  start) start_component "$2" ;;
  stop) stop_component "$2" ;;
  env) env_line ;;
  leftovers) realnode_leftovers ;;
  python) testbed_python ;;
  *) sed -n '2,25p' "$0"; exit 2 ;;
esac
