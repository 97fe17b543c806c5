//! The oracle: given a world and a step's answer, the worlds that explain
//! the answer, or the rule it breaks. Each RPC's judgement reads as the
//! specification's table for it: what must succeed, which code each
//! condition gets, what a driver may choose.

mod capacity;
mod controller;
mod groups;
mod node;
mod snapshot;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::rules::{Level, Rule, Tally};
use super::step::{Names, Shape, Slot, Step};
use super::world::{Vol, World};
use crate::driver::{ControllerCapability, NodeCapability, PluginCapability, Response};
use crate::{Code, Status};

pub use node::observe;

/// What came back for a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// The driver answered OK (a walk: every page's entries, in order).
    Reply(#[serde(with = "reply")] Response),
    /// The driver answered an error.
    Refused {
        /// The gRPC code.
        code: Code,
        /// The driver's message.
        message: String,
    },
    /// The driver answered OK with a message the specification does not
    /// allow (a REQUIRED field missing).
    Malformed(String),
    /// No answer: the connection failed, the driver was killed, or the
    /// call timed out. It may or may not have taken effect.
    Lost(String),
    /// What a write through one target and a read through another found.
    Data {
        /// The write: `Err` says why it failed.
        wrote: Result<(), crate::machine::EffectFailed>,
        /// What the read found (`None`: no such file).
        read: Result<Option<String>, crate::machine::EffectFailed>,
        /// What was written.
        token: String,
    },
    /// The driver was killed and came back.
    Restarted,
}

/// Responses are kept in traces only as their debug text: a replay sends
/// the steps again and judges the new answers.
mod reply {
    use crate::driver::Response;

    pub fn serialize<S: serde::Serializer>(r: &Response, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{r:?}"))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Response, D::Error> {
        let _: String = serde::Deserialize::deserialize(d)?;
        Ok(Response::Empty)
    }
}

impl Answer {
    /// A refusal from a status.
    pub fn refused(s: &Status) -> Answer {
        Answer::Refused {
            code: s.code,
            message: s.message.clone(),
        }
    }

    /// True when no answer came through: the call timed out, the
    /// connection broke, the driver was unavailable.
    pub fn lost(&self) -> bool {
        match self {
            Answer::Lost(_) => true,
            Answer::Refused { code, .. } => matches!(
                code,
                Code::Cancelled | Code::DeadlineExceeded | Code::Unavailable
            ),
            _ => false,
        }
    }

    /// True when the answer says nothing of whether the call took effect.
    pub fn unsure(&self) -> bool {
        match self {
            Answer::Lost(_) => true,
            Answer::Refused { code, .. } => matches!(
                code,
                Code::Cancelled
                    | Code::DeadlineExceeded
                    | Code::Unavailable
                    | Code::Internal
                    | Code::Unknown
            ),
            _ => false,
        }
    }
}

/// How an answer reads in a trace.
impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Reply(r) => write!(f, "OK {}", brief(r)),
            Answer::Refused { code, message } => write!(f, "{} {message:?}", code.go_name()),
            Answer::Malformed(m) => write!(f, "OK, malformed: {m}"),
            Answer::Lost(why) => write!(f, "no answer ({why})"),
            Answer::Data { wrote, read, .. } => match (wrote, read) {
                (Err(e), _) => write!(f, "write failed: {e}"),
                (Ok(()), Ok(Some(_))) => write!(f, "written, read back"),
                (Ok(()), Ok(None)) => write!(f, "written, not found through the other target"),
                (Ok(()), Err(e)) => write!(f, "written, read failed: {e}"),
            },
            Answer::Restarted => write!(f, "restarted"),
        }
    }
}

/// The part of an answer a trace shows.
fn brief(r: &Response) -> String {
    match r {
        Response::Volume(v) => format!("volume_id={:?} capacity={}", v.volume_id, v.capacity_bytes),
        Response::Volumes { entries, .. } => {
            let ids: Vec<&str> = entries
                .iter()
                .map(|e| e.volume.volume_id.as_str())
                .collect();
            format!("{} volumes {ids:?}", ids.len())
        }
        Response::Snapshot(s) => format!(
            "snapshot_id={:?} of {:?}",
            s.snapshot_id, s.source_volume_id
        ),
        Response::Snapshots { entries, .. } => {
            let ids: Vec<&str> = entries.iter().map(|e| e.snapshot_id.as_str()).collect();
            format!("{} snapshots {ids:?}", ids.len())
        }
        Response::ControllerExpanded { capacity_bytes, .. } => format!("capacity={capacity_bytes}"),
        Response::ControllerVolume(l) => format!(
            "volume_id={:?} published to {:?}",
            l.volume.volume_id, l.published_node_ids
        ),
        Response::Validated { confirmed, .. } => format!("confirmed={}", confirmed.is_some()),
        Response::GroupSnapshot(g) => {
            let members: Vec<&str> = g.snapshots.iter().map(|s| s.snapshot_id.as_str()).collect();
            format!(
                "group_snapshot_id={:?} members {members:?}",
                g.group_snapshot_id
            )
        }
        _ => String::new(),
    }
}

/// What the driver said of itself before the run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    /// It has a Controller service.
    pub controller_service: bool,
    /// Its controller capabilities.
    pub controller: BTreeSet<ControllerCapability>,
    /// Its node capabilities.
    pub node: BTreeSet<NodeCapability>,
    /// Its plugin capabilities.
    pub plugin: BTreeSet<PluginCapability>,
    /// The node's id (NodeGetInfo).
    pub node_id: String,
    /// It has a Node service (NodeGetInfo answered).
    pub node_service: bool,
    /// It cuts group snapshots (CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT).
    #[serde(default)]
    pub group_snapshots: bool,
    /// The node's topology segment (NodeGetInfo), when the driver has
    /// VOLUME_ACCESSIBILITY_CONSTRAINTS.
    #[serde(default)]
    pub topology: Option<crate::driver::Topology>,
}

impl Facts {
    /// The controller has `c`.
    pub fn has(&self, c: ControllerCapability) -> bool {
        self.controller_service && self.controller.contains(&c)
    }

    /// The node has `c`.
    pub fn node_has(&self, c: NodeCapability) -> bool {
        self.node_service && self.node.contains(&c)
    }

    /// What a CreateVolume requires of where its volume is, as
    /// external-provisioner builds it for a claim whose pod waits on this
    /// node (WaitForFirstConsumer): the node's segment, requisite and
    /// preferred. None for a driver without topology.
    pub fn requirement(&self) -> Option<crate::driver::TopologyRequirement> {
        let segment = self.topology.clone().filter(|t| !t.is_empty())?;
        Some(crate::driver::TopologyRequirement {
            requisite: vec![segment.clone()],
            preferred: vec![segment],
        })
    }

    /// What a CreateVolume of `shape` requires of where its volume is:
    /// for [`Shape::Elsewhere`], another node's segment (`given`, else one
    /// made up from this node's keys), alone or beside this node's and
    /// preferred to it, as external-provisioner sends every node's segment
    /// for a claim bound at once, starting at its own pick; otherwise
    /// [`Facts::requirement`].
    pub fn requirement_for(
        &self,
        shape: Shape,
        given: Option<&crate::driver::Topology>,
    ) -> Option<crate::driver::TopologyRequirement> {
        let Shape::Elsewhere { here_too } = shape else {
            return self.requirement();
        };
        let here = self.topology.clone().filter(|t| !t.is_empty())?;
        let other = given.cloned().unwrap_or_else(|| made_up_segment(&here));
        let mut requisite = vec![other.clone()];
        let mut preferred = vec![other];
        if here_too {
            requisite.push(here.clone());
            requisite.sort_by(|a, b| a.iter().cmp(b.iter()));
            preferred.push(here);
        }
        Some(crate::driver::TopologyRequirement {
            requisite,
            preferred,
        })
    }

    /// This node reaches a volume accessible from `at`: it says nothing
    /// (accessible from anywhere), or one of its segments has only keys and
    /// values of this node's segment.
    pub fn reaches_here(&self, at: &[crate::driver::Topology]) -> bool {
        let Some(here) = &self.topology else {
            return true;
        };
        at.is_empty()
            || at
                .iter()
                .any(|segment| segment.iter().all(|(k, v)| here.get(k) == Some(v)))
    }
}

/// A segment no node has: this node's keys, each with a value of its own.
fn made_up_segment(here: &crate::driver::Topology) -> crate::driver::Topology {
    let value = if here.values().any(|v| v == ELSEWHERE) {
        format!("{ELSEWHERE}-2")
    } else {
        ELSEWHERE.to_string()
    };
    here.keys().map(|k| (k, value.clone())).collect()
}

/// The value of a made-up segment's keys (a valid label value).
const ELSEWHERE: &str = "volplane-check-elsewhere";

/// The ids and contexts the driver handed out, by slot: what a step's
/// request carries. A slot keeps the last id answered for it, also after
/// its volume is deleted (a call with that id must then find nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Known {
    /// Volume ids.
    pub volumes: BTreeMap<Slot, String>,
    /// Snapshot ids.
    pub snapshots: BTreeMap<Slot, String>,
    /// Group snapshot ids.
    #[serde(default)]
    pub groups: BTreeMap<Slot, String>,
    /// CreateVolume's volume_context.
    pub volume_context: BTreeMap<Slot, crate::driver::Attributes>,
    /// ControllerPublishVolume's publish_context.
    pub publish_context: BTreeMap<Slot, crate::driver::Attributes>,
    /// The id the node holds each slot's volume by, while it holds it.
    pub node: BTreeMap<Slot, String>,
}

/// A rule broken, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Breach {
    /// The rule.
    pub rule: Rule,
    /// What happened, for a person.
    pub detail: String,
}

/// The possible worlds after a step, or the rule its answer breaks.
pub type Verdict = Result<Vec<World>, Breach>;

/// What a judgement reads and where it reports: the run's names, the
/// driver's facts, the ids known, whether another call on the step's
/// object may be in flight, and (for the one evaluation that counts) the
/// tally and the SHOULD-rules broken.
#[derive(Debug)]
pub struct Cx<'a> {
    /// The run's names.
    pub names: &'a Names,
    /// The driver's capabilities.
    pub facts: &'a Facts,
    /// The ids handed out so far.
    pub known: &'a Known,
    /// Another call on the same object may be in flight (ABORTED is fair).
    pub busy: bool,
    /// The world judged in is the only one possible (SHOULD-rules are
    /// noted only then).
    pub certain: bool,
    /// Counted here when this is the evaluation that counts.
    pub tally: Option<&'a mut Tally>,
    /// SHOULD-rules broken, when this is the evaluation that counts.
    pub notes: Vec<Breach>,
}

/// What an answer says, for judging.
enum Got<'a> {
    Ok(&'a Response),
    Err(Code, &'a str),
    /// It may or may not have taken effect.
    Unsure,
}

impl<'a> Cx<'a> {
    fn checked(&mut self, rule: Rule) {
        if let Some(t) = self.tally.as_deref_mut() {
            t.checked(rule);
        }
    }

    /// A SHOULD-rule broken: noted, and the judgement goes on.
    fn note(&mut self, rule: Rule, detail: String) {
        debug_assert_eq!(rule.level(), Level::Should);
        // With another call on the object in flight, the order judged
        // first need not be the order that happened; with more than one
        // world, the one judged first need not be the true one.
        if self.busy || !self.certain {
            return;
        }
        if let Some(t) = self.tally.as_deref_mut() {
            t.violated(rule);
            self.notes.push(Breach { rule, detail });
        }
    }

    fn breach(&mut self, rule: Rule, detail: String) -> Breach {
        Breach { rule, detail }
    }

    /// Classifies `a`; a malformed answer breaks [`Rule::WellFormed`]. An
    /// ABORTED with nothing else in flight is noted and taken as no effect.
    fn got<'b>(&mut self, a: &'b Answer) -> Result<Got<'b>, Breach> {
        if a.unsure() {
            return Ok(Got::Unsure);
        }
        match a {
            Answer::Reply(r) => Ok(Got::Ok(r)),
            Answer::Refused { code, message } => Ok(Got::Err(*code, message)),
            Answer::Malformed(m) => Err(self.breach(Rule::WellFormed, m.clone())),
            _ => Ok(Got::Unsure),
        }
    }

    /// The answers every judgement takes alike: OK applies `apply`; an
    /// unsure answer leaves both the world and the applied one; ABORTED
    /// (noted when nothing else was in flight) changes nothing. `None` for
    /// any other error, which the caller judges.
    fn taken(
        &mut self,
        w: &World,
        got: &Got<'_>,
        apply: &impl Fn(&mut Cx<'a>, &mut World, Option<&Response>) -> Result<(), Breach>,
    ) -> Option<Verdict> {
        let mut next = w.clone();
        Some(match *got {
            Got::Ok(r) => apply(self, &mut next, Some(r)).map(|()| vec![next]),
            Got::Unsure => apply(self, &mut next, None).map(|()| vec![w.clone(), next]),
            Got::Err(Code::Aborted, message) => {
                self.unbusy_abort(message);
                Ok(vec![w.clone()])
            }
            Got::Err(..) => return None,
        })
    }

    /// The call must succeed: any error but ABORTED breaks `rule` — or,
    /// for a SHOULD `rule`, is noted and changes nothing.
    fn must_ok(
        &mut self,
        rule: Rule,
        w: &World,
        a: &Answer,
        apply: impl Fn(&mut Cx<'a>, &mut World, Option<&Response>) -> Result<(), Breach>,
    ) -> Verdict {
        self.checked(rule);
        let got = self.got(a)?;
        if let Some(verdict) = self.taken(w, &got, &apply) {
            return verdict;
        }
        let Got::Err(code, message) = got else {
            unreachable!("taken judges every answer but an error")
        };
        let detail = format!("answered {} {message:?}; OK was due", code.go_name());
        if rule.level() == Level::Should {
            self.note(rule, detail);
            Ok(vec![w.clone()])
        } else {
            Err(self.breach(rule, detail))
        }
    }

    /// The call must fail with `code` (or ABORTED when fair), changing nothing.
    fn must_fail(&mut self, rule: Rule, code: Code, w: &World, a: &Answer, why: &str) -> Verdict {
        self.must_fail_with(rule, &[code], w, a, why)
    }

    /// The call must fail with one of `codes` (or ABORTED), changing nothing.
    fn must_fail_with(
        &mut self,
        rule: Rule,
        codes: &[Code],
        w: &World,
        a: &Answer,
        why: &str,
    ) -> Verdict {
        self.checked(rule);
        let due: Vec<&str> = codes.iter().map(|c| c.go_name()).collect();
        let due = due.join(" or ");
        match self.got(a)? {
            Got::Err(c, _) if codes.contains(&c) => Ok(vec![w.clone()]),
            Got::Err(Code::Aborted, message) => {
                self.unbusy_abort(message);
                Ok(vec![w.clone()])
            }
            Got::Unsure => Ok(vec![w.clone()]),
            Got::Ok(_) => Err(self.breach(rule, format!("answered OK; {due} was due: {why}"))),
            Got::Err(c, message) => Err(self.breach(
                rule,
                format!("answered {} {message:?}; {due} was due: {why}", c.go_name()),
            )),
        }
    }

    /// A CreateVolume of a new name sent without the secrets the driver
    /// was declared to need: any error will do; OK made a volume with
    /// credentials from somewhere else.
    fn made_nothing_without_secrets(&mut self, w: &World, a: &Answer) -> Verdict {
        let rule = Rule::CredentialsFromTheCall;
        self.checked(rule);
        match self.got(a)? {
            Got::Ok(r) => {
                let made = match r {
                    Response::Volume(v) => format!(" with volume {}", v.volume_id),
                    _ => String::new(),
                };
                Err(self.breach(
                    rule,
                    format!(
                        "answered OK{made}, though the call carried none of the secrets the driver was declared to need (--secrets-required): it made the volume with credentials from somewhere else"
                    ),
                ))
            }
            Got::Err(Code::Aborted, message) => {
                self.unbusy_abort(message);
                Ok(vec![w.clone()])
            }
            Got::Err(..) | Got::Unsure => Ok(vec![w.clone()]),
        }
    }

    /// As [`Cx::must_ok`], for a call on an object the driver acknowledged:
    /// NOT_FOUND says it lost it ([`Rule::Acknowledged`]).
    fn found(
        &mut self,
        rule: Rule,
        w: &World,
        a: &Answer,
        apply: impl Fn(&mut Cx<'a>, &mut World, Option<&Response>) -> Result<(), Breach>,
    ) -> Verdict {
        self.checked(Rule::Acknowledged);
        if let Answer::Refused {
            code: Code::NotFound,
            message,
        } = a
        {
            return Err(self.breach(
                Rule::Acknowledged,
                format!("answered NotFound {message:?} for an object it acknowledged and that was not deleted"),
            ));
        }
        self.must_ok(rule, w, a, apply)
    }

    /// The driver may do either: OK applies `apply`, an error changes
    /// nothing, an unsure answer leaves both.
    fn either(
        &mut self,
        w: &World,
        a: &Answer,
        apply: impl Fn(&mut Cx<'a>, &mut World, Option<&Response>) -> Result<(), Breach>,
    ) -> Verdict {
        let got = self.got(a)?;
        self.taken(w, &got, &apply)
            .unwrap_or_else(|| Ok(vec![w.clone()]))
    }

    /// ABORTED taken as no effect: noted when nothing else on the object
    /// was in flight.
    fn unbusy_abort(&mut self, message: &str) {
        self.checked(Rule::AbortedOnlyWhenBusy);
        if !self.busy {
            self.note(
                Rule::AbortedOnlyWhenBusy,
                format!("ABORTED {message:?} with no other call on the object in flight"),
            );
        }
    }

    /// The id a node step's request names for volume slot `v`: the one
    /// the node holds it by, while it holds it.
    fn node_volume_id(&self, v: Slot) -> String {
        match self.known.node.get(&v) {
            Some(id) => id.clone(),
            None => self.volume_id(v),
        }
    }

    /// The id a step's request names for volume slot `v`.
    fn volume_id(&self, v: Slot) -> String {
        self.known
            .volumes
            .get(&v)
            .cloned()
            .unwrap_or_else(|| self.names.missing_volume(v))
    }
}

/// What the id a request carried for slot `v` names, in world `w`.
enum Refers<'w> {
    /// The slot's volume.
    Vol(&'w Vol),
    /// No volume: the slot's volume never existed or was deleted.
    Gone,
    /// Cannot tell: the slot's volume was made by a call whose answer was
    /// lost, or the id now belongs to another slot's volume.
    Unsure,
}

fn refers<'w>(cx: &Cx<'_>, w: &'w World, v: Slot) -> Refers<'w> {
    refers_to(w, v, &cx.volume_id(v))
}

/// What the id a node step's request carried for slot `v` names.
fn refers_node<'w>(cx: &Cx<'_>, w: &'w World, v: Slot) -> Refers<'w> {
    refers_to(w, v, &cx.node_volume_id(v))
}

fn refers_to<'w>(w: &'w World, v: Slot, id: &str) -> Refers<'w> {
    match w.volumes.get(&v) {
        Some(vol) if vol.id.as_deref() == Some(id) => Refers::Vol(vol),
        Some(_) => Refers::Unsure,
        None if w.volumes.values().any(|o| o.id.as_deref() == Some(id)) => Refers::Unsure,
        None => Refers::Gone,
    }
}

/// The worlds that explain `answer` to `step` in `w`, or the rule broken.
pub fn judge(cx: &mut Cx<'_>, w: &World, step: &Step, answer: &Answer) -> Verdict {
    use Step::*;
    match *step {
        CreateVolume { v, shape } => controller::create(cx, w, v, shape, answer),
        DeleteVolume { v } => capacity::freed(controller::delete(cx, w, v, answer)),
        ControllerPublish {
            v,
            known_node,
            readonly,
        } => controller::publish(cx, w, v, known_node, readonly, answer),
        ControllerUnpublish { v } => controller::unpublish(cx, w, v, answer),
        Validate { v } => controller::validate(cx, w, v, answer),
        GetVolume { v } => controller::get(cx, w, v, answer),
        ControllerExpand { v, grow } => controller::expand(cx, w, v, grow, answer),
        ListVolumes { page } => controller::list(cx, w, page, answer),
        ListVolumesBadToken => cx.must_fail(
            Rule::ListBadToken,
            Code::Aborted,
            w,
            answer,
            "no page ever returned that token",
        ),
        GetCapacity => capacity::reported(cx, w, answer),
        ControllerModify { v, empty } => controller::modify(cx, w, v, empty, answer),
        NodeStage { v, other_mode } => node::stage(cx, w, v, other_mode, answer),
        NodeUnstage { v } => node::unstage(cx, w, v, answer),
        NodePublish { v, t, readonly } => node::publish(cx, w, v, t, readonly, answer),
        NodeUnpublish { v, t } => node::unpublish(cx, w, v, t, answer),
        Stats { v, at } => node::stats(cx, w, v, at, answer),
        NodeExpand { v, t, grow } => node::expand(cx, w, v, t, grow, answer),
        Data { v, from, to } => node::data(cx, w, v, from, to, answer),
        CreateSnapshot { s, v } => snapshot::create(cx, w, s, v, answer),
        DeleteSnapshot { s } => capacity::freed(snapshot::delete(cx, w, s, answer)),
        ListSnapshots { page } => snapshot::list(cx, w, page, answer),
        CreateGroupSnapshot { g, a, b } => groups::create(cx, w, g, (a, b), answer),
        DeleteGroupSnapshot { g } => capacity::freed(groups::delete(cx, w, g, answer)),
        Restart => Ok(vec![w.clone()]),
    }
}

/// Checks one page of a walk: no more than `max` entries (0: any), a
/// token not seen before. `Err` says what broke [`Rule::ListComplete`].
pub fn page(max: u8, entries: usize, token: &str, seen: &BTreeSet<String>) -> Result<(), Breach> {
    if max > 0 && entries > usize::from(max) {
        return Err(Breach {
            rule: Rule::ListComplete,
            detail: format!("a page of {entries} entries, though max_entries was {max}"),
        });
    }
    if !token.is_empty() && seen.contains(token) {
        return Err(Breach {
            rule: Rule::ListComplete,
            detail: format!("next_token {token:?} again: the pages go round in a loop"),
        });
    }
    Ok(())
}

/// Every id listed once: the ids listed twice, if any.
fn twice<'a>(ids: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = BTreeSet::new();
    let mut again: Vec<&str> = ids.filter(|id| !seen.insert(*id)).collect();
    again.dedup();
    again
}
