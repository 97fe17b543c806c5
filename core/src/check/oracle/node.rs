//! The Node service's RPCs, judged, and what the node's mounts must show
//! after them.

use super::{Answer, Breach, Cx, Refers, Verdict, refers_node as refers};
use crate::Code;
use crate::check::rules::{Rule, Tally};
use crate::check::step::{Names, Slot, StatsAt};
use crate::check::world::{NodeSeen, World};
use crate::driver::{AccessMode, ControllerCapability, NodeCapability, Response};

/// Whether the node may act on `v` at all: `Some(verdict)` when the
/// volume is gone (NOT_FOUND, unless the node still holds it) or unsure.
fn gone(cx: &mut Cx<'_>, w: &World, v: Slot, a: &Answer, act: &str) -> Option<Verdict> {
    match refers(cx, w, v) {
        Refers::Vol(_) => None,
        Refers::Gone if w.node(v).is_empty() => {
            let why = format!("the volume does not exist, so there is nothing to {act}");
            // A stage-capable node plugin knows only what is staged: to it
            // a volume that does not exist is also one not staged.
            // Likewise, to the node plugin of a driver that attaches, a
            // volume that does not exist is also one not attached.
            let stages = cx.facts.node_has(NodeCapability::StageUnstageVolume);
            let attaches = cx.facts.has(ControllerCapability::PublishUnpublishVolume);
            let codes: &[Code] = if (act == "publish" && stages) || (act == "stage" && attaches) {
                &[Code::NotFound, Code::FailedPrecondition]
            } else {
                &[Code::NotFound]
            };
            Some(cx.must_fail_with(Rule::UnknownObject, codes, w, a, &why))
        }
        // Deleted while the node held it, or made by a lost call.
        _ => None,
    }
}

/// The volume was deleted while the node held it (a driver may allow
/// that): what the node does with it after is the driver's own affair.
fn deleted_while_held(w: &World, v: Slot) -> bool {
    !w.volumes.contains_key(&v) && !w.node(v).is_empty()
}

/// NodeStageVolume: repeated, OK; in another mode, ALREADY_EXISTS.
pub fn stage(cx: &mut Cx<'_>, w: &World, v: Slot, other_mode: bool, a: &Answer) -> Verdict {
    if let Some(verdict) = gone(cx, w, v, a, "stage") {
        return verdict;
    }
    let id = cx.node_volume_id(v);
    let apply = move |_: &mut Cx<'_>, w: &mut World, _: Option<&Response>| {
        let mut n = w.node(v);
        n.id.clone_from(&id);
        n.staged.get_or_insert(other_mode);
        w.set_node(v, n);
        Ok(())
    };
    if deleted_while_held(w, v) {
        return cx.either(w, a, apply);
    }
    let attached = w.volumes.get(&v).is_some_and(|x| x.published.is_some());
    let exists = matches!(refers(cx, w, v), Refers::Vol(_));
    match w.node(v).staged {
        Some(mode) if mode == other_mode => cx.found(Rule::StageIdempotent, w, a, apply),
        Some(_) => {
            cx.checked(Rule::StageIncompatible);
            match a {
                Answer::Refused {
                    code: Code::AlreadyExists,
                    ..
                } => Ok(vec![w.clone()]),
                Answer::Reply(_) => {
                    let detail = "answered OK to staging the volume in another access mode at the path it is staged at; ALREADY_EXISTS was due".to_string();
                    cx.note(Rule::StageIncompatible, detail);
                    Ok(vec![w.clone()])
                }
                _ => cx.either(w, a, |_, _, _| Ok(())),
            }
        }
        None if !exists
            || (cx.facts.has(ControllerCapability::PublishUnpublishVolume) && !attached) =>
        {
            // Not attached, or deleted: the driver may refuse.
            cx.either(w, a, apply)
        }
        None => cx.found(Rule::ValidCallSucceeds, w, a, apply),
    }
}

/// NodeUnstageVolume: not staged, OK; with targets published, refused.
pub fn unstage(cx: &mut Cx<'_>, w: &World, v: Slot, a: &Answer) -> Verdict {
    let apply = move |_: &mut Cx<'_>, w: &mut World, _: Option<&Response>| {
        let mut n = w.node(v);
        n.staged = None;
        w.set_node(v, n);
        Ok(())
    };
    if deleted_while_held(w, v) {
        return cx.either(w, a, apply);
    }
    let n = w.node(v);
    if n.staged.is_none() {
        return match refers(cx, w, v) {
            Refers::Vol(_) => cx.found(Rule::UnstageIdempotent, w, a, apply),
            _ => cx.either(w, a, apply),
        };
    }
    if n.targets.is_empty() {
        return cx.found(Rule::ValidCallSucceeds, w, a, apply);
    }
    cx.checked(Rule::UnstageWhilePublished);
    if matches!(a, Answer::Reply(_)) {
        let targets: Vec<String> = n.targets.keys().map(|t| format!("t{t}")).collect();
        cx.note(
            Rule::UnstageWhilePublished,
            format!(
                "unstaged while published at {}; FAILED_PRECONDITION was due",
                targets.join(", ")
            ),
        );
    }
    cx.either(w, a, apply)
}

/// NodePublishVolume: repeated, OK; with the other read-only flag,
/// ALREADY_EXISTS; a single-writer volume at a second target,
/// FAILED_PRECONDITION.
pub fn publish(
    cx: &mut Cx<'_>,
    w: &World,
    v: Slot,
    t: Slot,
    readonly: bool,
    a: &Answer,
) -> Verdict {
    if let Some(verdict) = gone(cx, w, v, a, "publish") {
        return verdict;
    }
    let id = cx.node_volume_id(v);
    let apply = move |_: &mut Cx<'_>, w: &mut World, _: Option<&Response>| {
        let mut n = w.node(v);
        n.id.clone_from(&id);
        n.targets.entry(t).or_insert(readonly);
        w.set_node(v, n);
        Ok(())
    };
    if deleted_while_held(w, v) {
        return cx.either(w, a, apply);
    }
    let n = w.node(v);
    if let Some(ro) = n.targets.get(&t) {
        if *ro == readonly {
            return cx.found(Rule::NodePublishIdempotent, w, a, apply);
        }
        let why = "published at the target already with the other read-only flag";
        return cx.must_fail(Rule::NodePublishIdempotent, Code::AlreadyExists, w, a, why);
    }
    if cx.facts.node_has(NodeCapability::StageUnstageVolume) && n.staged.is_none() {
        cx.checked(Rule::PublishNeedsStage);
        if matches!(a, Answer::Reply(_)) {
            let detail = "published a volume that is not staged, by a driver that stages; FAILED_PRECONDITION was due".to_string();
            cx.note(Rule::PublishNeedsStage, detail);
        }
        return cx.either(w, a, apply);
    }
    if !n.targets.is_empty() {
        return match cx.names.capability.access_mode {
            AccessMode::SingleNodeSingleWriter => {
                let why = "a SINGLE_NODE_SINGLE_WRITER volume is published at another target";
                cx.must_fail(Rule::SingleWriter, Code::FailedPrecondition, w, a, why)
            }
            AccessMode::SingleNodeWriter | AccessMode::SingleNodeReaderOnly => {
                cx.either(w, a, apply)
            }
            _ => cx.found(Rule::ValidCallSucceeds, w, a, apply),
        };
    }
    if !matches!(refers(cx, w, v), Refers::Vol(_)) {
        return cx.either(w, a, apply);
    }
    cx.found(Rule::ValidCallSucceeds, w, a, apply)
}

/// NodeUnpublishVolume: not published, OK.
pub fn unpublish(cx: &mut Cx<'_>, w: &World, v: Slot, t: Slot, a: &Answer) -> Verdict {
    let apply = move |_: &mut Cx<'_>, w: &mut World, _: Option<&Response>| {
        let mut n = w.node(v);
        n.targets.remove(&t);
        w.set_node(v, n);
        Ok(())
    };
    if deleted_while_held(w, v) {
        return cx.either(w, a, apply);
    }
    if w.node(v).targets.contains_key(&t) {
        return cx.found(Rule::ValidCallSucceeds, w, a, apply);
    }
    match refers(cx, w, v) {
        Refers::Vol(_) => cx.found(Rule::NodeUnpublishIdempotent, w, a, apply),
        // The spec keeps NOT_FOUND for a volume that does not exist.
        _ => cx.either(w, a, apply),
    }
}

/// NodeGetVolumeStats: a target the volume is published at, its usage;
/// anywhere else, NOT_FOUND.
pub fn stats(cx: &mut Cx<'_>, w: &World, v: Slot, at: StatsAt, a: &Answer) -> Verdict {
    if deleted_while_held(w, v) {
        return cx.either(w, a, |_, _, _| Ok(()));
    }
    let published = match at {
        StatsAt::Target(t) => w.node(v).targets.contains_key(&t),
        StatsAt::Nowhere => false,
    };
    if !published {
        let why = "the volume is not published at that path";
        return cx.must_fail(Rule::StatsPath, Code::NotFound, w, a, why);
    }
    cx.found(Rule::StatsPath, w, a, |_, _, _| Ok(()))
}

/// NodeExpandVolume: NOT_FOUND for a volume that does not exist; else
/// what the driver can do.
pub fn expand(cx: &mut Cx<'_>, w: &World, v: Slot, t: Slot, grow: u8, a: &Answer) -> Verdict {
    if let Some(verdict) = gone(cx, w, v, a, "expand") {
        return verdict;
    }
    let _ = (t, grow);
    cx.either(w, a, |_, _, _| Ok(()))
}

/// A write through target `from` reads back through `to`, when both are
/// published read-write; a read-only target refuses the write.
pub fn data(cx: &mut Cx<'_>, w: &World, v: Slot, from: Slot, to: Slot, a: &Answer) -> Verdict {
    let Answer::Data { wrote, read, token } = a else {
        return Ok(vec![w.clone()]);
    };
    if cx.names.block() || deleted_while_held(w, v) {
        return Ok(vec![w.clone()]);
    }
    let n = w.node(v);
    match (n.targets.get(&from), n.targets.get(&to)) {
        (Some(true), _) => {
            cx.checked(Rule::ReadOnlyRefusesWrites);
            if wrote.is_ok() {
                return Err(Breach {
                    rule: Rule::ReadOnlyRefusesWrites,
                    detail: format!("a write through t{from}, published read-only, succeeded"),
                });
            }
        }
        (Some(false), Some(_)) => {
            cx.checked(Rule::DataShared);
            let found = match (wrote, read) {
                (Err(e), _) => format!("the write through t{from} failed: {e}"),
                (Ok(()), Ok(Some(got))) if got == token => return Ok(vec![w.clone()]),
                (Ok(()), Ok(Some(got))) => format!("t{to} holds {got:?}, not {token:?}"),
                (Ok(()), Ok(None)) => format!("the file written through t{from} is not at t{to}"),
                (Ok(()), Err(e)) => format!("the read through t{to} failed: {e}"),
            };
            return Err(Breach {
                rule: Rule::DataShared,
                detail: found,
            });
        }
        _ => {}
    }
    Ok(vec![w.clone()])
}

/// What the node's paths must show in `w`: every target published is a
/// mount (read-only when asked; a block device for raw block), every
/// other is not; a volume not staged has nothing mounted at its staging
/// path; and every target in `removed` (unpublished OK in the last step)
/// is gone. `seen` holds every path of `slots`.
pub fn observe(
    names: &Names,
    w: &World,
    slots: &[(Slot, Slot)],
    removed: &[(Slot, Slot)],
    seen: &NodeSeen,
    mut tally: Option<&mut Tally>,
) -> Result<(), Breach> {
    let look = |p: &str| seen.paths.get(p).copied();
    let mut count = |rule| {
        if let Some(t) = tally.as_deref_mut() {
            t.checked(rule);
        }
    };
    for &(v, t) in slots {
        if deleted_while_held(w, v) {
            continue;
        }
        let path = names.target(v, t);
        let Some(at) = look(&path) else { continue };
        let published = w.node(v).targets.get(&t).copied();
        match published {
            Some(_) => count(Rule::PublishMounts),
            None if removed.contains(&(v, t)) => count(Rule::UnpublishUnmounts),
            None => {}
        }
        match (published, at.mounted) {
            (Some(_), None) => {
                return Err(Breach {
                    rule: Rule::PublishMounts,
                    detail: format!(
                        "v{v} is published at t{t} ({path}), but nothing is mounted there"
                    ),
                });
            }
            (Some(true), Some(false)) => {
                return Err(Breach {
                    rule: Rule::PublishMounts,
                    detail: format!(
                        "v{v} is published read-only at t{t} ({path}), but mounted read-write"
                    ),
                });
            }
            (Some(_), Some(_)) if names.block() && !at.block_device => {
                return Err(Breach {
                    rule: Rule::PublishMounts,
                    detail: format!(
                        "v{v} is published for raw block at t{t} ({path}), but no block device is there"
                    ),
                });
            }
            (None, Some(_)) => {
                return Err(Breach {
                    rule: Rule::UnpublishUnmounts,
                    detail: format!(
                        "v{v} is not published at t{t} ({path}), yet something is mounted there"
                    ),
                });
            }
            (None, None) if at.exists && removed.contains(&(v, t)) => {
                return Err(Breach {
                    rule: Rule::UnpublishUnmounts,
                    detail: format!("NodeUnpublishVolume answered OK but left {path} behind"),
                });
            }
            _ => {}
        }
    }
    let mut vols: Vec<Slot> = slots.iter().map(|(v, _)| *v).collect();
    vols.dedup();
    for v in vols {
        let path = names.staging(v);
        let Some(at) = look(&path) else { continue };
        if deleted_while_held(w, v) {
            continue;
        }
        if w.node(v).staged.is_none() {
            count(Rule::UnstageUnmounts);
        }
        if w.node(v).staged.is_none() && at.mounted.is_some() {
            return Err(Breach {
                rule: Rule::UnstageUnmounts,
                detail: format!(
                    "v{v} is not staged, yet something is mounted at its staging path {path}"
                ),
            });
        }
    }
    Ok(())
}
