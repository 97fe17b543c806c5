# The images the cluster runs, made on this machine (no registry is
# reachable) and imported into the cluster's containerd under the names the
# suites and the manifests ask for. Sourced by tests/e2e/run.

volplane_image=volplane.local/volplane:e2e

ctr_() { ctr --address "$run_dir/containerd.sock" -n k8s.io "$@"; }

# A root with busybox and each of its applets: the sidecars' stand-ins
# need no more.
busybox_root() {
  local r=$1
  mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/root" "$r/proc" "$r/sys" "$r/dev"
  chmod 1777 "$r/tmp"
  cp "$(command -v busybox)" "$r/bin/busybox"
  local a
  for a in $("$r/bin/busybox" --list); do
    [ -e "$r/bin/$a" ] || ln -s busybox "$r/bin/$a"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$r/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' > "$r/etc/group"
  : > "$r/etc/hosts"
  : > "$r/etc/resolv.conf"
}

# The suites' pods run dd (oflag=nocache, which Debian's busybox lacks),
# md5sum, mount, stat…: bookworm's tools, and busybox's applets where
# bookworm has none. Their scripts are written for busybox's sh (`let
# i+=1`, which dash lacks), so sh is bash, which runs them and, unlike
# busybox's sh, runs the tools on PATH rather than its own applets.
tools_root() {
  local r=$1 a
  bookworm_root
  cp -a "$cache/images/bookworm" "$r"
  cp "$(command -v busybox)" "$r/usr/local/bin/busybox"
  ln -sf bash "$r/usr/bin/sh"
  for a in $(busybox --list); do
    [ -e "$r/usr/bin/$a" ] || [ -e "$r/usr/sbin/$a" ] || [ -e "$r/usr/local/bin/$a" ] ||
      ln -s busybox "$r/usr/local/bin/$a"
  done
}

# The Debian archive this machine's apt takes its packages from (its
# one-line or deb822 sources; not a security or updates suite), for
# debootstrap; E2E_DEBIAN_MIRROR overrides it.
debian_mirror() {
  if [ -n "${E2E_DEBIAN_MIRROR:-}" ]; then
    echo "$E2E_DEBIAN_MIRROR"
    return
  fi
  local uri
  uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '
    $1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) {
      if ($(i + 1) !~ /-(security|updates|backports)$/) { print $i; exit } break } }')
  if [ -z "$uri" ]; then
    uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '
      function take() { if (u != "" && t && base) { print u; u = ""; exit } u = ""; t = base = 0 }
      /^[ \t]*$/ { take(); next }
      /^Types:/ { for (i = 2; i <= NF; i++) if ($i == "deb") t = 1 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i !~ /-(security|updates|backports)$/) base = 1 }
      /^URIs:/ { u = $2 }
      END { take() }')
  fi
  [ -n "$uri" ] || die "no Debian archive in this machine's apt sources: set E2E_DEBIAN_MIRROR to one"
  echo "$uri"
}

# A debootstrapped bookworm with what the Dockerfile's final stage
# installs (once per machine, in E2E_CACHE).
bookworm_root() {
  local root=$cache/images/bookworm
  [ ! -f "$root/.complete" ] || return 0
  command -v debootstrap >/dev/null || die "debootstrap is needed to make the images without Docker"
  log "debootstrapping bookworm for the images (once per machine)"
  rm -rf "$root"
  debootstrap --variant=minbase --include=e2fsprogs,util-linux,mount,ca-certificates \
    bookworm "$root" "$(debian_mirror)" >&2
  rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*.bin
  touch "$root/.complete"
}

# Builds the stand-ins; each archive is made once per machine (E2E_CACHE).
images_build() {
  local c=$cache/images mk=$here/images/mkimage.py
  mkdir -p "$c"
  if [ ! -f "$c/pause.tar" ]; then
    rm -rf "$c/pause" && mkdir -p "$c/pause"
    gcc -O2 -static -o "$c/pause/pause" "$here/images/pause.c"
    python3 "$mk" "$c/pause" "$c/pause.tar" registry.k8s.io/pause:3.10.2 --entrypoint '["/pause"]' --cmd 'null'
  fi
  # Made again when this file (how they are made) changed since.
  if [ ! -f "$c/tools.tar" ] || [ "${BASH_SOURCE[0]}" -nt "$c/tools.tar" ]; then
    rm -rf "$c/tools" && tools_root "$c/tools"
    python3 "$mk" "$c/tools" "$c/tools.tar" \
      registry.k8s.io/e2e-test-images/busybox:1.37.0-1 \
      registry.k8s.io/e2e-test-images/nginx:1.15-4 \
      registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0
  fi
  if [ ! -f "$c/agnhost.tar" ] || [ "$bin/agnhost" -nt "$c/agnhost.tar" ] || [ "$c/tools.tar" -nt "$c/agnhost.tar" ]; then
    cp "$bin/agnhost" "$c/tools/agnhost"
    python3 "$mk" "$c/tools" "$c/agnhost.tar" registry.k8s.io/e2e-test-images/agnhost:2.63.0 \
      --entrypoint '["/agnhost"]' --cmd '["pause"]'
    rm "$c/tools/agnhost"
  fi
  volplane_image_build
}

# The volplane image: the one given (docker save of the Dockerfile's
# image), or the Dockerfile's second stage made without Docker: the release
# binary on bookworm with e2fsprogs, util-linux and mount.
volplane_image_build() {
  local c=$cache/images
  if [ -n "$image" ]; then
    cp "$image" "$c/volplane.tar"
    volplane_image=$(tar -xOf "$image" manifest.json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["RepoTags"][0])')
    return
  fi
  log "building volplane (cargo build --release -p volplane-cli)"
  (cd "$repo" && cargo build --release --locked -p volplane-cli >&2)
  local root=$c/bookworm
  bookworm_root
  mkdir -p "$root/usr/local/bin"
  strip --strip-debug -o "$root/usr/local/bin/volplane" "$repo/target/release/volplane"
  python3 "$here/images/mkimage.py" "$root" "$c/volplane.tar" "$volplane_image" \
    --entrypoint '["/usr/local/bin/volplane"]' --cmd 'null'
  rm "$root/usr/local/bin/volplane"
}

# Stand-ins for the kubernetes-csi images a setup's manifests name
# (registry.k8s.io/sig-storage/NAME:TAG).
sig_storage_images() {
  local ref name
  for ref in $(sed -n 's|.*image: *"\{0,1\}\(registry.k8s.io/sig-storage/[^" ]*\).*|\1|p' "$1" | sort -u); do
    name=${ref##*/}; name=${name%%:*}
    [ -x "$bin/$name" ] || die "$1 runs $ref: build $name from its repository into $bin"
    sig_storage_image "$ref"
  done
}

# One stand-in: E2E_BIN/NAME as /NAME, the entrypoint as upstream's. The
# drivers get bookworm's mount tools.
sig_storage_image() {
  local c=$cache/images ref=$1 name root
  name=${ref##*/}; name=${name%%:*}
  case "$name" in
    hostpathplugin) root=$c/bookworm ;;
    *) root=$c/sidecar; [ -d "$root/bin" ] || busybox_root "$root" ;;
  esac
  cp "$bin/$name" "$root/$name"
  python3 "$here/images/mkimage.py" "$root" "$c/$name.tar" "$ref" --entrypoint "[\"/$name\"]" --cmd null
  rm -f "$root/$name"
  stand_ins+=("$name")
}

# The provisioning suite's "any volume data source" spec deploys
# lib-volume-populator's example, hello-populator (IfNotPresent; the
# volume-data-source-validator it deploys beside is pulled Always and
# stays in ImagePullBackOff here, which that spec does not wait on).
suite_images() {
  local ref=registry.k8s.io/sig-storage/hello-populator:v1.0.1
  if [ -x "$bin/hello-populator" ]; then
    sig_storage_image "$ref"
  else
    log "warning: no hello-populator in $bin (kubernetes-csi/lib-volume-populator, ./example/hello-populator): the provisioning spec \"should provision storage with any volume data source\" will fail pulling $ref"
  fi
}

images_import() {
  images_build
  setup_manifests "$1" > "$work/setup.yaml"
  sig_storage_images "$work/setup.yaml"
  suite_images
  local t
  for t in pause tools agnhost volplane "${stand_ins[@]}"; do
    log "importing the $t image"
    ctr_ images import "$cache/images/$t.tar" >/dev/null
  done
}

stand_ins=()
