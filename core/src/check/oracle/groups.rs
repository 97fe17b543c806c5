//! Group snapshot RPCs (the GroupController service), judged.

use super::{Answer, Breach, Cx, Refers, Verdict, refers};
use crate::Code;
use crate::check::rules::Rule;
use crate::check::step::Slot;
use crate::check::world::{Group, World};
use crate::driver::Response;

/// CreateVolumeGroupSnapshot: the same name of the same volumes, the same
/// group; of other volumes, ALREADY_EXISTS; a member per volume.
pub fn create(cx: &mut Cx<'_>, w: &World, g: Slot, of: (Slot, Slot), a: &Answer) -> Verdict {
    // A group is of a set of volumes: the order they are named in is no part of it.
    let of = (of.0.min(of.1), of.0.max(of.1));
    let ids = (cx.volume_id(of.0), cx.volume_id(of.1));
    let want = ids.clone();
    let record = move |_: &mut Cx<'_>, w: &mut World, r: Option<&Response>| {
        let cut = match r {
            None => None,
            Some(Response::GroupSnapshot(group)) => Some(group),
            Some(other) => {
                return Err(Breach {
                    rule: Rule::WellFormed,
                    detail: format!("answered {other:?} where a group snapshot was due"),
                });
            }
        };
        if let Some(c) = cut {
            let mut sources: Vec<&str> = c
                .snapshots
                .iter()
                .map(|s| s.source_volume_id.as_str())
                .collect();
            sources.sort_unstable();
            let mut asked = vec![want.0.as_str(), want.1.as_str()];
            asked.sort_unstable();
            asked.dedup();
            if sources != asked {
                return Err(Breach {
                    rule: Rule::WellFormed,
                    detail: format!(
                        "a group snapshot of {asked:?} answered with members of {sources:?}"
                    ),
                });
            }
        }
        let id = cut.map(|c| c.group_snapshot_id.clone());
        match w.groups.get_mut(&g) {
            Some(old) => super::snapshot::same_id(&mut old.id, id, "group snapshot")?,
            None => {
                let source_ids = want.clone();
                w.groups.insert(g, Group { id, of, source_ids });
            }
        }
        Ok(())
    };
    if let Some(group) = w.groups.get(&g) {
        if group.of != of || group.source_ids != ids {
            let why = "a group snapshot of that name exists, of other volumes";
            return cx.must_fail(Rule::SnapshotIdempotent, Code::AlreadyExists, w, a, why);
        }
        return cx.found(Rule::SnapshotIdempotent, w, a, record);
    }
    match (refers(cx, w, of.0), refers(cx, w, of.1)) {
        (Refers::Vol(_), Refers::Vol(_)) => cx.must_ok(Rule::ValidCallSucceeds, w, a, record),
        (Refers::Gone, _) | (_, Refers::Gone) => {
            cx.checked(Rule::UnknownObject);
            if matches!(a, Answer::Reply(_)) {
                return Err(Breach {
                    rule: Rule::UnknownObject,
                    detail: "cut a group snapshot of a volume that does not exist".to_string(),
                });
            }
            Ok(vec![w.clone()])
        }
        _ => cx.either(w, a, record),
    }
}

/// DeleteVolumeGroupSnapshot: one that is gone, OK.
pub fn delete(cx: &mut Cx<'_>, w: &World, g: Slot, a: &Answer) -> Verdict {
    let remove = move |_: &mut Cx<'_>, w: &mut World, _: Option<&Response>| {
        w.groups.remove(&g);
        Ok(())
    };
    match w.groups.get(&g) {
        None => cx.must_ok(Rule::DeleteSnapshotIdempotent, w, a, remove),
        Some(group) if group.id.is_none() => cx.either(w, a, remove),
        Some(_) => cx.found(Rule::ValidCallSucceeds, w, a, remove),
    }
}
