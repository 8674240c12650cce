# The real node of the test bed (SPEC §10), sourced by hack/controlplane.sh when
# TORCHRUN_REAL_NODE=1: containerd (its own config, socket, root and state under the run dir),
# runc, bridge CNI, a kubelet registered as `realnode-0` with certificates from the test bed's CA,
# CoreDNS serving cluster.local from the API server, kube-proxy (nftables mode) routing Services'
# ClusterIPs, and fake `nvidia.com/gpu` capacity patched on the node. Pods run there for real:
# real images (imported with `ctr`, no registry), real volumes, real processes in real namespaces
# and cgroups.
#
# The pods reach Services as in a cluster: the CNI gives them a route to the Service range through
# the node's address, kube-proxy DNATs a ClusterIP to the Service's endpoints (masquerading every
# Service connection, so replies come back through the node whatever pod answers), and the host
# forwards between them (net.ipv4.ip_forward, saved and put back). The API server is one of those
# Services (`kubernetes`, 10.96.0.1:443): with the real node it listens on every address, advertises
# the node's (its `kubernetes` endpoints, written by its lease reconciler), and its certificate names
# both; a table of ours (`inet torchrun-realnode`) drops connections to its port that arrive on any
# interface but loopback and the bridge, so the host does not expose it. In-cluster config works
# from a pod.
#
# The node is tainted `torchrun.ai/real-node=true:NoSchedule` and labelled
# `torchrun.ai/real-node=true`, so only pods that ask for it land there (a queue pins itself with
# that nodeSelector and toleration); every other pod stays on kwok's fake nodes.
#
# It changes the host only in ways `realnode_down` undoes, and it records what it has to undo
# before it changes anything: the sysctls kubelet sets (kubelet's protectKernelDefaults would refuse
# to start on a host whose values differ, so kubelet sets them and `down` puts the saved ones back),
# the bridge, the cgroups under /torchrun-realnode, the pods' network namespaces and mounts, and the
# host directories that kubelet and containerd create at fixed paths.
#
# Two real nodes may run on one machine, each with its own control plane (the test suite runs one
# per pytest worker): TORCHRUN_REAL_NODE_INDEX=N (default 0) names node N `realnode-N`, with its own
# bridge, subnet (10.(199-N).0.0/24), cgroup root, containerd root and nftables guard table. What
# is host-wide — the sysctls, the fixed host directories, the network namespaces under /run/netns —
# is recorded once in $REAL_NODES_HOST (/run/torchrun-realnodes) by the first node up, under a
# lock, and put back by the last node down. Only node 0 runs kube-proxy: its nftables tables
# (`ip kube-proxy`, `ip6 kube-proxy`) have host-wide names, so a second kube-proxy would fight the
# first. A node N > 0 routes no ClusterIP: its pods reach pods, DNS and the node, not Services.
#
# Requires: root, cgroup v1 or v2 with cgroupfs, the binaries of hack/testbed/build-realnode.sh and
# the images of hack/testbed/build-node-images.sh. Settings: TORCHRUN_REAL_NODE_SUBNET (the pods'
# /24, default 10.199.0.0/24; the node's address is its .1), TORCHRUN_REAL_NODE_GPUS (fake
# nvidia.com/gpu capacity, default 2), TORCHRUN_REAL_NODE_CPU_WEIGHT (the pods' CPU weight, in
# busy processes: `realnode_cgroups`, default 8).

REAL_NODE_DIR="$RUN_DIR/realnode"
# the node's index: the environment's on `up`, then the one `up` recorded (a later `start`/`down`)
REAL_NODE_INDEX=${TORCHRUN_REAL_NODE_INDEX:-$(cat "$REAL_NODE_DIR/index" 2>/dev/null || echo 0)}
[[ $REAL_NODE_INDEX =~ ^[0-9]$ ]] || { echo "TORCHRUN_REAL_NODE_INDEX must be 0-9, not '$REAL_NODE_INDEX'" >&2; exit 2; }
REAL_NODE=realnode-$REAL_NODE_INDEX
REAL_NODE_SUBNET=${TORCHRUN_REAL_NODE_SUBNET:-10.$((199 - REAL_NODE_INDEX)).0.0/24}
REAL_NODE_IP="${REAL_NODE_SUBNET%.*}.1"
REAL_NODE_GPUS=${TORCHRUN_REAL_NODE_GPUS:-2}
REAL_NODE_BRIDGE=trn-realnode$REAL_NODE_INDEX
# node 0 keeps the names it always had; node N > 0 adds its index
REAL_NODE_SUFFIX=${REAL_NODE_INDEX#0}
REAL_NODE_CGROUP=torchrun-realnode$REAL_NODE_SUFFIX
REAL_NODE_GUARD_TABLE="inet torchrun-realnode$REAL_NODE_SUFFIX"
REAL_NODE_TAINT=torchrun.ai/real-node
CONTAINERD_SOCK="$REAL_NODE_DIR/containerd/containerd.sock"
# containerd's root (image content and unpacked snapshots) outlives a run, like the other caches, so
# a warm `up` imports nothing; its state (tasks, mounts, sockets) is the run's. One per node index:
# two containerds cannot share a root.
CONTAINERD_ROOT="$CACHE_DIR/realnode-containerd$REAL_NODE_SUFFIX"
# what is host-wide, shared by the real nodes running on this machine: the record of the host as it
# was before the first of them (host.saved), one file per node up (holders/), and the lock
REAL_NODES_HOST=${TORCHRUN_REAL_NODES_HOST:-/run/torchrun-realnodes}
# the sysctls kubelet sets (kubelet's setupKernelTunables), the bridge plugin may set, `up` sets
# (ip_forward: Service traffic between pods goes through the node) and kube-proxy may set
REAL_NODE_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv4.conf.all.route_localnet)
# the nftables tables of this node: kube-proxy's (nftables mode, each IP family; node 0 only) and
# our guard; `down` deletes those that were absent before `up`; a kube-proxy table there before
# node 0's `up` means another kube-proxy runs here
KUBE_PROXY_NFT_TABLES=("ip kube-proxy" "ip6 kube-proxy")
REAL_NODE_NFT_TABLES=("$REAL_NODE_GUARD_TABLE")
[ "$REAL_NODE_INDEX" = 0 ] && REAL_NODE_NFT_TABLES+=("${KUBE_PROXY_NFT_TABLES[@]}")
KUBE_PROXY="$KUBE_BIN/kube-proxy"
# host paths that kubelet and containerd create whatever their configured directories are
REAL_NODE_HOST_PATHS=(/var/log/containers /var/log/pods /run/netns /var/run/netns /run/containerd
  /var/lib/kubelet /var/lib/cni /opt/containerd /etc/kubernetes)

realnode_binaries() {  # sets KUBELET, COREDNS, PAUSE_*, CONTROLLER_*, TRAIN_* from the build scripts
  local line
  while IFS= read -r line; do
    case $line in *=*) export "${line?}" ;; esac
  done < <("$HACK_DIR/testbed/build-realnode.sh" && "$HACK_DIR/testbed/build-node-images.sh")
  [ -n "${KUBELET:-}" ] && [ -n "${TRAIN_IMAGE:-}" ] && [ -n "${CONTROLLER_IMAGE:-}" ]
}

realnode_record_host() {  # what `down` must restore, written once, before the first change: this
  # node's own (the nftables tables it makes) in its run dir, and the host-wide in $REAL_NODES_HOST
  # (recorded by the first node up; this node joins its holders)
  mkdir -p "$REAL_NODE_DIR"
  [ -f "$REAL_NODE_DIR/host.saved" ] && return 0
  echo "$REAL_NODE_INDEX" > "$REAL_NODE_DIR/index"
  local table
  for table in "${REAL_NODE_NFT_TABLES[@]}"; do
    nft list table $table >/dev/null 2>&1 || echo "nft $table"
  done > "$REAL_NODE_DIR/host.saved.tmp"
  realnode_host_locked realnode_hold_host || return 1
  mv "$REAL_NODE_DIR/host.saved.tmp" "$REAL_NODE_DIR/host.saved"
}

realnode_host_locked() {  # runs "$@" holding the lock on the host-wide record (a subshell); fails
  # when the record's directory cannot be made or locked, or "$@" fails
  mkdir -p "$REAL_NODES_HOST/holders" || return 1
  ( flock -w 120 9 || { log "the lock $REAL_NODES_HOST/lock was held over 120 s"; exit 1; }; "$@" ) \
    9>"$REAL_NODES_HOST/lock"
}

realnode_live_holders() {  # the nodes that hold the host, each a file holders/NODE naming its run
  # dir; one whose node directory is gone (its run was removed without `down`) is dropped. A run
  # killed before `down` whose directory stays holds on: the host is put back only when no node
  # may still run on it.
  local file
  for file in "$REAL_NODES_HOST"/holders/*; do
    [ -e "$file" ] || continue
    if [ -d "$(cat "$file")/realnode" ]; then
      basename "$file"
    else
      rm -f "$file"
    fi
  done
}

realnode_names_taken() {  # true when another run holds the host as this node: the bridge, cgroups
  # and tables of this node's name are that run's, not this one's
  local holder="$REAL_NODES_HOST/holders/$REAL_NODE"
  [ -f "$holder" ] && [ "$(cat "$holder")" != "$RUN_DIR" ]
}

realnode_hold_host() {  # (locked) record the host unless a node holds it, then hold it too. A
  # record left by a run that never reached `down` is kept: it has the values from before it.
  local saved="$REAL_NODES_HOST/host.saved" key path
  if [ -z "$(realnode_live_holders)" ] && [ ! -f "$saved" ]; then
    {
      for key in "${REAL_NODE_SYSCTLS[@]}"; do echo "sysctl $key $(sysctl -n "$key")"; done
      for path in "${REAL_NODE_HOST_PATHS[@]}"; do [ -e "$path" ] || echo "absent $path"; done
      for path in /run/netns/*; do if [ -e "$path" ]; then echo "netns $path"; fi; done
    } > "$saved.tmp" || return 1
    mv "$saved.tmp" "$saved" || return 1
  fi
  echo "$RUN_DIR" > "$REAL_NODES_HOST/holders/$REAL_NODE" || return 1
}

realnode_release_host() {  # (locked) this node lets go of the host; the last one puts it back
  local saved="$REAL_NODES_HOST/host.saved" kind key value ns
  rm -f "$REAL_NODES_HOST/holders/$REAL_NODE"
  [ -z "$(realnode_live_holders)" ] || return 0
  [ -f "$saved" ] || return 0
  # network namespaces the CRI made (those that existed before the first node stay)
  for ns in /run/netns/cni-*; do
    [ -e "$ns" ] || continue
    grep -qxF "netns $ns" "$saved" 2>/dev/null && continue
    umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null || true
    rm -f "$ns"
  done
  while read -r kind key value; do
    case $kind in
      sysctl) [ "$(sysctl -n "$key")" = "$value" ] || sysctl -qw "$key=$value" ;;
      absent) [ -e "$key" ] && rm -rf --one-file-system "$key" ;;
    esac
  done < "$saved"
  rm -f "$saved"
}

realnode_network() {  # the pods' bridge, with the node's address on it, and the CNI config
  if ! ip link show "$REAL_NODE_BRIDGE" >/dev/null 2>&1; then
    ip link add "$REAL_NODE_BRIDGE" type bridge
    ip addr add "$REAL_NODE_IP/${REAL_NODE_SUBNET#*/}" dev "$REAL_NODE_BRIDGE"
  fi
  # the bridge's MAC, pinned: a bridge whose address was never set takes its lowest port's, so the
  # deletion of the pod whose veth gave it (often the first sync pod) moves it, and every pod's ARP
  # entry for the node's address is wrong until it expires — 30-50 s in which no pod reaches the
  # node (the progress endpoint, CoreDNS). The kernel never moves an address that was set.
  ip link set "$REAL_NODE_BRIDGE" address "$(cat "/sys/class/net/$REAL_NODE_BRIDGE/address")"
  ip link set "$REAL_NODE_BRIDGE" up
  # a ClusterIP's connection is DNATed on the node to a pod on the bridge: the node forwards it
  sysctl -qw net.ipv4.ip_forward=1
  mkdir -p "$REAL_NODE_DIR/cni/net.d" "$REAL_NODE_DIR/cni/ipam"
  # isGateway false: the bridge already has the node's address (the pods' DNS server is on-link);
  # no masquerade rules of the plugin's (kube-proxy's masquerade Service traffic); the one route
  # the pods get leads to the Service range through the node, where kube-proxy's rules are
  cat > "$REAL_NODE_DIR/cni/net.d/10-torchrun.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "torchrun-realnode$REAL_NODE_SUFFIX",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$REAL_NODE_BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$REAL_NODE_SUBNET", "rangeStart": "${REAL_NODE_SUBNET%.*}.10"}]],
        "routes": [{"dst": "$SERVICE_CIDR", "gw": "$REAL_NODE_IP"}],
        "dataDir": "$REAL_NODE_DIR/cni/ipam"
      }
    }
  ]
}
JSON
}

cgroup_hierarchies() {  # the mount point of every cgroup hierarchy (v1's several, or v2's one)
  findmnt -rn -t cgroup,cgroup2 -o TARGET
}

# The CPU weight of the node's pods, all together, against every other process on the host: as
# much as REAL_NODE_CPU_WEIGHT processes busy at the default weight. A cgroup the kubelet's pods live
# in weighs, by default, what one such process does, while each program this host's test bed runs
# (etcd, each API server, each controller: `launch` starts every one in a session, and so in a
# scheduling group, of its own) weighs as much: on a host busy with other control planes the node's
# training processes got a sliver of the CPU. A real node's kubepods weighs as its allocatable CPUs.
REAL_NODE_CPU_WEIGHT=${TORCHRUN_REAL_NODE_CPU_WEIGHT:-8}

realnode_cgroups() {  # the kubelet's cgroupRoot, in every hierarchy (kubelet requires it to exist)
  local h dir
  for h in $(cgroup_hierarchies); do
    dir="$h/$REAL_NODE_CGROUP"
    mkdir -p "$dir"
    if [ -f "$h/cpuset.cpus" ] && [ -f "$dir/cpuset.cpus" ] && [ -z "$(cat "$dir/cpuset.cpus")" ]; then
      cat "$h/cpuset.cpus" > "$dir/cpuset.cpus"
      cat "$h/cpuset.mems" > "$dir/cpuset.mems"
    fi
    # v1's cpu.shares (a process's: 1024), or v2's cpu.weight (100) where the controller is on
    if [ -f "$dir/cpu.shares" ]; then
      echo $((1024 * REAL_NODE_CPU_WEIGHT)) > "$dir/cpu.shares"
    elif [ -f "$dir/cpu.weight" ]; then
      echo $((100 * REAL_NODE_CPU_WEIGHT)) > "$dir/cpu.weight"
    fi
  done
}

containerd_config() {  # containerd's own config: nothing under /var/lib or /run/containerd but shims
  local dir="$REAL_NODE_DIR/containerd"
  mkdir -p "$dir"
  cat > "$dir/config.toml" <<TOML
version = 2
root = "$CONTAINERD_ROOT"
state = "$dir/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  # this host may forbid lowering oom_score_adj (the sandbox pause asks for -998): clamp it to
  # containerd's own
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$REAL_NODE_DIR/cni/net.d"
    max_conf_num = 1
TOML
}

start_containerd() {
  local dir="$REAL_NODE_DIR/containerd"
  launch containerd containerd --config "$dir/config.toml" --log-level warn
  # 120 s: on a loaded machine (image builds beside it) its start over the cached root took over 60 s
  wait_for containerd 120 ctr -a "$CONTAINERD_SOCK" version
}

realnode_images() {  # the pause, controller and training images, imported unless already there;
  # older builds of ours are removed (each controller change is a new image of ~500 MB), with the
  # reference by image ID (`sha256:<config digest>`) that the CRI adds to each: left, it kept every
  # older build's layers (20 GB in 2 days of runs)
  if ! ctr -a "$CONTAINERD_SOCK" -n k8s.io images ls -q | grep -qxF "$PAUSE_IMAGE"; then
    ctr -a "$CONTAINERD_SOCK" -n k8s.io images import "$PAUSE_ARCHIVE" >/dev/null
  fi
  # the names of what it imported (the checkout may have changed since realnode_binaries read them)
  local out line name
  out=$("$HACK_DIR/testbed/build-node-images.sh" import "$CONTAINERD_SOCK") || return 1
  while IFS= read -r line; do
    case $line in CONTROLLER_IMAGE=* | TRAIN_IMAGE=*) export "${line?}" ;; esac
  done <<<"$out"
  local listed kept
  listed=$(ctr -a "$CONTAINERD_SOCK" -n k8s.io images ls | awk 'NR > 1 {print $1, $3}')
  kept=$(awk -v a="$PAUSE_IMAGE" -v b="$CONTROLLER_IMAGE" -v c="$TRAIN_IMAGE" \
    '$1 == a || $1 == b || $1 == c {print $2}' <<<"$listed")
  # a name of ours that is not current, and an ID reference to no current image's manifest
  for name in $(awk -v kept="$kept" -v a="$PAUSE_IMAGE" -v b="$CONTROLLER_IMAGE" -v c="$TRAIN_IMAGE" '
      BEGIN { n = split(kept, k, "\n"); for (i = 1; i <= n; i++) keep[k[i]] = 1 }
      $1 ~ /^localhost\/torchrun-/ && $1 != a && $1 != b && $1 != c { print $1 }
      $1 ~ /^sha256:/ && !($2 in keep) { print $1 }' <<<"$listed"); do
    ctr -a "$CONTAINERD_SOCK" -n k8s.io images rm --sync "$name" >/dev/null
  done
  printf 'PAUSE_IMAGE=%s\nCONTROLLER_IMAGE=%s\nTRAIN_IMAGE=%s\n' "$PAUSE_IMAGE" "$CONTROLLER_IMAGE" \
    "$TRAIN_IMAGE" > "$REAL_NODE_DIR/images.env"
}

realnode_ports() {
  if [ ! -f "$REAL_NODE_DIR/ports.env" ]; then
    read -r a b c d e < <(free_ports 5)
    printf 'KUBELET_PORT=%s\nKUBELET_HEALTHZ_PORT=%s\nCOREDNS_READY_PORT=%s\n' "$a" "$b" "$c" \
      > "$REAL_NODE_DIR/ports.env"
    printf 'KUBE_PROXY_HEALTHZ_PORT=%s\nKUBE_PROXY_METRICS_PORT=%s\n' "$d" "$e" >> "$REAL_NODE_DIR/ports.env"
  fi
  source "$REAL_NODE_DIR/ports.env"
}

realnode_rbac() {  # the kubelet's (as system:nodes, without the Node authorizer) and CoreDNS's reads
  "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" apply --server-side -f - >/dev/null <<'YAML'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "testbed:nodes"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:nodes"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "testbed:coredns"}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "testbed:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "testbed:coredns"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:coredns"}]
YAML
  # kube-proxy is user system:kube-proxy, which the API server's own bootstrap binding
  # system:node-proxier grants what it reads (Services, EndpointSlices, Nodes) and Events
}

start_coredns() {
  cat > "$REAL_NODE_DIR/Corefile" <<COREFILE
.:53 {
    bind $REAL_NODE_IP
    ready 127.0.0.1:$COREDNS_READY_PORT
    errors
    kubernetes cluster.local {
        kubeconfig $RUN_DIR/coredns.kubeconfig torchrun-local
        pods insecure
    }
}
COREFILE
  launch coredns "$COREDNS" -conf "$REAL_NODE_DIR/Corefile"
  wait_for CoreDNS 60 curl -fsS "http://127.0.0.1:$COREDNS_READY_PORT/ready"
}

start_kubelet() {
  local dir="$REAL_NODE_DIR/kubelet"
  mkdir -p "$dir/root" "$dir/pod-logs" "$dir/volume-plugins"
  : > "$dir/resolv.conf"  # pods resolve through CoreDNS only: no host search domains leak in
  cat > "$dir/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $REAL_NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
cgroupRoot: /$REAL_NODE_CGROUP
failCgroupV1: false
protectKernelDefaults: false
makeIPTablesUtilChains: false
clusterDomain: cluster.local
clusterDNS: [$REAL_NODE_IP]
resolvConf: $dir/resolv.conf
podLogsDir: $dir/pod-logs
volumePluginDir: $dir/volume-plugins
registerWithTaints:
- {key: $REAL_NODE_TAINT, value: "true", effect: NoSchedule}
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
serializeImagePulls: false
shutdownGracePeriod: 0s
nodeStatusUpdateFrequency: 10s
YAML
  launch kubelet "$KUBELET" --config "$dir/config.yaml" --kubeconfig "$RUN_DIR/kubelet.kubeconfig" \
    --root-dir "$dir/root" --hostname-override "$REAL_NODE" --node-ip "$REAL_NODE_IP" \
    --node-labels "$REAL_NODE_TAINT=true" -v=1
  wait_for "kubelet's node $REAL_NODE Ready" 120 "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" \
    wait --for=condition=Ready "node/$REAL_NODE" --timeout=1s
}

realnode_guard() {  # the API server listens on every address with the real node: only loopback
  # and the bridge reach its port (a table of ours, recorded and deleted by `down`)
  nft -f - <<NFT
table $REAL_NODE_GUARD_TABLE
delete table $REAL_NODE_GUARD_TABLE
table $REAL_NODE_GUARD_TABLE {
  chain input {
    type filter hook input priority filter; policy accept;
    tcp dport $APISERVER_PORT iifname != { "lo", "$REAL_NODE_BRIDGE" } drop
  }
}
NFT
}

start_kube_proxy() {  # routes the Services' ClusterIPs on this host (nftables mode, its own tables)
  if [ "$REAL_NODE_INDEX" != 0 ]; then
    log "only realnode-0 runs kube-proxy: its nftables tables have host-wide names"
    return 1
  fi
  local dir="$REAL_NODE_DIR/kube-proxy"
  mkdir -p "$dir"
  # conntrack limits and timeouts 0: left as the host has them (kube-proxy would raise them);
  # NodePorts only on the node's address; oomScoreAdj 0: this host may forbid lowering it
  cat > "$dir/config.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $RUN_DIR/kube-proxy.kubeconfig}
hostnameOverride: $REAL_NODE
bindAddress: $REAL_NODE_IP
healthzBindAddress: 127.0.0.1:$KUBE_PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$KUBE_PROXY_METRICS_PORT
mode: nftables
nftables: {masqueradeAll: true, syncPeriod: 30s, minSyncPeriod: 0s}
clusterCIDR: $REAL_NODE_SUBNET
detectLocalMode: ClusterCIDR
nodePortAddresses: [$REAL_NODE_IP/32]
oomScoreAdj: 0
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
  launch kube-proxy "$KUBE_PROXY" --config "$dir/config.yaml" -v=1
  wait_for kube-proxy 60 curl -fsS "http://127.0.0.1:$KUBE_PROXY_HEALTHZ_PORT/healthz"
  # the API server's own Service is programmed: in-cluster config works from the first pod
  wait_for "kube-proxy's rules for the kubernetes Service" 60 realnode_routes_kubernetes
}

realnode_kubernetes_ip() {
  "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" get service kubernetes -n default -o jsonpath='{.spec.clusterIP}'
}

realnode_routes_kubernetes() {
  local ip; ip=$(realnode_kubernetes_ip) || return 1
  nft list table ip kube-proxy 2>/dev/null | grep -qF "$ip" \
    && [ -n "$("$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" get endpointslices -n default \
      -l kubernetes.io/service-name=kubernetes -o jsonpath='{.items[*].endpoints[*].addresses[0]}')" ]
}

# realnode_mode: true when this run has (or is bringing up) the real node; decides how the API
# server listens and which controllers kube-controller-manager runs, on `up` and on a later `start`
realnode_mode() { [ "${TORCHRUN_REAL_NODE:-0}" = 1 ] || [ -f "$REAL_NODE_DIR/host.saved" ]; }

realnode_gpus() {  # fake nvidia.com/gpu capacity (kubelet keeps extended resources it does not manage)
  "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" patch node "$REAL_NODE" --subresource=status --type=json \
    -p "[{\"op\":\"add\",\"path\":\"/status/capacity/nvidia.com~1gpu\",\"value\":\"$REAL_NODE_GPUS\"}]" >/dev/null
  wait_for "$REAL_NODE's allocatable nvidia.com/gpu" 60 realnode_has_gpus
}

realnode_has_gpus() {
  [ "$("$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" get node "$REAL_NODE" \
    -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')" = "$REAL_NODE_GPUS" ]
}

realnode_claim_host() {  # refuse a host that runs this node (or its address, or, for node 0, a
  # kube-proxy) already; record what `down` restores, then guard the API server's port (it listens on
  # every address with the real node). Runs before the API server starts and again in realnode_up:
  # once recorded, skipped.
  [ "$(id -u)" -eq 0 ] || { log "the real node needs root"; return 1; }
  [ -f "$REAL_NODE_DIR/host.saved" ] && { realnode_guard; return 0; }
  if ip link show "$REAL_NODE_BRIDGE" >/dev/null 2>&1; then
    log "$REAL_NODE runs on this machine already (the bridge $REAL_NODE_BRIDGE exists): stop it with its"
    log "own 'hack/controlplane.sh down' (TORCHRUN_RUN_DIR of that run), or give this one another"
    log "TORCHRUN_REAL_NODE_INDEX"
    return 1
  fi
  if [ -n "$(ip -o addr show to "$REAL_NODE_IP/32" 2>/dev/null)" ]; then
    log "the node's address $REAL_NODE_IP is on this host already: set another TORCHRUN_REAL_NODE_SUBNET"
    return 1
  fi
  local table
  if [ "$REAL_NODE_INDEX" = 0 ]; then
    for table in "${KUBE_PROXY_NFT_TABLES[@]}"; do
      if nft list table $table >/dev/null 2>&1; then
        log "the nftables table '$table' exists: another kube-proxy runs on this host; not starting one beside it"
        return 1
      fi
    done
  fi
  # `|| return 1`: this function runs in a `||` list, where `set -e` stops nothing
  realnode_record_host || { log "could not record the host in $REAL_NODES_HOST: not starting"; return 1; }
  realnode_guard
}

realnode_up() {
  realnode_binaries || { log "the real node's binaries or images did not build"; return 1; }
  realnode_claim_host || return 1
  realnode_ports
  cert kubelet-client "system:node:$REAL_NODE" system:nodes
  cert kubelet-serving "$REAL_NODE" "" "DNS:$REAL_NODE,IP:$REAL_NODE_IP"
  cert coredns system:coredns
  cert kube-proxy system:kube-proxy
  kubeconfig kubelet kubelet-client
  kubeconfig coredns coredns
  kubeconfig kube-proxy kube-proxy
  realnode_rbac
  realnode_network
  realnode_cgroups
  containerd_config
  start_containerd
  realnode_containers_down  # a run that never reached `down` may have left some in the root
  realnode_images
  start_coredns
  start_kubelet
  local services="no kube-proxy (node 0's routes the Services): its pods reach no ClusterIP"
  if [ "$REAL_NODE_INDEX" = 0 ]; then
    start_kube_proxy
    services="kube-proxy (nftables), the API server at $REAL_NODE_IP:$APISERVER_PORT and $(realnode_kubernetes_ip):443"
  fi
  realnode_gpus
  log "real node $REAL_NODE up: kubelet on $REAL_NODE_IP:$KUBELET_PORT, CoreDNS on $REAL_NODE_IP:53, $services"
}

realnode_drain() {  # delete the node's pods through the API and wait for kubelet to stop them
  running kube-apiserver && running kubelet || return 0
  local pods
  pods=$("$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" get pods -A --field-selector "spec.nodeName=$REAL_NODE" \
    -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}' 2>/dev/null) || return 0
  [ -n "$pods" ] || return 0
  local deadline=$(( $(date +%s) + 30 ))
  while IFS=/ read -r ns name; do
    "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" delete pod -n "$ns" "$name" --grace-period=1 --wait=false \
      >/dev/null 2>&1 || true
  done <<<"$pods"
  while [ "$(date +%s)" -lt "$deadline" ]; do
    [ -z "$("$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" get pods -A --field-selector "spec.nodeName=$REAL_NODE" \
      -o name 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  log "some pods on $REAL_NODE were not stopped by kubelet in 30s; removing them through containerd"
}

realnode_containers_down() {  # whatever kubelet left in containerd: tasks killed, containers removed
  [ -S "$CONTAINERD_SOCK" ] && running containerd || return 0
  local id
  for id in $(ctr -a "$CONTAINERD_SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr -a "$CONTAINERD_SOCK" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
  done
  for id in $(ctr -a "$CONTAINERD_SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr -a "$CONTAINERD_SOCK" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true
  done
  for id in $(ctr -a "$CONTAINERD_SOCK" -n k8s.io containers ls -q 2>/dev/null); do
    ctr -a "$CONTAINERD_SOCK" -n k8s.io containers delete "$id" >/dev/null 2>&1 || true
  done
}

realnode_kill_shims() {  # containerd's runc shims outlive it by design; ours name our socket
  local pid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
}

realnode_unmount() {  # every mount under the node's directory, the deepest first
  local target
  while read -r target; do
    umount -l "$target" 2>/dev/null || true
  done < <(findmnt -rn -o TARGET | awk -v d="$REAL_NODE_DIR/" 'index($0, d) == 1' | sort -r)
}

realnode_restore_host() {  # put back what realnode_record_host saved: this node's own, then
  # the host-wide if it is the last node up
  local saved="$REAL_NODE_DIR/host.saved" kind key value h dir
  if realnode_names_taken; then
    log "$REAL_NODE is another run's now: its bridge, cgroups and tables are left to it"
    rm -f "$saved"
    return 0
  fi
  if ip link show "$REAL_NODE_BRIDGE" >/dev/null 2>&1; then ip link delete "$REAL_NODE_BRIDGE"; fi
  for h in $(cgroup_hierarchies); do
    dir="$h/$REAL_NODE_CGROUP"
    [ -d "$dir" ] || continue
    find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  [ -f "$saved" ] || return 0
  while read -r kind key value; do
    case $kind in
      nft) nft list table "$key" "$value" >/dev/null 2>&1 && nft delete table "$key" "$value" ;;
    esac
  done < "$saved"
  realnode_host_locked realnode_release_host
  rm -f "$saved"
}

realnode_down() {
  [ -d "$REAL_NODE_DIR" ] || return 0
  realnode_drain
  stop_component kube-proxy
  stop_component kubelet
  realnode_containers_down
  stop_component coredns
  stop_component containerd
  realnode_kill_shims
  realnode_unmount
  realnode_restore_host
}

realnode_leftovers() {  # what this run's real node may leave on the host; prints nothing when
  # clean. The names a node of this index uses (bridge, cgroups, tables) are another run's while
  # that run holds the host as this node: they are not looked at then.
  local h holder="$REAL_NODES_HOST/holders/$REAL_NODE"
  findmnt -rn -o TARGET | awk -v d="$REAL_NODE_DIR/" 'index($0, d) == 1 { print "mount " $0 }'
  pgrep -af "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" | sed 's/^/process /' || true
  if realnode_names_taken; then return 0; fi
  if ip link show "$REAL_NODE_BRIDGE" >/dev/null 2>&1; then echo "link $REAL_NODE_BRIDGE"; fi
  for h in $(cgroup_hierarchies); do
    if [ -d "$h/$REAL_NODE_CGROUP" ]; then echo "cgroup $h/$REAL_NODE_CGROUP"; fi
  done
  local table
  for table in "${REAL_NODE_NFT_TABLES[@]}"; do
    if nft list table $table >/dev/null 2>&1; then echo "nftables table $table"; fi
  done
  # the host-wide record: this node no longer holds it, and the last node down removed it
  if [ -f "$holder" ]; then echo "holder $holder"; fi
  if [ -f "$REAL_NODES_HOST/host.saved" ] && [ -z "$(ls -A "$REAL_NODES_HOST/holders" 2>/dev/null)" ]; then
    echo "host record $REAL_NODES_HOST/host.saved, held by no node"
  fi
}
