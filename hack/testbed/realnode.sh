# The real node of the test bed (SPEC §10), sourced by hack/controlplane.sh when
# TORCHRUN_REAL_NODE=1: containerd (its own config, socket, root and state under the run dir),
# runc, bridge CNI, a kubelet registered as `realnode-0` with certificates from the test bed's CA,
# CoreDNS serving cluster.local from the API server, and fake `nvidia.com/gpu` capacity patched on
# the node. Pods run there for real: real images (imported with `ctr`, no registry), real volumes,
# real processes in real namespaces and cgroups.
#
# The node is tainted `torchrun.ai/real-node=true:NoSchedule` and labelled
# `torchrun.ai/real-node=true`, so only pods that ask for it land there (a queue pins itself with
# that nodeSelector and toleration); every other pod stays on kwok's fake nodes.
#
# It changes the host only in ways `realnode_down` undoes, and it records what it has to undo
# before it changes anything: the sysctls kubelet sets (kubelet's protectKernelDefaults would refuse
# to start on a host whose values differ, so kubelet sets them and `down` puts the saved ones back),
# the bridge, the cgroups under /torchrun-realnode, the pods' network namespaces and mounts, and the
# host directories that kubelet and containerd create at fixed paths. One real node per machine:
# the bridge and the cgroup root are host-wide.
#
# Requires: root, cgroup v1 or v2 with cgroupfs, the binaries of hack/testbed/build-realnode.sh and
# the images of hack/testbed/build-node-images.sh. Settings: TORCHRUN_REAL_NODE_SUBNET (the pods'
# /24, default 10.199.0.0/24; the node's address is its .1), TORCHRUN_REAL_NODE_GPUS (fake
# nvidia.com/gpu capacity, default 2).

REAL_NODE=realnode-0
REAL_NODE_DIR="$RUN_DIR/realnode"
REAL_NODE_SUBNET=${TORCHRUN_REAL_NODE_SUBNET:-10.199.0.0/24}
REAL_NODE_IP="${REAL_NODE_SUBNET%.*}.1"
REAL_NODE_GPUS=${TORCHRUN_REAL_NODE_GPUS:-2}
REAL_NODE_BRIDGE=trn-realnode0
REAL_NODE_CGROUP=torchrun-realnode
REAL_NODE_TAINT=torchrun.ai/real-node
CONTAINERD_SOCK="$REAL_NODE_DIR/containerd/containerd.sock"
# containerd's root (image content and unpacked snapshots) outlives a run, like the other caches, so
# a warm `up` imports nothing; its state (tasks, mounts, sockets) is the run's
CONTAINERD_ROOT="$CACHE_DIR/realnode-containerd"
# the sysctls kubelet sets (kubelet's setupKernelTunables) and the bridge plugin may set
REAL_NODE_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward)
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

realnode_record_host() {  # what `down` must restore, written once, before the first change
  mkdir -p "$REAL_NODE_DIR"
  [ -f "$REAL_NODE_DIR/host.saved" ] && return 0
  local key path
  {
    for key in "${REAL_NODE_SYSCTLS[@]}"; do echo "sysctl $key $(sysctl -n "$key")"; done
    for path in "${REAL_NODE_HOST_PATHS[@]}"; do [ -e "$path" ] || echo "absent $path"; done
    for path in /run/netns/*; do [ -e "$path" ] && echo "netns $path"; done
  } > "$REAL_NODE_DIR/host.saved.tmp"
  mv "$REAL_NODE_DIR/host.saved.tmp" "$REAL_NODE_DIR/host.saved"
}

realnode_network() {  # the pods' bridge, with the node's address on it, and the CNI config
  if ! ip link show "$REAL_NODE_BRIDGE" >/dev/null 2>&1; then
    ip link add "$REAL_NODE_BRIDGE" type bridge
    ip addr add "$REAL_NODE_IP/${REAL_NODE_SUBNET#*/}" dev "$REAL_NODE_BRIDGE"
  fi
  ip link set "$REAL_NODE_BRIDGE" up
  mkdir -p "$REAL_NODE_DIR/cni/net.d" "$REAL_NODE_DIR/cni/ipam"
  # isGateway false: the bridge already has the node's address (the pods' DNS server is on-link),
  # and the bridge plugin would turn on the host's ip_forward for a gateway; no masquerade rules
  cat > "$REAL_NODE_DIR/cni/net.d/10-torchrun.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "torchrun-realnode",
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

realnode_cgroups() {  # the kubelet's cgroupRoot, in every hierarchy (kubelet requires it to exist)
  local h dir
  for h in $(cgroup_hierarchies); do
    dir="$h/$REAL_NODE_CGROUP"
    mkdir -p "$dir"
    if [ -f "$h/cpuset.cpus" ] && [ -f "$dir/cpuset.cpus" ] && [ -z "$(cat "$dir/cpuset.cpus")" ]; then
      cat "$h/cpuset.cpus" > "$dir/cpuset.cpus"
      cat "$h/cpuset.mems" > "$dir/cpuset.mems"
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
  wait_for containerd 60 ctr -a "$CONTAINERD_SOCK" version
}

realnode_images() {  # the pause, controller and training images, imported unless already there;
  # older builds of ours are removed (each controller change is a new image of ~500 MB)
  if ! ctr -a "$CONTAINERD_SOCK" -n k8s.io images ls -q | grep -qxF "$PAUSE_IMAGE"; then
    ctr -a "$CONTAINERD_SOCK" -n k8s.io images import "$PAUSE_ARCHIVE" >/dev/null
  fi
  # the names of what it imported (the checkout may have changed since realnode_binaries read them)
  local out line name
  out=$("$HACK_DIR/testbed/build-node-images.sh" import "$CONTAINERD_SOCK") || return 1
  while IFS= read -r line; do
    case $line in CONTROLLER_IMAGE=* | TRAIN_IMAGE=*) export "${line?}" ;; esac
  done <<<"$out"
  for name in $(ctr -a "$CONTAINERD_SOCK" -n k8s.io images ls -q | grep '^localhost/torchrun-' \
      | grep -vxF -e "$PAUSE_IMAGE" -e "$CONTROLLER_IMAGE" -e "$TRAIN_IMAGE"); do
    ctr -a "$CONTAINERD_SOCK" -n k8s.io images rm --sync "$name" >/dev/null
  done
  printf 'PAUSE_IMAGE=%s\nCONTROLLER_IMAGE=%s\nTRAIN_IMAGE=%s\n' "$PAUSE_IMAGE" "$CONTROLLER_IMAGE" \
    "$TRAIN_IMAGE" > "$REAL_NODE_DIR/images.env"
}

realnode_ports() {
  if [ ! -f "$REAL_NODE_DIR/ports.env" ]; then
    read -r a b c < <(free_ports 3)
    printf 'KUBELET_PORT=%s\nKUBELET_HEALTHZ_PORT=%s\nCOREDNS_READY_PORT=%s\n' "$a" "$b" "$c" \
      > "$REAL_NODE_DIR/ports.env"
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

realnode_gpus() {  # fake nvidia.com/gpu capacity (kubelet keeps extended resources it does not manage)
  "$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" patch node "$REAL_NODE" --subresource=status --type=json \
    -p "[{\"op\":\"add\",\"path\":\"/status/capacity/nvidia.com~1gpu\",\"value\":\"$REAL_NODE_GPUS\"}]" >/dev/null
  wait_for "$REAL_NODE's allocatable nvidia.com/gpu" 60 realnode_has_gpus
}

realnode_has_gpus() {
  [ "$("$KUBECTL" --kubeconfig "$KUBECONFIG_PATH" get node "$REAL_NODE" \
    -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')" = "$REAL_NODE_GPUS" ]
}

realnode_up() {
  [ "$(id -u)" -eq 0 ] || { log "the real node needs root"; return 1; }
  realnode_binaries || { log "the real node's binaries or images did not build"; return 1; }
  if [ ! -f "$REAL_NODE_DIR/host.saved" ] && ip link show "$REAL_NODE_BRIDGE" >/dev/null 2>&1; then
    log "another real node runs on this machine (the bridge $REAL_NODE_BRIDGE exists): one per machine;"
    log "stop it with its own 'hack/controlplane.sh down' (TORCHRUN_RUN_DIR of that run) first"
    return 1
  fi
  realnode_record_host
  realnode_ports
  cert kubelet-client "system:node:$REAL_NODE" system:nodes
  cert kubelet-serving "$REAL_NODE" "" "DNS:$REAL_NODE,IP:$REAL_NODE_IP"
  cert coredns system:coredns
  kubeconfig kubelet kubelet-client
  kubeconfig coredns coredns
  realnode_rbac
  realnode_network
  realnode_cgroups
  containerd_config
  start_containerd
  realnode_containers_down  # a run that never reached `down` may have left some in the root
  realnode_images
  start_coredns
  start_kubelet
  realnode_gpus
  log "real node $REAL_NODE up: kubelet on $REAL_NODE_IP:$KUBELET_PORT, CoreDNS on $REAL_NODE_IP:53"
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

realnode_restore_host() {  # put back what realnode_record_host saved
  local saved="$REAL_NODE_DIR/host.saved" kind key value ns h dir
  # network namespaces the CRI made (those that existed before `up` stay)
  for ns in /run/netns/cni-*; do
    [ -e "$ns" ] || continue
    grep -qxF "netns $ns" "$saved" 2>/dev/null && continue
    umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null || true
    rm -f "$ns"
  done
  if ip link show "$REAL_NODE_BRIDGE" >/dev/null 2>&1; then ip link delete "$REAL_NODE_BRIDGE"; fi
  for h in $(cgroup_hierarchies); do
    dir="$h/$REAL_NODE_CGROUP"
    [ -d "$dir" ] || continue
    find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  [ -f "$saved" ] || return 0
  while read -r kind key value; do
    case $kind in
      sysctl) [ "$(sysctl -n "$key")" = "$value" ] || sysctl -qw "$key=$value" ;;
      absent) [ -e "$key" ] && rm -rf --one-file-system "$key" ;;
    esac
  done < "$saved"
  rm -f "$saved"
}

realnode_down() {
  [ -d "$REAL_NODE_DIR" ] || return 0
  realnode_drain
  stop_component kubelet
  realnode_containers_down
  stop_component coredns
  stop_component containerd
  realnode_kill_shims
  realnode_unmount
  realnode_restore_host
}

realnode_leftovers() {  # what the real node may leave on the host; prints nothing when clean
  local h
  findmnt -rn -o TARGET | awk -v d="$REAL_NODE_DIR/" 'index($0, d) == 1 { print "mount " $0 }'
  if ip link show "$REAL_NODE_BRIDGE" >/dev/null 2>&1; then echo "link $REAL_NODE_BRIDGE"; fi
  for h in $(cgroup_hierarchies); do
    if [ -d "$h/$REAL_NODE_CGROUP" ]; then echo "cgroup $h/$REAL_NODE_CGROUP"; fi
  done
  pgrep -af "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" | sed 's/^/process /' || true
}
