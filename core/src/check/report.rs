//! A run's outcome as a person reads it: the trace of a violation, the
//! summary per rule, and what makes two violations one finding.

use std::fmt::Write;

use serde::Serialize;

use super::machine::Outcome;
use super::oracle::Answer;
use super::rules::{Level, Rule, Tally};

/// The steps of `o` with their answers, the group that broke a rule
/// marked, and the rule with its clause.
pub fn trace(o: &Outcome) -> String {
    let mut out = String::new();
    let Some(v) = &o.violation else {
        return out;
    };
    let _ = writeln!(
        out,
        "violation of {} ({}):",
        v.breach.rule.name(),
        level(v.breach.rule)
    );
    let _ = writeln!(out, "  {}", v.breach.detail);
    let _ = writeln!(out, "  rule: {}", v.breach.rule.clause());
    let _ = writeln!(
        out,
        "trace ({} steps):",
        o.trace.iter().filter(|r| r.group <= v.group).count()
    );
    let mut last = 0;
    for r in o.trace.iter().filter(|r| r.group <= v.group) {
        let together = o.trace.iter().filter(|x| x.group == r.group).count() > 1;
        let mark = if r.group == v.group { ">" } else { " " };
        let num = if r.group == last && together {
            "   ".to_string()
        } else {
            format!("{:>3}", r.group)
        };
        let par = if together { " ‖" } else { "" };
        let _ = writeln!(out, "{mark}{num}{par} {} → {}", r.step, r.answer);
        last = r.group;
    }
    out
}

/// "MUST" or "SHOULD".
pub fn level(r: Rule) -> &'static str {
    match r.level() {
        Level::Must => "MUST",
        Level::Should => "SHOULD",
    }
}

/// The summary: per rule checked, how often it was checked, held and broken.
pub fn summary(t: &Tally) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<40} {:>6} {:>9} {:>7} {:>8}",
        "RULE", "LEVEL", "CHECKED", "HELD", "VIOLATED"
    );
    for r in Rule::ALL {
        let Some((c, v)) = t.counts.get(r) else {
            continue;
        };
        let _ = writeln!(
            out,
            "{:<40} {:>6} {c:>9} {:>7} {v:>8}",
            r.name(),
            level(*r),
            c - v
        );
    }
    out
}

/// What makes two violations one finding: the rule, and the calls of the
/// group that broke it with the kind of each answer (OK, the error code,
/// malformed, lost…), in order. Two runs that break one rule through
/// different calls, or with different codes, are two findings: a driver
/// with two bugs under one rule shows both.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Signature {
    /// The rule broken.
    pub rule: Rule,
    /// The calls involved (each step's shape: the call, its slots
    /// unnamed), each with its answer's kind, sorted.
    pub calls: Vec<(String, String)>,
}

impl Signature {
    /// The signature of `o`'s violation, if it broke a MUST-rule.
    pub fn of(o: &Outcome) -> Option<Signature> {
        let v = o.violation.as_ref()?;
        let mut calls: Vec<(String, String)> = o
            .trace
            .iter()
            .filter(|r| r.group == v.group)
            .map(|r| (call_shape(&r.step.to_string()), answer_kind(&r.answer)))
            .collect();
        calls.sort();
        Some(Signature {
            rule: v.breach.rule,
            calls,
        })
    }

    /// True when this is the same rule broken through some of `other`'s
    /// calls (a shrunk run of the same finding: shrinking drops calls, it
    /// does not add them).
    pub fn within(&self, other: &Signature) -> bool {
        let mut rest = other.calls.clone();
        self.rule == other.rule
            && self
                .calls
                .iter()
                .all(|c| match rest.iter().position(|r| r == c) {
                    Some(i) => {
                        rest.remove(i);
                        true
                    }
                    None => false,
                })
    }
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:", self.rule.name())?;
        for (i, (call, answer)) in self.calls.iter().enumerate() {
            let sep = if i == 0 { " " } else { " ‖ " };
            write!(f, "{sep}{call} → {answer}")?;
        }
        Ok(())
    }
}

/// A step as its trace line shows it, its slots unnamed: `CreateVolume v1,
/// a clone of v0` is `CreateVolume v, a clone of v` — the call and its
/// shape, not which volume of the run it was.
fn call_shape(step: &str) -> String {
    let slot = |w: &str| {
        let w = w.trim_end_matches(',');
        w.len() > 1
            && matches!(&w[..1], "v" | "s" | "g" | "t")
            && w[1..].bytes().all(|b| b.is_ascii_digit())
    };
    step.split(' ')
        .map(|w| {
            if slot(w) {
                format!("{}{}", &w[..1], if w.ends_with(',') { "," } else { "" })
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The kind of an answer, without what varies from run to run.
fn answer_kind(a: &Answer) -> String {
    match a {
        Answer::Reply(_) => "OK".into(),
        Answer::Refused { code, .. } => code.go_name().into(),
        Answer::Malformed(_) => "malformed".into(),
        Answer::Lost(_) => "no answer".into(),
        Answer::Data { wrote: Err(_), .. } => "write failed".into(),
        Answer::Data {
            read: Ok(Some(_)), ..
        } => "read back".into(),
        Answer::Data { .. } => "not read back".into(),
        Answer::Restarted => "restarted".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::call_shape;

    #[test]
    fn a_call_shape_names_the_call_and_its_shape_not_its_slots() {
        assert_eq!(
            call_shape("CreateVolume v1, a clone of v0"),
            "CreateVolume v, a clone of v"
        );
        assert_eq!(
            call_shape("CreateVolume v2 (8× the size)"),
            "CreateVolume v (8× the size)"
        );
        assert_eq!(
            call_shape("ListVolumes, 1 per page"),
            "ListVolumes, 1 per page"
        );
        assert_eq!(
            call_shape("NodePublishVolume v0 at t1"),
            "NodePublishVolume v at t"
        );
        assert_eq!(
            call_shape("CreateSnapshot s3 of v1"),
            "CreateSnapshot s of v"
        );
    }
}
