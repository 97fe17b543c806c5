//! A run's outcome as a person reads it: the trace of a violation, and the
//! summary per rule.

use std::fmt::Write;

use super::machine::Outcome;
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

fn level(r: Rule) -> &'static str {
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
