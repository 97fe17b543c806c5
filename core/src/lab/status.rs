//! `lab status`: the store's objects as `kubectl get` prints them.

use std::fmt::Write;

use crate::model::*;
use crate::store::Store;

/// Columns padded to their widest cell, two spaces apart.
fn table(out: &mut String, title: &str, header: &[&str], rows: Vec<Vec<String>>) {
    let _ = writeln!(out, "{title}");
    if rows.is_empty() {
        let _ = writeln!(out, "  (none)\n");
        return;
    }
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::from("  ");
        for (i, c) in cells.iter().enumerate() {
            let _ = write!(s, "{c:<w$}  ", w = widths[i]);
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(header.to_vec()));
    for r in &rows {
        let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
    }
    out.push('\n');
}

fn modes(m: &[AccessMode]) -> String {
    m.iter()
        .map(|m| m.short().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s.into()
    }
}

/// Renders every kind the lab plays with.
pub fn render(store: &Store) -> String {
    let mut rows: Vec<Vec<Vec<String>>> = vec![Vec::new(); TABLES.len()];
    for o in store.objects() {
        if let Some((table, row)) = row(o) {
            rows[table].push(row);
        }
    }
    let mut out = String::new();
    for ((title, headers), rows) in TABLES.iter().zip(rows) {
        table(&mut out, title, headers, rows);
    }
    snapshots(store, &mut out);
    out.trim_end().to_string()
}

/// The tables `render` shows, in order, with kubectl's columns.
const TABLES: [(&str, &[&str]); 6] = [
    (
        "STORAGECLASSES",
        &[
            "NAME",
            "PROVISIONER",
            "RECLAIMPOLICY",
            "VOLUMEBINDINGMODE",
            "ALLOWVOLUMEEXPANSION",
        ],
    ),
    (
        "PERSISTENTVOLUMECLAIMS",
        &[
            "NAME",
            "STATUS",
            "VOLUME",
            "CAPACITY",
            "ACCESS MODES",
            "STORAGECLASS",
        ],
    ),
    (
        "PERSISTENTVOLUMES",
        &[
            "NAME",
            "CAPACITY",
            "ACCESS MODES",
            "RECLAIM POLICY",
            "STATUS",
            "CLAIM",
            "STORAGECLASS",
        ],
    ),
    ("PODS", &["NAME", "STATUS", "NODE", "CLAIMS"]),
    (
        "VOLUMEATTACHMENTS",
        &["NAME", "ATTACHER", "PV", "NODE", "ATTACHED"],
    ),
    ("CSINODES", &["NAME", "DRIVERS", "NODE IDS"]),
];

/// The table (an index into [`TABLES`]) and row `o` shows as, if any.
fn row(o: &Object) -> Option<(usize, Vec<String>)> {
    Some(match o {
        Object::Class(c) => (
            0,
            vec![
                c.metadata.name.clone(),
                c.provisioner.clone(),
                c.reclaim_policy().to_string(),
                c.binding_mode().to_string(),
                c.allow_volume_expansion.unwrap_or(false).to_string(),
            ],
        ),
        Object::Pv(pv) => (
            2,
            vec![
                pv.metadata.name.clone(),
                pv.capacity().map(|q| q.to_string()).unwrap_or_default(),
                modes(&pv.spec.access_modes),
                pv.reclaim_policy().to_string(),
                if pv.metadata.deleting() {
                    "Terminating".into()
                } else {
                    pv.phase().to_string()
                },
                pv.spec
                    .claim_ref
                    .as_ref()
                    .map(|r| format!("{}/{}", r.namespace, r.name))
                    .unwrap_or_default(),
                pv.class().to_string(),
            ],
        ),
        Object::Pvc(c) => (
            1,
            vec![
                c.metadata.name.clone(),
                if c.metadata.deleting() {
                    "Terminating".into()
                } else {
                    c.phase().to_string()
                },
                c.volume_name().to_string(),
                c.status_capacity()
                    .map(|q| q.to_string())
                    .unwrap_or_default(),
                modes(&c.status.access_modes),
                c.class().to_string(),
            ],
        ),
        Object::Pod(p) => (
            3,
            vec![
                p.metadata.name.clone(),
                if p.metadata.deletion_timestamp.is_some() {
                    "Terminating".into()
                } else {
                    p.status
                        .phase
                        .as_ref()
                        .map_or("Pending".to_string(), |ph| ph.to_string())
                },
                p.node().unwrap_or("<none>").to_string(),
                or_none(&p.claims().collect::<Vec<_>>().join(",")),
            ],
        ),
        Object::Va(va) => (
            4,
            vec![
                va.metadata.name.clone(),
                va.spec.attacher.clone(),
                va.pv_name().to_string(),
                va.spec.node_name.clone(),
                va.status.attached.to_string(),
            ],
        ),
        Object::CsiNode(n) => (
            5,
            vec![
                n.metadata.name.clone(),
                n.spec.drivers.len().to_string(),
                or_none(
                    &n.spec
                        .drivers
                        .iter()
                        .map(|d| format!("{}={}", d.name, d.node_id))
                        .collect::<Vec<_>>()
                        .join(","),
                ),
            ],
        ),
        _ => return None,
    })
}

/// VolumeSnapshots and their contents, with kubectl's columns (when there
/// are any).
fn snapshots(store: &Store, out: &mut String) {
    let mut snapshots = Vec::new();
    let mut contents = Vec::new();
    for o in store.objects() {
        match o {
            Object::Snapshot(s) => {
                let status = s.status.clone().unwrap_or_default();
                snapshots.push(vec![
                    s.metadata.name.clone(),
                    s.ready().to_string(),
                    or_none(
                        s.spec
                            .source
                            .persistent_volume_claim_name
                            .as_deref()
                            .unwrap_or(""),
                    ),
                    or_none(
                        s.spec
                            .source
                            .volume_snapshot_content_name
                            .as_deref()
                            .unwrap_or(""),
                    ),
                    status
                        .restore_size
                        .map(|q| q.to_string())
                        .unwrap_or_default(),
                    s.spec
                        .volume_snapshot_class_name
                        .clone()
                        .unwrap_or_default(),
                    s.bound_content().unwrap_or("").to_string(),
                ]);
            }
            Object::Content(c) => contents.push(vec![
                c.metadata.name.clone(),
                c.ready().to_string(),
                c.status
                    .as_ref()
                    .and_then(|s| s.restore_size)
                    .map(|b| b.to_string())
                    .unwrap_or_default(),
                format!("{:?}", c.spec.deletion_policy),
                c.spec.driver.clone(),
                c.spec
                    .volume_snapshot_class_name
                    .clone()
                    .unwrap_or_default(),
                c.spec.volume_snapshot_ref.name.clone(),
            ]),
            _ => {}
        }
    }
    if snapshots.is_empty() && contents.is_empty() {
        return;
    }
    table(
        out,
        "VOLUMESNAPSHOTS",
        &[
            "NAME",
            "READYTOUSE",
            "SOURCEPVC",
            "SOURCESNAPSHOTCONTENT",
            "RESTORESIZE",
            "SNAPSHOTCLASS",
            "SNAPSHOTCONTENT",
        ],
        snapshots,
    );
    table(
        out,
        "VOLUMESNAPSHOTCONTENTS",
        &[
            "NAME",
            "READYTOUSE",
            "RESTORESIZE",
            "DELETIONPOLICY",
            "DRIVER",
            "VOLUMESNAPSHOTCLASS",
            "VOLUMESNAPSHOT",
        ],
        contents,
    );
}
