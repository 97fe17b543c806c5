//! `tests/e2e/run`'s own care of the machine, without a cluster: its
//! teardown puts back the kernel settings the cluster's parts change and
//! removes the directories they made outside its own, preflight refuses
//! only what collides with this cluster (its ports), and debootstrap's
//! archive comes from the machine's apt sources. Each test sources
//! `tests/e2e/lib/` in bash and calls its functions.

mod common;

use std::process::Command;

/// Runs `script` in bash after sourcing the runner's libraries (with a
/// scratch `$work`); its stdout, or a panic with everything it said.
fn runner_bash(script: &str) -> String {
    let lib = concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/lib");
    let work = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -u\nwork={work}\nhere={lib}/..\n. {lib}/cluster.sh\n. {lib}/images.sh\n{script}",
            work = work.path().display()
        ))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "{}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout
}

/// Every setting the kubelet and kube-proxy change, changed as they would
/// (to a value other than the machine's), is read back as it was after
/// teardown's restore. The script puts them back on any exit itself.
#[test]
fn teardown_puts_back_every_kernel_setting_the_cluster_changes() {
    require_root!();
    let out = runner_bash(
        r#"
save_kernel_settings "$work/saved"
cp "$work/saved" "$work/before"
# Put back on any exit by a loop of its own, not by the function tested.
trap 'while read -r k v; do echo "$v" > "/proc/sys/$k"; done < "$work/before"' EXIT
other() { # a value other than $2 for setting $1, as the parts would set it
  case "$1" in
    vm/overcommit_memory) [ "$2" = 1 ] && echo 0 || echo 1 ;;
    kernel/panic) echo $(($2 + 7)) ;;
    kernel/panic_on_oops|net/ipv4/conf/all/route_localnet) echo $((1 - $2)) ;;
    net/netfilter/*) echo $(($2 + 60)) ;;
    *) echo "$2" ;;
  esac
}
changed=0
while read -r k v; do
  o=$(other "$k" "$v")
  [ "$o" != "$v" ] || continue
  echo "$o" > "/proc/sys/$k"
  [ "$(cat "/proc/sys/$k")" = "$o" ] && changed=$((changed + 1))
done < "$work/saved"
echo "changed $changed"
restore_kernel_settings "$work/saved" || exit 3
save_kernel_settings "$work/after"
diff "$work/before" "$work/after" && echo "read back as before"
grep -c . "$work/before"
"#,
    );
    let lines: Vec<&str> = out.lines().collect();
    let changed: usize = lines[0].strip_prefix("changed ").unwrap().parse().unwrap();
    assert!(
        changed >= 4,
        "overcommit, panic, panic_on_oops and route_localnet at least: {out}"
    );
    assert!(out.contains("read back as before"), "{out}");
}

/// A directory the parts made outside the run's own goes with the
/// cluster, with what is mounted beneath it; one that was there before
/// stays.
#[test]
fn teardown_removes_the_directories_the_cluster_made_and_only_those() {
    require_root!();
    let out = runner_bash(
        r#"
mkdir -p "$work/host/kept"
outside_dirs=("$work/host/kept" "$work/host/made/deeper" "$work/host/made")
note_absent_dirs "$work/made-dirs"
mkdir -p "$work/host/made/deeper/ns" "$work/host/kept/inside"
mount -t tmpfs volplane-e2e-test "$work/host/made/deeper/ns"
remove_made_dirs "$work/made-dirs"
[ -d "$work/host/kept/inside" ] && echo "kept stays"
[ ! -e "$work/host/made" ] && echo "made is gone"
grep -q volplane-e2e-test /proc/self/mounts || echo "nothing left mounted"
"#,
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["kept stays", "made is gone", "nothing left mounted"]
    );
}

/// Preflight's collision check is this cluster's ports: taken while
/// something listens on one, free otherwise.
#[test]
fn a_port_of_the_cluster_in_use_is_a_collision_and_no_other_is() {
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let taken = listener.local_addr().unwrap().port();
    let free = {
        let l = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let out = runner_bash(&format!(
        r#"
ports=({taken}); ports_taken && echo "{taken} taken"
ports=({free}); ports_taken || echo "{free} free"
"#
    ));
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [format!("{taken} taken"), format!("{free} free")]
    );
    drop(listener);
}

/// debootstrap's archive is the one the machine's apt names (one-line or
/// deb822 sources), unless E2E_DEBIAN_MIRROR names another.
#[test]
fn the_debian_archive_is_the_machines_own_or_the_one_named() {
    let has_sources = std::fs::read_dir("/etc/apt/sources.list.d")
        .map(|d| d.count() > 0)
        .unwrap_or(false)
        || std::path::Path::new("/etc/apt/sources.list").exists();
    if !has_sources {
        common::skip(module_path!(), "this machine has no apt sources");
        return;
    }
    let out = runner_bash(
        r#"
debian_mirror
E2E_DEBIAN_MIRROR=http://archive.invalid/debian debian_mirror
"#,
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].contains("://") && !lines[0].contains("security"),
        "{out}"
    );
    assert_eq!(lines[1], "http://archive.invalid/debian");
}
