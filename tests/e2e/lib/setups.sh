# What runs on the cluster in each setup, and the suites run against it.
# Sourced by tests/e2e/run.

snapshot_crds() {
  log "installing external-snapshotter's CRDs ($E2E_CSI_SRC/external-snapshotter)"
  kubectl apply -k "$E2E_CSI_SRC/external-snapshotter/client/config/crd/" >/dev/null
  kubectl wait --for condition=established --timeout=60s crd --all >/dev/null
}

# The manifests of a setup, with the image this run imported.
setup_manifests() {
  case "$1" in
    volplane) kubectl kustomize "$here/volplane" ;;
    beside-hostpath) kubectl kustomize "$here/beside-hostpath" ;;
    hostpath) hostpath_baseline ;;
  esac | sed "s|image: ghcr.io/volplane/volplane:.*|image: $volplane_image|"
}

setup_install() {
  snapshot_crds
  echo "$1" > "$work/setup"
  log "installing $1 ($work/setup.yaml)"
  kubectl apply -f "$work/setup.yaml" >/dev/null
  local driver
  case "$1" in
    volplane)
      driver=volplane.csi.io
      kubectl -n volplane rollout status deploy/volplane-controller --timeout=180s >&2
      kubectl -n volplane rollout status ds/volplane-node --timeout=180s >&2 ;;
    beside-hostpath)
      driver=hostpath.csi.k8s.io
      kubectl -n volplane-hostpath rollout status statefulset/csi-hostpathplugin --timeout=180s >&2 ;;
    hostpath)
      driver=hostpath.csi.k8s.io
      kubectl -n kube-system rollout status deploy/snapshot-controller --timeout=180s >&2
      kubectl -n default rollout status statefulset/csi-hostpathplugin --timeout=180s >&2 ;;
  esac
  wait_for "$driver registered on $node (CSINode)" 120 \
    sh -c "'$bin/kubectl' --kubeconfig '$work/pki/admin.kubeconfig' get csinode $node -o jsonpath='{.spec.drivers[*].name}' | grep -qw $driver"
  log "$1 is installed: $driver registered on $node"
}

# The baseline: csi-driver-host-path's deploy/kubernetes-1.34 as its
# deploy script installs it — each sidecar's RBAC from that sidecar's own
# repository, external-snapshotter's snapshot-controller — without the
# health monitor, which the suites do not judge.
hostpath_baseline() {
  local src=$E2E_CSI_SRC k=$work/hostpath-baseline
  rm -rf "$k" && mkdir -p "$k"
  cp "$src/external-provisioner/deploy/kubernetes/rbac.yaml" "$k/rbac-provisioner.yaml"
  cp "$src/external-attacher/deploy/kubernetes/rbac.yaml" "$k/rbac-attacher.yaml"
  cp "$src/external-resizer/deploy/kubernetes/rbac.yaml" "$k/rbac-resizer.yaml"
  cp "$src/external-snapshotter/deploy/kubernetes/csi-snapshotter/rbac-csi-snapshotter.yaml" "$k/rbac-snapshotter.yaml"
  cp "$src/external-snapshotter/deploy/kubernetes/snapshot-controller/"{rbac-snapshot-controller,setup-snapshot-controller}.yaml "$k/"
  cp "$src/csi-driver-host-path/deploy/kubernetes-1.34/hostpath/"{csi-hostpath-driverinfo,csi-hostpath-plugin}.yaml "$k/"
  cat > "$k/kustomization.yaml" <<EOF
resources: [rbac-provisioner.yaml, rbac-attacher.yaml, rbac-resizer.yaml, rbac-snapshotter.yaml,
  rbac-snapshot-controller.yaml, setup-snapshot-controller.yaml, csi-hostpath-driverinfo.yaml, csi-hostpath-plugin.yaml]
patches:
  - patch: |
      apiVersion: apps/v1
      kind: StatefulSet
      metadata: {name: csi-hostpathplugin, namespace: default}
      spec:
        template:
          spec:
            containers:
              - {name: csi-external-health-monitor-controller, \$patch: delete}
EOF
  kubectl kustomize "$k"
}

# Deletes what the suites and the setup made, so that the driver can take
# its volumes away before it goes.
setup_remove() {
  [ -f "$work/setup.yaml" ] || return 0
  kubectl delete namespace -l e2e-framework --wait=false >/dev/null 2>&1 || true
  local i
  for i in $(seq 1 120); do
    [ -z "$(kubectl get pv -o name 2>/dev/null)" ] && break
    sleep 1
  done
  kubectl delete -f "$work/setup.yaml" --wait=true --timeout=120s >/dev/null 2>&1 || true
  rm -f "$work/setup.yaml"
}

# Runs the External Storage suites with one test driver file. A focused
# run's results go beside the full run's (<driver>-focused), not over them.
run_suites() {
  local setup=$1 file=$2 name out
  name=$(basename "$file" .yaml)
  out=$work/results/$setup/$name${focus:+-focused}
  rm -rf "$out" && mkdir -p "$out"
  cp "$file" "$out/driver.yaml"
  # CAP_SYS_RESOURCE is capability 24.
  if (( ((0x$(awk '/^CapEff/ {print $2}' /proc/self/status) >> 24) & 1) == 0 )) &&
    grep -q 'onlineExpansion: true' "$out/driver.yaml"; then
    log "no CAP_SYS_RESOURCE here: ext4 cannot grow mounted, so onlineExpansion is off"
    sed -i 's/onlineExpansion: true/onlineExpansion: false/' "$out/driver.yaml"
  fi
  local driver_name
  driver_name=$(sed -n 's/^  Name: //p' "$out/driver.yaml" | head -1)
  log "running the External Storage suites for $name (results in $out)"
  local args=(
    -kubeconfig "$work/pki/admin.kubeconfig"
    -kubectl-path "$bin/kubectl"
    -storage.testdriver "$out/driver.yaml"
    -repo-root "$(dirname "$file")"
    -report-dir "$out"
  )
  local suites=(
    --focus "External.Storage.*${driver_name//./\\.}${focus:+.*($focus)}"
    --skip "$skip"
    --junit-report junit.xml
    --no-color
    --timeout 6h
  )
  local rc=0
  if [ -x "$bin/ginkgo" ]; then
    # The CLI runs the specs in parallel processes and merges their reports.
    (cd "$out" && "$bin/ginkgo" -p -procs "${E2E_PROCS:-3}" --output-dir "$out" "${suites[@]}" "$bin/e2e.test" -- "${args[@]}") \
      > "$out/e2e.log" 2>&1 || rc=$?
  else
    (cd "$out" && "$bin/e2e.test" "${args[@]}" "${suites[@]/#--/-ginkgo.}") > "$out/e2e.log" 2>&1 || rc=$?
  fi
  python3 "$here/summary.py" "$out/junit.xml" | tee "$out/summary.txt" >&2
  return $rc
}

summarize() {
  local f
  for f in "$work/results/$1"/*/summary.txt; do
    [ -f "$f" ] || continue
    log "$(basename "$(dirname "$f")"): $(awk '$1 == "all" {print $2 " passed, " $3 " failed, " $4 " skipped"}' "$f") ($f)"
  done
}
