# The one-node cluster of tests/e2e/run: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, containerd, kubelet and
# kube-proxy as processes on this machine, and everything they leave
# taken away again. Sourced by tests/e2e/run.

node=volplane-e2e
host_ip=''
pod_cidr=10.244.0.0/24
service_cidr=10.96.0.0/16
api_ip=10.96.0.1
bridge=vpe2e0
run_dir=/run/volplane-e2e
kubelet_dir=/var/lib/kubelet
etcd_port=23790

# The ports the cluster's parts listen on: preflight refuses only when one
# is taken (another control plane on other ports may run beside this one).
ports=(6443 "$etcd_port" 23800 10248 10249 10250 10256 10257 10259)

# Kernel settings the parts change — the kubelet vm.overcommit_memory,
# kernel.panic and kernel.panic_on_oops; kube-proxy (configured here not
# to, but an older one may) route_localnet and the conntrack table and
# timeouts; this script ip_forward — read before the cluster starts and
# put back when it goes (saved in $work/kernel-settings).
kernel_settings=(
  net/ipv4/ip_forward
  vm/overcommit_memory
  kernel/panic
  kernel/panic_on_oops
  net/ipv4/conf/all/route_localnet
  net/netfilter/nf_conntrack_max
  net/netfilter/nf_conntrack_tcp_timeout_established
  net/netfilter/nf_conntrack_tcp_timeout_close_wait
)

# Directories the parts make outside the run's own (the kubelet's
# container log links, the CNI plugins' result cache, containerd's and the
# network namespaces' run directories): those absent before the cluster
# starts are noted in $work/made-dirs and removed when it goes.
outside_dirs=(/var/log/pods /var/log/containers /var/lib/cni/results /var/lib/cni /run/containerd /run/netns)

log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

kubectl() { "$bin/kubectl" --kubeconfig "$work/pki/admin.kubeconfig" "$@"; }

# True when a kubelet runs in $kubelet_dir (named so, or by default).
kubelet_in_dir() {
  local pid args
  for pid in $(pgrep -x kubelet); do
    args="$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) "
    case "$args" in
      *"--root-dir $kubelet_dir "* | *"--root-dir=$kubelet_dir "*) return 0 ;;
      *--root-dir*) ;;
      *) [ "$kubelet_dir" != /var/lib/kubelet ] || return 0 ;;
    esac
  done
  return 1
}

# True when a part listens on one of this cluster's ports.
ports_taken() {
  local p
  for p in "${ports[@]}"; do
    [ -z "$(ss -Hltn "sport = :$p" 2>/dev/null)" ] || return 0
  done
  return 1
}

# Refuses to start on a machine it could damage or cannot run on.
preflight() {
  [ "$(id -u)" = 0 ] || die "run as root: the cluster mounts, makes loop devices and runs containers"
  local missing=()
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl e2e.test agnhost; do
    [ -x "$bin/$b" ] || missing+=("$bin/$b")
  done
  for c in etcd containerd ctr runc unshare losetup busybox debootstrap iptables conntrack ip ss gcc python3 openssl strip cargo; do
    command -v "$c" >/dev/null || missing+=("$c (PATH)")
  done
  [ -x /usr/lib/cni/bridge ] || missing+=("/usr/lib/cni/bridge (containernetworking-plugins)")
  [ -n "${E2E_CSI_SRC:-}" ] && [ -d "$E2E_CSI_SRC/external-snapshotter/client/config/crd" ] ||
    missing+=("E2E_CSI_SRC/external-snapshotter: a checkout of kubernetes-csi/external-snapshotter")
  case "$setup" in
    beside-hostpath) [ -x "$bin/hostpathplugin" ] || missing+=("$bin/hostpathplugin") ;;
    hostpath)
      for b in hostpathplugin csi-provisioner csi-attacher csi-resizer csi-snapshotter snapshot-controller \
        csi-node-driver-registrar livenessprobe; do
        [ -x "$bin/$b" ] || missing+=("$bin/$b")
      done
      for r in external-provisioner external-attacher external-resizer csi-driver-host-path; do
        [ -d "$E2E_CSI_SRC/$r/deploy" ] || missing+=("E2E_CSI_SRC/$r: a checkout of kubernetes-csi/$r")
      done ;;
  esac
  [ ${#missing[@]} -eq 0 ] || die "missing: ${missing[*]}"
  if pgrep -x kube-proxy >/dev/null; then
    die "a kube-proxy already runs here: its iptables chains are the ones this cluster's would replace; take that cluster down first"
  fi
  ! kubelet_in_dir || die "a kubelet already runs in $kubelet_dir; take that cluster down first (tests/e2e/run --down)"
  local p taken=()
  for p in "${ports[@]}"; do
    [ -z "$(ss -Hltn "sport = :$p" 2>/dev/null)" ] || taken+=("$p")
  done
  [ ${#taken[@]} -eq 0 ] ||
    die "port(s) ${taken[*]} are taken: another cluster (or a run that was killed: tests/e2e/run --down) listens where this one's parts must"
  if [ -e "$kubelet_dir" ] && [ -n "$(ls -A "$kubelet_dir" 2>/dev/null)" ]; then
    die "$kubelet_dir is not empty: it belongs to another kubelet (or a run that was killed: tests/e2e/run --down)"
  fi
  host_ip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
  [ -n "$host_ip" ] || die "no IPv4 address with a route: the pods reach the API server through it"
  mkdir -p "$work" "$cache"
}

# A private CA and the certificates each part presents.
pki() {
  local p=$work/pki
  mkdir -p "$p"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=volplane-e2e-ca \
    -keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
  cert() { # name CN O [SAN]
    local ext=$p/$1.ext
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' > "$ext"
    [ -z "${4:-}" ] || echo "subjectAltName=$4" >> "$ext"
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$2${3:+/O=$3}" -keyout "$p/$1.key" -out "$p/$1.csr" 2>/dev/null
    openssl x509 -req -in "$p/$1.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 2 \
      -extfile "$ext" -out "$p/$1.crt" 2>/dev/null
  }
  cert apiserver kube-apiserver '' \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$api_ip,IP:$host_ip"
  cert admin admin system:masters
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert kubelet "system:node:$node" system:nodes "DNS:$node,IP:$host_ip,IP:127.0.0.1"
  cert controller-manager system:kube-controller-manager ''
  cert scheduler system:kube-scheduler ''
  cert proxy system:kube-proxy ''
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
  for u in admin kubelet controller-manager scheduler proxy; do
    cat > "$p/$u.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: "https://$host_ip:6443", certificate-authority: $p/ca.crt}
users:
- name: $u
  user: {client-certificate: $p/$u.crt, client-key: $p/$u.key}
contexts:
- name: e2e
  context: {cluster: e2e, user: $u}
current-context: e2e
EOF
  done
}

# Starts one part in a session of its own; its output goes to logs/NAME.log.
start() {
  local name=$1; shift
  mkdir -p "$work/logs" "$work/pids"
  setsid "$@" > "$work/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$work/pids/$name"
}

# Waits up to $2 seconds for command $3… to succeed, naming $1 on failure.
wait_for() {
  local what=$1 secs=$2; shift 2
  local i
  for ((i = 0; i < secs; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  die "$what did not come within ${secs}s (logs: $work/logs)"
}

containerd_config() {
  mkdir -p "$work/cni/net.d" "$run_dir"
  cat > "$work/cni/net.d/10-volplane-e2e.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "volplane-e2e", "plugins": [
  {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$work/cni/ipam", "ranges": [[{"subnet": "$pod_cidr"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
  # restrict_oom_score_adj: a machine whose root lacks CAP_SYS_RESOURCE
  # cannot lower a container's OOM score.
  cat > "$work/containerd.toml" <<EOF
version = 2
root = "$work/containerd"
state = "$run_dir/containerd"
[grpc]
  address = "$run_dir/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10.2"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$work/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
EOF
}

kubelet_config() {
  # failCgroupV1: this kind of machine has cgroup v1. The eviction
  # thresholds are low: the suites fill the disk with volume images.
  cat > "$work/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $work/pki/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$run_dir/containerd.sock
clusterDomain: cluster.local
tlsCertFile: $work/pki/kubelet.crt
tlsPrivateKeyFile: $work/pki/kubelet.key
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
resolvConf: /etc/resolv.conf
EOF
  cat > "$work/proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $pod_cidr
hostnameOverride: $node
clientConnection: {kubeconfig: $work/pki/proxy.kubeconfig}
# The host's conntrack table and timeouts, and route_localnet, stay as
# they are (0 and false: kube-proxy leaves them).
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF
}

# The kubelet's and the driver's directories are shared mounts of their
# own, so that Bidirectional mount propagation reaches the host (the
# machine's root is private) and taking them down undoes it.
shared_dir() {
  mkdir -p "$1"
  mount --bind "$1" "$1"
  mount --make-rshared "$1"
  echo "$1" >> "$work/shared-mounts"
}

cluster_up() {
  log "the cluster: node $node at $host_ip, state in $work"
  pki
  containerd_config
  kubelet_config
  [ -f "$work/kernel-settings" ] || save_kernel_settings "$work/kernel-settings"
  [ -f "$work/made-dirs" ] || note_absent_dirs "$work/made-dirs"
  echo 1 > /proc/sys/net/ipv4/ip_forward
  shared_dir "$kubelet_dir"
  shared_dir /var/lib/volplane
  start etcd etcd --name e2e --data-dir "$work/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
    --initial-cluster e2e=http://127.0.0.1:23800
  local p=$work/pki
  start kube-apiserver "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --advertise-address "$host_ip" --secure-port 6443 --allow-privileged \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --client-ca-file "$p/ca.crt" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
    --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" --kubelet-client-key "$p/apiserver-kubelet-client.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --service-cluster-ip-range "$service_cidr" --kubelet-preferred-address-types InternalIP,Hostname
  wait_for "kube-apiserver" 120 kubectl get --raw /readyz
  start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$p/controller-manager.kubeconfig" \
    --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
    --controllers '*,bootstrapsigner,tokencleaner'
  start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$p/scheduler.kubeconfig" --leader-elect=false
  # containerd, and so every pod's containers, in a PID namespace of their
  # own whose init (a bash that reaps) is in a mount namespace that shares
  # this one's mounts: the suites' hostexec pods enter "the host's" mount
  # namespace through /proc/1/ns/mnt, and a VM's real init may be one root
  # cannot enter (its namespaces unreadable).
  start containerd unshare --pid --fork --mount-proc --propagation unchanged -- \
    bash -c 'containerd "$@" & wait $!' containerd --config "$work/containerd.toml"
  wait_for "containerd" 60 test -S "$run_dir/containerd.sock"
  start kubelet "$bin/kubelet" --config "$work/kubelet.yaml" --kubeconfig "$p/kubelet.kubeconfig" \
    --hostname-override "$node" --node-ip "$host_ip" --root-dir "$kubelet_dir"
  start kube-proxy "$bin/kube-proxy" --config "$work/proxy.yaml"
  wait_for "node $node Ready" 180 kubectl wait --for=condition=Ready "node/$node" --timeout=1s
  wait_for "the default service account" 60 kubectl -n default get serviceaccount default
  log "the cluster is up ($("$bin/kubectl" version --client -o json | sed -n 's/.*"gitVersion": "\(.*\)".*/\1/p' | head -1))"
}

# Stops what cluster_up started and takes away what it and the suites left:
# mounts beneath the kubelet's and the driver's directories, loop devices
# backed by the driver's images, containers, iptables chains, the bridge.
teardown() {
  local rc=$?
  # Everything below is tried, whatever fails.
  set +e +o pipefail
  if $keep; then
    log "kept: the cluster runs on (KUBECONFIG=$work/pki/admin.kubeconfig); take it down with tests/e2e/run --down"
    return $rc
  fi
  log "taking the cluster down"
  if [ -f "$work/pids/kube-apiserver" ]; then
    setup_remove 2>/dev/null || true
  fi
  local n
  for n in kube-proxy kube-scheduler kube-controller-manager kubelet kube-apiserver etcd; do
    stop_part "$n"
  done
  # The pods' containers outlive the kubelet: their shims go with containerd.
  pkill -9 -f "containerd-shim-runc-v2 -namespace k8s.io -id .* -address $run_dir/containerd.sock" 2>/dev/null || true
  stop_part containerd
  unmount_beneath "$kubelet_dir"
  unmount_beneath /var/lib/volplane
  unmount_beneath /var/lib/csi-hostpath-data
  unmount_beneath "$run_dir"
  unmount_beneath "$work"
  detach_loops
  clean_iptables
  ip link del "$bridge" 2>/dev/null || true
  restore_kernel_settings "$work/kernel-settings"
  remove_made_dirs "$work/made-dirs"
  rm -f "$work/kernel-settings" "$work/made-dirs"
  rm -rf "$kubelet_dir" /var/lib/volplane /var/lib/csi-hostpath-data "$run_dir" "$work/etcd" "$work/containerd" "$work/cni" "$work/pids" "$work/shared-mounts"
  log "the cluster is down"
  return $rc
}

stop_part() {
  local f=$work/pids/$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  kill -TERM -- "-$pid" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$f"
}

# Unmounts every mount at or beneath $1, deepest first.
unmount_beneath() {
  local m
  for _ in 1 2 3; do
    m=$(awk -v root="$1" '$5 == root || index($5, root "/") == 1 {print $5}' /proc/self/mountinfo | sort -r)
    [ -n "$m" ] || return 0
    echo "$m" | while read -r t; do umount -l "$t" 2>/dev/null || true; done
  done
}

# Detaches the loop devices backed by the drivers' volume images, as the
# kernel names them: by the path the driver's container opened them at
# (/var/lib/volplane/… for volplane, /csi-data-dir/… for hostpath).
detach_loops() {
  local l
  for l in /sys/block/loop*/loop/backing_file; do
    [ -f "$l" ] || continue
    case "$(cat "$l")" in
      /var/lib/volplane/*|/csi-data-dir/*) losetup -d "/dev/$(basename "$(dirname "$(dirname "$l")")")" 2>/dev/null || true ;;
    esac
  done
}

# The chains kube-proxy, the kubelet (KUBE-…) and the CNI plugins (CNI-…)
# made, and the rules that lead to them, in every table they use.
clean_iptables() {
  local t chain
  for t in nat filter mangle; do
    iptables -t $t -S 2>/dev/null | grep -E '^-A .* -j (KUBE|CNI)-' | sed 's/^-A/-D/' | while read -r r; do
      eval "iptables -t $t $r" 2>/dev/null
    done
    for chain in $(iptables -t $t -S 2>/dev/null | sed -n 's/^-N \(\(KUBE\|CNI\)-[^ ]*\)$/\1/p'); do
      iptables -t $t -F "$chain" 2>/dev/null
    done
    for chain in $(iptables -t $t -S 2>/dev/null | sed -n 's/^-N \(\(KUBE\|CNI\)-[^ ]*\)$/\1/p'); do
      iptables -t $t -X "$chain" 2>/dev/null
    done
  done
}

# Writes each of kernel_settings that this kernel has, with its value now,
# to $1 ("path value" lines).
save_kernel_settings() {
  local k
  : > "$1"
  for k in "${kernel_settings[@]}"; do
    [ -r "/proc/sys/$k" ] && printf '%s %s\n' "$k" "$(cat "/proc/sys/$k")" >> "$1"
  done
  return 0
}

# Puts back every setting $1 recorded that differs now, reads it back, and
# names any it could not put back; false then.
restore_kernel_settings() {
  local k v now ok=0
  [ -f "$1" ] || return 0
  while read -r k v; do
    now=$(cat "/proc/sys/$k" 2>/dev/null)
    [ "$now" != "$v" ] || continue
    echo "$v" > "/proc/sys/$k" 2>/dev/null
    now=$(cat "/proc/sys/$k" 2>/dev/null)
    if [ "$now" = "$v" ]; then
      log "put /proc/sys/$k back to $v"
    else
      log "could not put /proc/sys/$k back to $v (it is ${now:-unreadable})"
      ok=1
    fi
  done < "$1"
  return $ok
}

# Writes to $1 those of outside_dirs that do not exist now.
note_absent_dirs() {
  local d
  : > "$1"
  for d in "${outside_dirs[@]}"; do
    [ -e "$d" ] || echo "$d" >> "$1"
  done
  return 0
}

# Removes the directories $1 noted, with whatever is mounted beneath them
# (a network namespace is a mount).
remove_made_dirs() {
  local d
  [ -f "$1" ] || return 0
  while read -r d; do
    [ -n "$d" ] || continue
    unmount_beneath "$d"
    rm -rf "$d"
  done < "$1"
}
