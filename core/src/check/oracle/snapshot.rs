//! Snapshot RPCs, judged.

use super::{Answer, Breach, Cx, Refers, Verdict, refers, twice};
use crate::Code;
use crate::check::rules::Rule;
use crate::check::step::Slot;
use crate::check::world::{Snap, World};
use crate::driver::Response;

fn snapshot_of(r: Option<&Response>) -> Result<Option<&crate::driver::Snapshot>, Breach> {
    match r {
        None => Ok(None),
        Some(Response::Snapshot(s)) => Ok(Some(s)),
        Some(other) => Err(Breach {
            rule: Rule::WellFormed,
            detail: format!("answered {other:?} where a snapshot was due"),
        }),
    }
}

/// CreateSnapshot: the same name of the same volume, the same snapshot;
/// of another volume, ALREADY_EXISTS.
pub fn create(cx: &mut Cx<'_>, w: &World, s: Slot, v: Slot, a: &Answer) -> Verdict {
    let source_id = cx.volume_id(v);
    let source = source_id.clone();
    let record = move |_: &mut Cx<'_>, w: &mut World, r: Option<&Response>| {
        let cut = snapshot_of(r)?;
        if let Some(c) = cut
            && c.source_volume_id != source_id
        {
            return Err(Breach {
                rule: Rule::WellFormed,
                detail: format!(
                    "answered a snapshot of {:?} for a snapshot of {source_id:?}",
                    c.source_volume_id
                ),
            });
        }
        let id = cut.map(|c| c.snapshot_id.clone());
        let of_volume = w.volumes.get(&v).map_or(0, |x| x.bytes);
        let away = w.volumes.get(&v).is_some_and(|x| !x.reachable());
        let bytes = cut.map_or(0, |c| c.size_bytes).max(of_volume);
        match w.snapshots.get_mut(&s) {
            Some(old) => same_id(&mut old.id, id, "snapshot")?,
            None => {
                let source_id = source.clone();
                w.snapshots.insert(
                    s,
                    Snap {
                        id,
                        of: v,
                        source_id,
                        bytes,
                        away,
                    },
                );
            }
        }
        Ok(())
    };
    if let Some(snap) = w.snapshots.get(&s) {
        if snap.of != v || snap.source_id != cx.volume_id(v) {
            let why = "a snapshot of that name exists, of another volume";
            return cx.must_fail(Rule::SnapshotIdempotent, Code::AlreadyExists, w, a, why);
        }
        return cx.found(Rule::SnapshotIdempotent, w, a, record);
    }
    match refers(cx, w, v) {
        Refers::Vol(_) => cx.found(Rule::ValidCallSucceeds, w, a, record),
        Refers::Unsure => cx.either(w, a, record),
        Refers::Gone => {
            cx.checked(Rule::UnknownObject);
            if matches!(a, Answer::Reply(_)) {
                return Err(Breach {
                    rule: Rule::UnknownObject,
                    detail: "cut a snapshot of a volume that does not exist".to_string(),
                });
            }
            Ok(vec![w.clone()])
        }
    }
}

/// DeleteSnapshot: one that is gone, OK.
pub fn delete(cx: &mut Cx<'_>, w: &World, s: Slot, a: &Answer) -> Verdict {
    let remove = move |_: &mut Cx<'_>, w: &mut World, _: Option<&Response>| {
        w.snapshots.remove(&s);
        Ok(())
    };
    match w.snapshots.get(&s) {
        None => cx.must_ok(Rule::DeleteSnapshotIdempotent, w, a, remove),
        Some(snap) if snap.id.is_none() => cx.either(w, a, remove),
        Some(_) => cx.found(Rule::ValidCallSucceeds, w, a, remove),
    }
}

/// ListSnapshots, every page: every snapshot of the run once, none that is gone.
pub fn list(cx: &mut Cx<'_>, w: &World, _page: u8, a: &Answer) -> Verdict {
    cx.must_ok(Rule::ValidCallSucceeds, w, a, |cx, w, r| {
        let Some(Response::Snapshots { entries, .. }) = r else {
            return Ok(());
        };
        cx.checked(Rule::ListComplete);
        let again = twice(entries.iter().map(|e| e.snapshot_id.as_str()));
        if !again.is_empty() {
            return Err(Breach {
                rule: Rule::ListComplete,
                detail: format!("listed snapshots {again:?} more than once"),
            });
        }
        let listed: std::collections::BTreeSet<&str> =
            entries.iter().map(|e| e.snapshot_id.as_str()).collect();
        for (slot, snap) in &w.snapshots {
            let Some(id) = &snap.id else { continue };
            if !listed.contains(id.as_str()) {
                return Err(Breach {
                    rule: Rule::ListComplete,
                    detail: format!(
                        "snapshot {id:?} (s{slot}) is missing from {} snapshots listed",
                        entries.len()
                    ),
                });
            }
        }
        for (slot, id) in &cx.known.snapshots {
            let remade = w.snapshots.get(slot).is_some_and(|s| s.id.is_none());
            let alive = w.snapshots.values().any(|s| s.id.as_deref() == Some(id));
            if listed.contains(id.as_str()) && !alive && !remade {
                return Err(Breach {
                    rule: Rule::ListComplete,
                    detail: format!("listed snapshot {id:?} (s{slot}), which was deleted"),
                });
            }
        }
        Ok(())
    })
}

/// A repeated create answered `now` for an object that had `had`: the
/// same one, or (where `had` was lost) the one it now is.
pub(super) fn same_id(
    had: &mut Option<String>,
    now: Option<String>,
    what: &str,
) -> Result<(), Breach> {
    match (had.as_ref(), now) {
        (Some(h), Some(n)) if *h != n => Err(Breach {
            rule: Rule::SnapshotIdempotent,
            detail: format!(
                "answered {what} {n:?} for a name that already has {what} {h:?}: a second {what}"
            ),
        }),
        (None, now) => {
            *had = now;
            Ok(())
        }
        _ => Ok(()),
    }
}
