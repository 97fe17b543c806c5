//! The Controller service's RPCs, judged.

use super::{Answer, Breach, Cx, Refers, Verdict, refers, twice};
use crate::Code;
use crate::check::rules::Rule;
use crate::check::step::{Shape, Slot};
use crate::check::world::{Away, Choice, Vol, World};
use crate::driver::{ControllerCapability, Response};

fn volume_of(r: Option<&Response>) -> Result<Option<&crate::driver::Volume>, Breach> {
    match r {
        None => Ok(None),
        Some(Response::Volume(v)) => Ok(Some(v)),
        Some(other) => Err(Breach {
            rule: Rule::WellFormed,
            detail: format!("answered {other:?} where a volume was due"),
        }),
    }
}

/// CreateVolume: the same name and arguments, the same volume; an
/// incompatible size under the same name, ALREADY_EXISTS.
pub fn create(cx: &mut Cx<'_>, w: &World, v: Slot, shape: Shape, a: &Answer) -> Verdict {
    match shape {
        Shape::Unnamed => {
            return cx.must_fail(
                Rule::RequiredFields,
                Code::InvalidArgument,
                w,
                a,
                "name is REQUIRED",
            );
        }
        Shape::NoCapability => {
            let why = "volume_capabilities is REQUIRED";
            return cx.must_fail(Rule::RequiredFields, Code::InvalidArgument, w, a, why);
        }
        // A new name needs the storage, and so the credentials. A name
        // already made may be answered from the driver's records, as any
        // repeat, or refused: either changes nothing.
        Shape::NoSecrets if w.volumes.contains_key(&v) => return Ok(vec![w.clone()]),
        Shape::NoSecrets => return cx.made_nothing_without_secrets(w, a),
        _ => {}
    }
    let asked = cx.names.range(shape).required_bytes;
    let source = match shape {
        Shape::FromSnapshot(_) | Shape::Clone(_) => Some(shape),
        _ => None,
    };
    let away = match shape {
        Shape::Elsewhere { here_too } => Some(here_too),
        _ => None,
    };
    let Some(existing) = w.volumes.get(&v) else {
        return create_new(cx, w, v, shape, asked, a);
    };
    // Asked for where it was not asked for before: the driver may answer
    // the volume (where the new requirement admits it) or ALREADY_EXISTS;
    // either changes nothing.
    if matches!(shape, Shape::Plain | Shape::Elsewhere { .. })
        && existing.away.map(|a| a.here_too) != away
    {
        return Ok(vec![w.clone()]);
    }
    let same_source = existing.source == source;
    let known_bytes = if existing.bytes > 0 {
        existing.bytes
    } else {
        existing.asked
    };
    if !same_source || known_bytes < asked {
        let why = if !same_source {
            "a volume of that name exists, filled from another source".to_string()
        } else {
            format!(
                "a volume of that name exists with {known_bytes} bytes, fewer than the {asked} asked for"
            )
        };
        // Where the source asked for does not exist either, both errors
        // apply and the spec orders neither: NOT_FOUND is as fair.
        let codes: &[Code] = match source_found(cx, w, source) {
            Some((true, _)) => &[Code::AlreadyExists],
            _ => &[Code::AlreadyExists, Code::NotFound],
        };
        return cx.must_fail_with(Rule::CreateIncompatible, codes, w, a, &why);
    }
    // Compatible: the same volume, or (where the driver compares every
    // argument) ALREADY_EXISTS for a size other than the first.
    let first_size = existing.asked == asked;
    let verdict = |cx: &mut Cx<'_>, w: &mut World, r: Option<&Response>| {
        let Some(made) = volume_of(r)? else {
            return Ok(());
        };
        let vol = w.volumes.get_mut(&v).expect("the volume is there");
        match &vol.id {
            Some(id) if *id != made.volume_id => {
                return Err(Breach {
                    rule: Rule::CreateIdempotent,
                    detail: format!(
                        "answered volume {:?} for a name that already has volume {id:?}: a second volume",
                        made.volume_id
                    ),
                });
            }
            _ => vol.id = Some(made.volume_id.clone()),
        }
        check_capacity(made.capacity_bytes, asked)?;
        check_topology(cx, shape, made)?;
        if made.capacity_bytes > 0 {
            vol.bytes = made.capacity_bytes;
        }
        if let Some(away) = &mut vol.away {
            away.reached = cx.facts.reaches_here(&made.accessible_topology);
        }
        Ok(())
    };
    if first_size {
        cx.found(Rule::CreateIdempotent, w, a, verdict)
    } else {
        cx.either(w, a, verdict)
    }
}

/// CreateVolume of a name that has no volume: its source must exist, and
/// may be larger than the size asked for (OUT_OF_RANGE is then fair).
fn create_new(
    cx: &mut Cx<'_>,
    w: &World,
    v: Slot,
    shape: Shape,
    asked: u64,
    a: &Answer,
) -> Verdict {
    let source = match shape {
        Shape::FromSnapshot(_) | Shape::Clone(_) => Some(shape),
        _ => None,
    };
    if let Shape::Elsewhere { here_too: false } = shape
        && let Some(verdict) = refused_elsewhere(cx, w, a)
    {
        return verdict;
    }
    // The source must exist, and may be larger than the size asked for
    // (OUT_OF_RANGE is then fair).
    let Some((found, source_bytes)) = source_found(cx, w, source) else {
        return cx.either(w, a, |_, _, _| Ok(()));
    };
    if !found {
        let why = "the snapshot or volume it is to be filled from does not exist";
        return cx.must_fail(Rule::SourceNotFound, Code::NotFound, w, a, why);
    }
    if source_bytes > asked {
        cx.checked(Rule::KnownCode);
        match a {
            Answer::Refused {
                code: Code::OutOfRange,
                ..
            } => return Ok(vec![w.clone()]),
            Answer::Refused { code, message } if !a.unsure() && *code != Code::Aborted => {
                return Err(Breach {
                    rule: Rule::KnownCode,
                    detail: format!(
                        "answered {} {message:?} for a size below its source's {source_bytes} bytes; the code for that is OUT_OF_RANGE",
                        code.go_name()
                    ),
                });
            }
            _ => {}
        }
    }
    // A new volume: it should be made.
    cx.must_ok(Rule::ValidCallSucceeds, w, a, move |cx, w, r| {
        let made = volume_of(r)?;
        if let Some(m) = made {
            check_capacity(m.capacity_bytes, asked)?;
            check_topology(cx, shape, m)?;
        }
        let reached = made.is_some_and(|m| cx.facts.reaches_here(&m.accessible_topology));
        let away = match shape {
            Shape::Elsewhere { here_too } => Some(Away { here_too, reached }),
            _ => None,
        };
        if away.is_none() || reached {
            let granted = made.map_or(0, |m| m.capacity_bytes).max(asked);
            super::capacity::granted(cx, w, granted);
        } else {
            // Made elsewhere, or who knows where: what this node's segment
            // can still take is unknown.
            w.capacity = None;
        }
        let vol = Vol {
            id: made.map(|m| m.volume_id.clone()),
            asked,
            bytes: made.map_or(0, |m| m.capacity_bytes),
            published: None,
            source,
            away,
        };
        w.volumes.insert(v, vol);
        Ok(())
    })
}

/// A CreateVolume whose requisite topology is another node's segment
/// alone: RESOURCE_EXHAUSTED (it cannot be made there) changes nothing;
/// any other error names the wrong situation. `None`: judged as any new
/// volume (OK, ABORTED, unsure).
fn refused_elsewhere(cx: &mut Cx<'_>, w: &World, a: &Answer) -> Option<Verdict> {
    let Answer::Refused { code, message } = a else {
        return None;
    };
    if a.unsure() || *code == Code::Aborted {
        return None;
    }
    cx.checked(Rule::KnownCode);
    if *code == Code::ResourceExhausted {
        return Some(Ok(vec![w.clone()]));
    }
    Some(Err(Breach {
        rule: Rule::KnownCode,
        detail: format!(
            "answered {} {message:?} for a requisite topology of another node's segment only; where a volume cannot be made there, the code is RESOURCE_EXHAUSTED",
            code.go_name()
        ),
    }))
}

/// Whether the snapshot or volume a create is to be filled from exists,
/// and its size (`(true, 0)` without a source); `None` when that cannot
/// be told (the source's own create or delete was lost).
fn source_found(cx: &Cx<'_>, w: &World, source: Option<Shape>) -> Option<(bool, u64)> {
    match source {
        Some(Shape::FromSnapshot(s)) => {
            let snap = w.snapshots.get(&s);
            Some((snap.is_some(), snap.map_or(0, |s| s.bytes)))
        }
        Some(Shape::Clone(from)) => match refers(cx, w, from) {
            Refers::Vol(vol) => Some((true, vol.bytes.max(vol.asked))),
            Refers::Gone => Some((false, 0)),
            Refers::Unsure => None,
        },
        _ => Some((true, 0)),
    }
}

fn check_capacity(bytes: u64, asked: u64) -> Result<(), Breach> {
    if bytes > 0 && bytes < asked {
        return Err(Breach {
            rule: Rule::CreateCapacity,
            detail: format!("a volume of {bytes} bytes, though required_bytes was {asked}"),
        });
    }
    Ok(())
}

/// A volume made for a CreateVolume that carried a topology requirement
/// is where its requisite segments allow.
fn check_topology(
    cx: &mut Cx<'_>,
    shape: Shape,
    made: &crate::driver::Volume,
) -> Result<(), Breach> {
    let Some(wanted) = cx.facts.requirement_for(shape, cx.names.elsewhere.as_ref()) else {
        return Ok(());
    };
    cx.checked(Rule::CreateTopology);
    if wanted.admits(&made.accessible_topology) {
        return Ok(());
    }
    Err(Breach {
        rule: Rule::CreateTopology,
        detail: format!(
            "volume {:?} is accessible from {:?}, which none of the requisite segments {:?} allows",
            made.volume_id, made.accessible_topology, wanted.requisite
        ),
    })
}

/// What deleting `vol` in `w` asks of the driver's choices, if anything.
fn in_use(w: &World, v: Slot, vol: &Vol) -> Option<Choice> {
    if vol.published.is_some() {
        Some(Choice::DeletePublished)
    } else if !w.node(v).is_empty() {
        Some(Choice::DeleteOnNode)
    } else if w.snapshots_of(v).next().is_some() {
        Some(Choice::DeleteWithSnapshots)
    } else {
        None
    }
}

/// DeleteVolume: a volume that is gone, OK; one in use, refused or not,
/// but the same way every time.
pub fn delete(cx: &mut Cx<'_>, w: &World, v: Slot, a: &Answer) -> Verdict {
    let vol = match refers(cx, w, v) {
        Refers::Gone => {
            return cx.must_ok(Rule::DeleteIdempotent, w, a, |_, _, _| Ok(()));
        }
        Refers::Unsure => {
            return cx.either(w, a, move |_, w, _| {
                w.volumes.remove(&v);
                Ok(())
            });
        }
        Refers::Vol(vol) => vol,
    };
    let remove = move |_: &mut Cx<'_>, w: &mut World, _: Option<&Response>| {
        w.volumes.remove(&v);
        Ok(())
    };
    let Some(choice) = in_use(w, v, vol) else {
        return cx.found(Rule::ValidCallSucceeds, w, a, remove);
    };
    cx.checked(Rule::DeleteInUseConsistent);
    let before = w.choices.get(&choice).copied();
    let what = match choice {
        Choice::DeletePublished => "published to a node",
        Choice::DeleteOnNode => "staged or published on the node",
        Choice::DeleteWithSnapshots => "the source of snapshots",
    };
    let refused = |code: Code, message: &str| {
        let mut next = w.clone();
        if before == Some(true) {
            return Err(Breach {
                rule: Rule::DeleteInUseConsistent,
                detail: format!(
                    "answered {} {message:?} for a volume {what}; another such volume was deleted",
                    code.go_name()
                ),
            });
        }
        next.choices.insert(choice, false);
        Ok(vec![next])
    };
    match a {
        Answer::Refused {
            code: Code::FailedPrecondition,
            message,
        } => refused(Code::FailedPrecondition, message),
        Answer::Reply(_) => {
            if before == Some(false) {
                return Err(Breach {
                    rule: Rule::DeleteInUseConsistent,
                    detail: format!(
                        "deleted a volume {what}, though it refused to delete another such volume"
                    ),
                });
            }
            let mut next = w.clone();
            next.choices.insert(choice, true);
            next.volumes.remove(&v);
            Ok(vec![next])
        }
        _ => cx.either(w, a, move |_, w, _| {
            w.choices.insert(choice, true);
            w.volumes.remove(&v);
            Ok(())
        }),
    }
}

/// ControllerPublishVolume: to a node that does not exist, or of a volume
/// that does not, NOT_FOUND; repeated, OK; with another read-only flag,
/// ALREADY_EXISTS.
pub fn publish(
    cx: &mut Cx<'_>,
    w: &World,
    v: Slot,
    known_node: bool,
    readonly: bool,
    a: &Answer,
) -> Verdict {
    let vol = match refers(cx, w, v) {
        Refers::Gone => {
            let why = "the volume does not exist";
            return cx.must_fail(Rule::UnknownObject, Code::NotFound, w, a, why);
        }
        Refers::Unsure => {
            return cx.either(w, a, move |_, w, _| set_published(w, v, Some(readonly)));
        }
        Refers::Vol(vol) => vol,
    };
    if !known_node {
        let why = "the node does not exist";
        return cx.must_fail(Rule::UnknownObject, Code::NotFound, w, a, why);
    }
    let apply = move |_: &mut Cx<'_>, w: &mut World, _: Option<&Response>| {
        set_published(w, v, Some(readonly))
    };
    match vol.published {
        Some(ro) if ro == readonly => cx.found(Rule::PublishIdempotent, w, a, apply),
        Some(_) => {
            let why = "published to the node already with the other read-only flag";
            cx.must_fail(Rule::PublishIdempotent, Code::AlreadyExists, w, a, why)
        }
        None => match a {
            // The node's limit of volumes: a fair refusal.
            Answer::Refused {
                code: Code::ResourceExhausted,
                ..
            } => Ok(vec![w.clone()]),
            _ => cx.found(Rule::ValidCallSucceeds, w, a, apply),
        },
    }
}

fn set_published(w: &mut World, v: Slot, to: Option<bool>) -> Result<(), Breach> {
    if let Some(vol) = w.volumes.get_mut(&v) {
        vol.published = to;
    }
    Ok(())
}

/// ControllerUnpublishVolume: OK whether or not published.
pub fn unpublish(cx: &mut Cx<'_>, w: &World, v: Slot, a: &Answer) -> Verdict {
    let clear =
        move |_: &mut Cx<'_>, w: &mut World, _: Option<&Response>| set_published(w, v, None);
    match refers(cx, w, v) {
        // SHOULD be OK where the volume is gone; NOT_FOUND is allowed.
        Refers::Gone | Refers::Unsure => cx.either(w, a, clear),
        Refers::Vol(vol) if vol.published.is_none() => {
            cx.found(Rule::UnpublishIdempotent, w, a, clear)
        }
        // While the node holds it the CO must not detach: a driver may refuse.
        Refers::Vol(_) if !w.node(v).is_empty() => cx.either(w, a, clear),
        Refers::Vol(_) => cx.found(Rule::ValidCallSucceeds, w, a, clear),
    }
}

/// ValidateVolumeCapabilities: NOT_FOUND for a volume that does not exist;
/// the capability it was made with, confirmed.
pub fn validate(cx: &mut Cx<'_>, w: &World, v: Slot, a: &Answer) -> Verdict {
    match refers(cx, w, v) {
        Refers::Gone => {
            let why = "the volume does not exist";
            cx.must_fail(Rule::UnknownObject, Code::NotFound, w, a, why)
        }
        Refers::Unsure => cx.either(w, a, |_, _, _| Ok(())),
        Refers::Vol(_) => cx.found(Rule::ValidCallSucceeds, w, a, |cx, _, r| {
            cx.checked(Rule::ValidateConfirms);
            if let Some(Response::Validated {
                confirmed: None,
                message,
                ..
            }) = r
            {
                cx.note(
                    Rule::ValidateConfirms,
                    format!(
                        "not confirmed ({message:?}) the capability the volume was created with"
                    ),
                );
            }
            Ok(())
        }),
    }
}

/// ControllerGetVolume: NOT_FOUND for a volume that does not exist; the
/// volume, with the nodes it is published to.
pub fn get(cx: &mut Cx<'_>, w: &World, v: Slot, a: &Answer) -> Verdict {
    match refers(cx, w, v) {
        Refers::Gone => {
            let why = "the volume does not exist";
            cx.must_fail(Rule::UnknownObject, Code::NotFound, w, a, why)
        }
        Refers::Unsure => cx.either(w, a, |_, _, _| Ok(())),
        Refers::Vol(vol) => {
            let published = vol.published.is_some();
            let id = vol.id.clone().unwrap_or_default();
            cx.found(Rule::ValidCallSucceeds, w, a, move |cx, _, r| {
                let Some(Response::ControllerVolume(l)) = r else {
                    return Ok(());
                };
                if l.volume.volume_id != id {
                    return Err(Breach {
                        rule: Rule::WellFormed,
                        detail: format!("answered volume {:?} for {id:?}", l.volume.volume_id),
                    });
                }
                published_nodes(cx, &id, published, &l.published_node_ids)
            })
        }
    }
}

/// `ids` are the nodes a volume is reported published to: this node iff
/// `published` (only judged with LIST_VOLUMES_PUBLISHED_NODES).
fn published_nodes(
    cx: &mut Cx<'_>,
    id: &str,
    published: bool,
    ids: &[String],
) -> Result<(), Breach> {
    if !cx
        .facts
        .has(ControllerCapability::ListVolumesPublishedNodes)
    {
        return Ok(());
    }
    cx.checked(Rule::PublishedNodes);
    let node = &cx.facts.node_id;
    let listed = ids.iter().any(|n| n == node);
    let others: Vec<&String> = ids.iter().filter(|n| *n != node).collect();
    if listed != published || !others.is_empty() {
        let is = if published { "is" } else { "is not" };
        return Err(Breach {
            rule: Rule::PublishedNodes,
            detail: format!(
                "volume {id:?} reported published to {ids:?}; it {is} published to node {node:?}, and to no other"
            ),
        });
    }
    Ok(())
}

/// ControllerExpandVolume: NOT_FOUND for a volume that does not exist;
/// the new capacity, at least what was asked.
pub fn expand(cx: &mut Cx<'_>, w: &World, v: Slot, grow: u8, a: &Answer) -> Verdict {
    let to = cx.names.grown(grow);
    match refers(cx, w, v) {
        Refers::Gone => {
            let why = "the volume does not exist";
            cx.must_fail(Rule::UnknownObject, Code::NotFound, w, a, why)
        }
        Refers::Unsure => cx.either(w, a, |_, _, _| Ok(())),
        Refers::Vol(_) => {
            let grown = move |cx: &mut Cx<'_>, w: &mut World, r: Option<&Response>| {
                cx.checked(Rule::ExpandCapacity);
                let Some(Response::ControllerExpanded { capacity_bytes, .. }) = r else {
                    return Ok(());
                };
                if *capacity_bytes < to {
                    return Err(Breach {
                        rule: Rule::ExpandCapacity,
                        detail: format!("answered {capacity_bytes} bytes for required_bytes {to}"),
                    });
                }
                if let Some(vol) = w.volumes.get_mut(&v) {
                    vol.bytes = *capacity_bytes;
                    vol.asked = vol.asked.max(to);
                }
                Ok(())
            };
            match a {
                // In use without online expansion, or past what the
                // storage allows: fair refusals.
                Answer::Refused {
                    code: Code::FailedPrecondition | Code::OutOfRange,
                    ..
                } => Ok(vec![w.clone()]),
                _ => cx.found(Rule::ValidCallSucceeds, w, a, grown),
            }
        }
    }
}

/// ListVolumes, every page: every volume of the run once, none that is
/// gone, each with the nodes it is published to.
pub fn list(cx: &mut Cx<'_>, w: &World, _page: u8, a: &Answer) -> Verdict {
    cx.must_ok(Rule::ValidCallSucceeds, w, a, |cx, w, r| {
        let Some(Response::Volumes { entries, .. }) = r else {
            return Ok(());
        };
        cx.checked(Rule::ListComplete);
        let again = twice(entries.iter().map(|e| e.volume.volume_id.as_str()));
        if !again.is_empty() {
            return Err(Breach {
                rule: Rule::ListComplete,
                detail: format!("listed {again:?} more than once"),
            });
        }
        let listed: std::collections::BTreeMap<&str, &crate::driver::ListedVolume> = entries
            .iter()
            .map(|e| (e.volume.volume_id.as_str(), e))
            .collect();
        for (slot, vol) in &w.volumes {
            let Some(id) = &vol.id else { continue };
            let Some(entry) = listed.get(id.as_str()) else {
                return Err(Breach {
                    rule: Rule::ListComplete,
                    detail: format!(
                        "volume {id:?} (v{slot}) is missing from {} volumes listed",
                        entries.len()
                    ),
                });
            };
            published_nodes(cx, id, vol.published.is_some(), &entry.published_node_ids)?;
        }
        let alive = w.volume_ids();
        for (slot, id) in &cx.known.volumes {
            // A slot remade by a lost call may have its old id again.
            let remade = w.volumes.get(slot).is_some_and(|v| v.id.is_none());
            if listed.contains_key(id.as_str()) && !alive.contains(id.as_str()) && !remade {
                return Err(Breach {
                    rule: Rule::ListComplete,
                    detail: format!("listed volume {id:?} (v{slot}), which was deleted"),
                });
            }
        }
        Ok(())
    })
}

/// ControllerModifyVolume: without mutable parameters, INVALID_ARGUMENT;
/// of a volume that does not exist, NOT_FOUND; else the change is made.
pub fn modify(cx: &mut Cx<'_>, w: &World, v: Slot, empty: bool, a: &Answer) -> Verdict {
    if empty {
        let why = "mutable_parameters is REQUIRED";
        return cx.must_fail(Rule::RequiredFields, Code::InvalidArgument, w, a, why);
    }
    match refers(cx, w, v) {
        Refers::Gone => {
            let why = "the volume does not exist";
            cx.must_fail(Rule::UnknownObject, Code::NotFound, w, a, why)
        }
        Refers::Unsure => cx.either(w, a, |_, _, _| Ok(())),
        Refers::Vol(_) => cx.found(Rule::ValidCallSucceeds, w, a, |_, _, _| Ok(())),
    }
}
