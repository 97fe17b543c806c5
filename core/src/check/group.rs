//! Judging the steps that were in flight together: the answers must be
//! those of *some* order of the steps, in *some* world the earlier answers
//! left possible; the node must look as one of those worlds says.

use std::collections::BTreeSet;

use super::oracle::{self, Answer, Breach, Cx, Facts, Known};
use super::rules::{Rule, Tally};
use super::step::{Names, Slot, Step};
use super::world::{NodeSeen, World};

/// A step that was sent, and what came back.
#[derive(Debug, Clone)]
pub struct Sent {
    /// The step.
    pub step: Step,
    /// Its answer.
    pub answer: Answer,
    /// Another call on its object may have been in flight.
    pub busy: bool,
}

/// What the node showed after the group, and which paths it was asked about.
#[derive(Debug)]
pub struct Look<'a> {
    /// What was seen.
    pub seen: &'a NodeSeen,
    /// Every target ever used.
    pub targets: &'a [(Slot, Slot)],
}

/// Most worlds kept at once: past it, the oldest explanations go.
pub const MOST_WORLDS: usize = 64;

/// What judging a group found.
#[derive(Debug)]
pub struct Judged {
    /// The worlds that explain every answer (empty: none does).
    pub worlds: Vec<World>,
    /// Why not, when none does.
    pub breach: Option<Breach>,
    /// SHOULD-rules broken on the way.
    pub notes: Vec<Breach>,
}

/// Judges `group` from `worlds`; counts the rules checked in `tally` (on
/// the evaluation in issue order, from the first world).
pub fn judge(
    worlds: &[World],
    group: &[Sent],
    names: &Names,
    facts: &Facts,
    known: &Known,
    look: Option<Look<'_>>,
    tally: &mut Tally,
) -> Judged {
    let mut out: Vec<World> = Vec::new();
    let mut first: Option<Breach> = None;
    // In each world and order, which step broke which rule first (None:
    // none did, or only the look did).
    let mut faults: Vec<Option<(usize, Rule)>> = Vec::new();
    let mut notes = Vec::new();
    let removed = unpublished(group);
    for (wi, w) in worlds.iter().enumerate() {
        for (pi, order) in orders(group.len()).into_iter().enumerate() {
            let primary = wi == 0 && pi == 0;
            let mut ws = vec![w.clone()];
            let mut breach = None;
            let mut fault = None;
            for &i in &order {
                let sent = &group[i];
                let mut next = Vec::new();
                for (k, w) in ws.iter().enumerate() {
                    let mut cx = Cx {
                        names,
                        facts,
                        known,
                        busy: sent.busy,
                        certain: worlds.len() == 1 && ws.len() == 1,
                        tally: if primary && k == 0 {
                            Some(&mut *tally)
                        } else {
                            None
                        },
                        notes: Vec::new(),
                    };
                    match oracle::judge(&mut cx, w, &sent.step, &sent.answer) {
                        Ok(more) => next.extend(more),
                        Err(b) => {
                            fault.get_or_insert((i, b.rule));
                            breach.get_or_insert(b);
                        }
                    }
                    if primary && k == 0 {
                        notes.append(&mut cx.notes);
                    }
                }
                ws = next;
                if ws.is_empty() {
                    break;
                }
            }
            if let Some(look) = &look {
                let tally = primary.then_some(&mut *tally);
                seen_in(&mut ws, names, look, &removed, tally, &mut breach);
            }
            if primary {
                first = breach;
            }
            faults.push(fault);
            out.extend(ws);
        }
    }
    out.sort();
    out.dedup();
    if out.len() > MOST_WORLDS {
        out.truncate(MOST_WORLDS);
    }
    let breach = if out.is_empty() {
        let b = first.unwrap_or_else(|| Breach {
            rule: Rule::Linearizable,
            detail: "no order of the calls explains their answers".to_string(),
        });
        // One call that breaks the same rule in every world and every
        // order is wrong whatever the others did: its own finding, not
        // the group's.
        let alone =
            faults.first().copied().flatten().is_some() && faults.iter().all(|f| *f == faults[0]);
        Some(if group.len() > 1 && overlapping(group) && !alone {
            Breach {
                rule: Rule::Linearizable,
                detail: format!(
                    "no order of these {} calls in flight together explains their answers; in the order sent: {} ({})",
                    group.len(),
                    b.detail,
                    b.rule.name()
                ),
            }
        } else {
            b
        })
    } else {
        None
    };
    Judged {
        worlds: out,
        breach,
        notes,
    }
}

/// Keeps the worlds in `ws` that the node's look agrees with; the first
/// disagreement goes to `breach`. Counts in `tally` for the first world.
fn seen_in(
    ws: &mut Vec<World>,
    names: &Names,
    look: &Look<'_>,
    removed: &[(Slot, Slot)],
    mut tally: Option<&mut Tally>,
    breach: &mut Option<Breach>,
) {
    ws.retain(|w| {
        match oracle::observe(names, w, look.targets, removed, look.seen, tally.take()) {
            Ok(()) => true,
            Err(b) => {
                breach.get_or_insert(b);
                false
            }
        }
    });
}

/// The targets a step of `group` unpublished OK.
fn unpublished(group: &[Sent]) -> Vec<(Slot, Slot)> {
    group
        .iter()
        .filter_map(|s| match (s.step, &s.answer) {
            (Step::NodeUnpublish { v, t }, Answer::Reply(_)) => Some((v, t)),
            _ => None,
        })
        .collect()
}

/// True when two steps of `group` are about the same volume.
pub fn overlapping(group: &[Sent]) -> bool {
    let mut seen = BTreeSet::new();
    group
        .iter()
        .filter_map(|s| s.step.volume())
        .any(|v| !seen.insert(v))
}

/// Every order of `n` steps, the order sent first.
fn orders(n: usize) -> Vec<Vec<usize>> {
    let mut all = vec![(0..n).collect::<Vec<_>>()];
    let mut i = 0;
    // Heap's algorithm, iteratively, from the identity.
    let mut a: Vec<usize> = (0..n).collect();
    let mut c = vec![0usize; n];
    while i < n {
        if c[i] < i {
            if i % 2 == 0 {
                a.swap(0, i);
            } else {
                a.swap(c[i], i);
            }
            all.push(a.clone());
            c[i] += 1;
            i = 0;
        } else {
            c[i] = 0;
            i += 1;
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::orders;

    #[test]
    fn every_order_once_the_order_sent_first() {
        for n in 0..=4 {
            let all = orders(n);
            let mut sorted = all.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), (1..=n).product::<usize>().max(1));
            assert_eq!(all.len(), sorted.len());
            assert_eq!(all[0], (0..n).collect::<Vec<_>>());
        }
    }
}
