//! Discovery: what the driver says of itself before the first step.

use super::{Checker, DISCOVER, Phase, Violation};
use crate::check::machine::Effect;
use crate::check::oracle::{Answer, Breach};
use crate::check::rules::Rule;
use crate::driver::{Request, Response};

impl Checker {
    pub(super) fn discover(&mut self, i: usize) {
        let facts = &self.outcome.facts;
        let mut i = i;
        // No Controller service: no controller capabilities to ask for.
        if i == 3 && !facts.controller_service {
            i += 1;
        }
        // No GroupController service: no group capabilities to ask for.
        let groups = crate::driver::PluginCapability::GroupControllerService;
        if i == 5 && !facts.plugin.contains(&groups) {
            i += 1;
        }
        if i >= DISCOVER.len() {
            self.phase = Phase::Baseline;
            let op = self.op();
            self.looking = Some(op);
            let outside = self.config.watch_outside;
            self.queue.push_back(Effect::Look {
                op,
                paths: Vec::new(),
                under: Vec::new(),
                outside,
                storage: self.config.storage_dirs.clone(),
            });
            return;
        }
        self.phase = Phase::Discover(i);
        self.ask(DISCOVER[i].clone());
    }

    pub(super) fn ask(&mut self, mut request: Request) {
        self.config.secrets.apply(&mut request);
        let op = self.op();
        self.asking = Some(op);
        self.queue.push_back(Effect::Call { op, request });
    }

    pub(super) fn discovered(&mut self, i: usize, answer: Answer) {
        let r = match answer {
            Answer::Reply(r) => r,
            Answer::Refused { code, message } if i >= 3 => {
                // A node-only or controller-only driver: that service is absent.
                let _ = (code, message);
                return self.discover(i + 1);
            }
            other => {
                let what = DISCOVER[i].method();
                return self.fail(format!("{what}: {other}"));
            }
        };
        let facts = &mut self.outcome.facts;
        match r {
            Response::PluginInfo {
                name,
                vendor_version,
                ..
            } => {
                self.outcome.tally.checked(Rule::PluginInfo);
                if let Err(why) = plugin_name(&name, &vendor_version) {
                    self.outcome.tally.violated(Rule::PluginInfo);
                    self.outcome.violation = Some(Violation {
                        breach: Breach {
                            rule: Rule::PluginInfo,
                            detail: why,
                        },
                        group: 0,
                    });
                }
                self.config.names.driver = name;
            }
            Response::PluginCapabilities(caps) => {
                facts.controller_service =
                    caps.contains(&crate::driver::PluginCapability::ControllerService);
                facts.plugin = caps.into_iter().collect();
            }
            Response::Probe { .. } => {}
            Response::ControllerCapabilities(caps) => facts.controller = caps.into_iter().collect(),
            Response::NodeCapabilities(caps) => {
                facts.node = caps.into_iter().collect();
                // Then NodeGetInfo, in the same slot.
                return self.ask(Request::NodeGetInfo);
            }
            Response::GroupCapabilities(caps) => {
                facts.group_snapshots = caps
                    .contains(&crate::driver::GroupCapability::CreateDeleteGetVolumeGroupSnapshot);
            }
            Response::NodeInfo {
                node_id,
                accessible_topology,
                ..
            } => {
                facts.node_id = node_id;
                facts.node_service = true;
                let constrained = facts
                    .plugin
                    .contains(&crate::driver::PluginCapability::VolumeAccessibilityConstraints);
                facts.topology = accessible_topology.filter(|_| constrained);
            }
            _ => {}
        }
        if !self.outcome.facts.controller_service && i == 1 {
            return self.fail(
                "the driver has no Controller service (GetPluginCapabilities lacks CONTROLLER_SERVICE): check needs one to create volumes".to_string(),
            );
        }
        self.discover(i + 1)
    }
}

/// GetPluginInfo's name must be a domain name of at most 63 characters
/// (alphanumerics, `-` and `.`, alphanumeric at both ends), with a version.
fn plugin_name(name: &str, version: &str) -> Result<(), String> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty()
        || name.len() > 63
        || !ok_chars
        || !ends(name.chars().next())
        || !ends(name.chars().last())
    {
        return Err(format!(
            "GetPluginInfo name {name:?} is not a domain name of at most 63 characters"
        ));
    }
    if version.is_empty() {
        return Err("GetPluginInfo vendor_version is empty".to_string());
    }
    Ok(())
}
