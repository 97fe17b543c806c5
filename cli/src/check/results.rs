//! `volplane check`'s results for a CI system: `--json FILE` (the tally,
//! every finding with its shrunk trace and replay command) and `--junit
//! FILE` (one test case per rule checked; a broken rule's case fails with
//! its findings' traces).

use std::fmt::Write;
use std::time::Duration;

use serde::Serialize;
use volplane::testing::check::{Check, Report};
use volplane_core::check::Rule;
use volplane_core::check::report::level;

/// What a run of `volplane check` found, as `--json` writes it.
#[derive(Debug, Serialize)]
pub struct Results {
    /// The driver's endpoint.
    pub endpoint: String,
    /// The first run's seed.
    pub seed: u64,
    /// Calls in flight together, at most.
    pub concurrency: u8,
    /// Runs made.
    pub runs: u32,
    /// Steps sent.
    pub steps: u64,
    /// Seconds the check took.
    pub seconds: f64,
    /// Runs that broke a MUST-rule.
    pub failed_runs: u32,
    /// No MUST-rule broken (nor, with `--strict`, a SHOULD-rule).
    pub passed: bool,
    /// Every rule checked.
    pub rules: Vec<RuleResult>,
    /// Each distinct finding, shrunk.
    pub findings: Vec<Finding>,
    /// Findings met after the most shown were shrunk: their signatures and runs.
    pub unshrunk: Vec<Unshrunk>,
    /// SHOULD-rules broken: the run's seed and what.
    pub should: Vec<(u64, String)>,
    /// Why the check stopped early, if it did.
    pub stopped: Option<String>,
    /// The driver no longer started: the check stopped there.
    pub driver_gone: bool,
    /// Mounts outside the kubelet directory the host changed, none of them
    /// the driver's (examples): not judged.
    pub host_changes_outside: Vec<String>,
}

/// One rule's count.
#[derive(Debug, Serialize)]
pub struct RuleResult {
    /// Its name.
    pub rule: &'static str,
    /// MUST or SHOULD.
    pub level: &'static str,
    /// What the specification says.
    pub clause: &'static str,
    /// Times checked.
    pub checked: u64,
    /// Times broken.
    pub violated: u64,
}

/// One distinct finding.
#[derive(Debug, Serialize)]
pub struct Finding {
    /// The rule broken.
    pub rule: &'static str,
    /// What makes it this finding: the rule, the calls and their answers.
    pub signature: String,
    /// Runs that showed it.
    pub runs: u32,
    /// The seed of the run that found it.
    pub seed: u64,
    /// Steps up to the violation, before and after shrinking.
    pub steps: (usize, usize),
    /// The shrunk trace.
    pub trace: String,
    /// The command that sends the shrunk steps again, when a replay file
    /// was written.
    pub replay: Option<String>,
}

/// A finding not shrunk.
#[derive(Debug, Serialize)]
pub struct Unshrunk {
    /// Its signature.
    pub signature: String,
    /// Runs that showed it.
    pub runs: u32,
}

impl Results {
    /// The results of `report`; `replays` holds each finding's replay
    /// command (in the order of `report.failures`).
    pub fn new(
        check: &Check,
        report: &Report,
        strict: bool,
        took: Duration,
        replays: &[Option<String>],
    ) -> Results {
        let rules = Rule::ALL
            .iter()
            .filter_map(|r| {
                let &(checked, violated) = report.tally.counts.get(r)?;
                Some(RuleResult {
                    rule: r.name(),
                    level: level(*r),
                    clause: r.clause(),
                    checked,
                    violated,
                })
            })
            .collect();
        let findings = report
            .failures
            .iter()
            .enumerate()
            .map(|(i, f)| Finding {
                rule: f.rule.name(),
                signature: f.signature.to_string(),
                runs: f.runs,
                seed: f.seed,
                steps: f.steps,
                trace: f.trace.clone(),
                replay: replays.get(i).cloned().flatten(),
            })
            .collect();
        Results {
            endpoint: check.endpoint.clone(),
            seed: check.seed,
            concurrency: check.concurrency,
            runs: report.runs,
            steps: report.steps,
            seconds: took.as_secs_f64(),
            failed_runs: report.failed_runs,
            passed: report.passed(strict),
            rules,
            findings,
            unshrunk: report
                .unshrunk
                .iter()
                .map(|(s, n)| Unshrunk {
                    signature: s.to_string(),
                    runs: *n,
                })
                .collect(),
            should: report.notes.clone(),
            stopped: report.stopped.clone(),
            driver_gone: report.driver_gone,
            host_changes_outside: report.foreign.iter().cloned().collect(),
        }
    }

    /// As JSON.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("results serialize")
    }

    /// As a JUnit XML report: a suite of one test case per rule checked.
    /// A MUST-rule broken fails (so does a SHOULD-rule with `strict`); the
    /// failure carries each finding's trace and replay command. A
    /// SHOULD-rule broken without `strict` passes, with what broke it in
    /// the case's output.
    pub fn junit(&self, strict: bool) -> String {
        let failing = |r: &RuleResult| r.violated > 0 && (r.level == "MUST" || strict);
        let failures = self.rules.iter().filter(|r| failing(r)).count();
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            out,
            "<testsuites name=\"volplane check\" tests=\"{}\" failures=\"{failures}\" time=\"{:.3}\">",
            self.rules.len(),
            self.seconds
        );
        let _ = writeln!(
            out,
            "  <testsuite name=\"volplane check {}\" tests=\"{}\" failures=\"{failures}\" errors=\"{}\" time=\"{:.3}\">",
            xml(&self.endpoint),
            self.rules.len(),
            u8::from(self.stopped.is_some() || self.driver_gone),
            self.seconds
        );
        let _ = writeln!(
            out,
            "    <properties><property name=\"seed\" value=\"{}\"/><property name=\"runs\" value=\"{}\"/><property name=\"steps\" value=\"{}\"/><property name=\"concurrency\" value=\"{}\"/></properties>",
            self.seed, self.runs, self.steps, self.concurrency
        );
        for r in &self.rules {
            self.junit_case(&mut out, r, failing(r));
        }
        if let Some(why) = &self.stopped {
            let _ = writeln!(
                out,
                "    <testcase name=\"the check ran to its end\" classname=\"volplane.check\"><error message=\"{}\"/></testcase>",
                xml(why)
            );
        }
        out.push_str("  </testsuite>\n</testsuites>\n");
        out
    }

    fn junit_case(&self, out: &mut String, r: &RuleResult, failing: bool) {
        let _ = write!(
            out,
            "    <testcase name=\"{}\" classname=\"volplane.check.{}\">",
            r.rule, r.level
        );
        if failing {
            let mut body = String::new();
            for f in self.findings.iter().filter(|f| f.rule == r.rule) {
                let _ = writeln!(body, "{} ({} runs)", f.signature, f.runs);
                body.push_str(&f.trace);
                let _ = writeln!(
                    body,
                    "(seed {}; {} steps shrunk to {})",
                    f.seed, f.steps.0, f.steps.1
                );
                if let Some(cmd) = &f.replay {
                    let _ = writeln!(body, "replay: {cmd}");
                }
                body.push('\n');
            }
            for u in self
                .unshrunk
                .iter()
                .filter(|u| u.signature.starts_with(&format!("{}:", r.rule)))
            {
                let _ = writeln!(body, "{} ({} runs, not shrunk)", u.signature, u.runs);
            }
            let _ = write!(
                out,
                "\n      <failure message=\"{} of {} checks broke it: {}\" type=\"{}\">{}</failure>\n    ",
                r.violated,
                r.checked,
                xml(r.clause),
                r.level,
                xml(&body)
            );
        } else if r.violated > 0 {
            let notes: Vec<String> = self
                .should
                .iter()
                .filter(|(_, what)| what.starts_with(&format!("{} ", r.rule)))
                .map(|(seed, what)| format!("{what} (seed {seed})"))
                .collect();
            let _ = write!(out, "<system-out>{}</system-out>", xml(&notes.join("\n")));
        }
        out.push_str("</testcase>\n");
    }
}

/// `s` as XML character data or an attribute value; characters XML 1.0
/// cannot carry (control characters a driver's message may hold) become
/// U+FFFD.
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' | '\t' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use volplane::testing::check::{Failure, Replay, Signature};
    use volplane_core::check::Tally;

    fn report() -> Report {
        let mut tally = Tally::default();
        for _ in 0..5 {
            tally.checked(Rule::Linearizable);
            tally.checked(Rule::CreateIdempotent);
        }
        tally.violated(Rule::Linearizable);
        tally.violated(Rule::Linearizable);
        tally.violated(Rule::ValidCallSucceeds);
        let finding = |calls: &[(&str, &str)], runs| {
            let signature = Signature {
                rule: Rule::Linearizable,
                calls: calls
                    .iter()
                    .map(|(c, a)| (c.to_string(), a.to_string()))
                    .collect(),
            };
            Failure {
                rule: Rule::Linearizable,
                signature: signature.clone(),
                found_as: signature,
                runs,
                job: 0,
                seed: 7,
                steps: (40, 3),
                trace: "violation of concurrent-calls-in-some-order (MUST):\n  two <volumes> & one \"name\"\u{1}\n".into(),
                replay: Replay {
                    names: volplane_core::check::Names {
                        prefix: String::new(),
                        kubelet_dir: "/tmp/kubelet".into(),
                        driver: String::new(),
                        parameters: Default::default(),
                        capability: volplane_core::driver::Capability::mount(
                            volplane_core::driver::AccessMode::SingleNodeWriter,
                        ),
                        bytes: 1 << 20,
                        mutable: Default::default(),
                        elsewhere: None,
                    },
                    seed: 7,
                    bounds: Default::default(),
                    program: Vec::new(),
                },
            }
        };
        Report {
            runs: 10,
            steps: 2000,
            tally,
            notes: vec![(
                3,
                "valid-call-succeeds at step 4: INTERNAL for a valid call".into(),
            )],
            failures: vec![
                finding(&[("CreateVolume", "OK"), ("CreateVolume", "OK")], 1),
                finding(
                    &[
                        ("ControllerGetVolume", "OK"),
                        ("NodeUnpublishVolume", "NotFound"),
                    ],
                    2,
                ),
            ],
            unshrunk: [(
                Signature {
                    rule: Rule::Linearizable,
                    calls: vec![("DeleteVolume".into(), "OK".into())],
                },
                4,
            )]
            .into(),
            failed_runs: 7,
            ..Report::default()
        }
    }

    fn results(strict: bool) -> Results {
        let check = Check::new("unix:///tmp/csi.sock", "/tmp/kubelet");
        let replays = [Some("volplane check --replay a.json".to_string()), None];
        Results::new(
            &check,
            &report(),
            strict,
            Duration::from_millis(1500),
            &replays,
        )
    }

    #[test]
    fn the_json_results_read_back_with_every_finding() {
        let v: serde_json::Value = serde_json::from_str(&results(false).json()).unwrap();
        assert_eq!(v["passed"], false);
        assert_eq!(v["runs"], 10);
        assert_eq!(v["failed_runs"], 7);
        let findings = v["findings"].as_array().unwrap();
        assert_eq!(findings.len(), 2);
        assert_eq!(
            findings[0]["signature"],
            "concurrent-calls-in-some-order: CreateVolume → OK ‖ CreateVolume → OK"
        );
        assert_eq!(findings[0]["replay"], "volplane check --replay a.json");
        assert_eq!(findings[1]["runs"], 2);
        assert_eq!(v["unshrunk"][0]["runs"], 4);
        let rules = v["rules"].as_array().unwrap();
        let lin = rules
            .iter()
            .find(|r| r["rule"] == "concurrent-calls-in-some-order")
            .unwrap();
        assert_eq!(
            (lin["checked"].as_u64(), lin["violated"].as_u64()),
            (Some(7), Some(2))
        );
    }

    #[test]
    fn the_junit_report_parses_with_a_case_per_rule_and_the_broken_ones_failing() {
        for strict in [false, true] {
            let text = results(strict).junit(strict);
            let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            let cases: Vec<_> = doc
                .descendants()
                .filter(|n| n.has_tag_name("testcase"))
                .collect();
            assert_eq!(cases.len(), 3, "{text}");
            let failed: std::collections::BTreeSet<&str> = cases
                .iter()
                .filter(|c| c.children().any(|n| n.has_tag_name("failure")))
                .map(|c| c.attribute("name").unwrap())
                .collect();
            let mut expected = std::collections::BTreeSet::from(["concurrent-calls-in-some-order"]);
            if strict {
                expected.insert("valid-call-succeeds");
            }
            assert_eq!(failed, expected);
            let failure = cases
                .iter()
                .find(|c| c.attribute("name") == Some("concurrent-calls-in-some-order"))
                .unwrap()
                .children()
                .find(|n| n.has_tag_name("failure"))
                .unwrap();
            let body = failure.text().unwrap();
            // Both findings, the one not shrunk, the replay, and the trace's
            // characters as they were (a control character replaced).
            for part in [
                "CreateVolume → OK ‖ CreateVolume → OK (1 runs)",
                "ControllerGetVolume → OK ‖ NodeUnpublishVolume → NotFound (2 runs)",
                "DeleteVolume → OK (4 runs, not shrunk)",
                "replay: volplane check --replay a.json",
                "two <volumes> & one \"name\"\u{fffd}",
            ] {
                assert!(body.contains(part), "{part:?} not in {body}");
            }
            let suite = doc
                .descendants()
                .find(|n| n.has_tag_name("testsuite"))
                .unwrap();
            assert_eq!(
                suite.attribute("failures"),
                Some(if strict { "2" } else { "1" })
            );
        }
    }
}
