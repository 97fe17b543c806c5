//! external-provisioner's `controller_persistentvolumeclaim_provision_*`
//! metrics, read off what the provisioner role says: its claims' class and
//! data source from the watch, an attempt's start from its `Provisioning`
//! event, its end from `ProvisioningSucceeded` or `ProvisioningFailed`
//! (upstream counts at the same points it emits those events).

use std::collections::BTreeMap;
use std::time::Instant;

use volplane_core::control::{Event, Input, Watch};
use volplane_core::model::names::reason;
use volplane_core::model::{Object, ObjectKey};
use volplane_service::metrics::Metrics;

/// What the provisioner role's metrics need to remember.
#[derive(Debug, Default)]
pub struct ProvisionStats {
    /// Each claim's class and dataSource kind.
    claims: BTreeMap<ObjectKey, (String, String)>,
    /// When each claim's attempt under way began.
    started: BTreeMap<ObjectKey, Instant>,
}

impl ProvisionStats {
    /// Learns a claim's labels from an input of the role.
    pub fn input(&mut self, input: &Input) {
        let Input::Watch(w) = input else {
            return;
        };
        match w {
            Watch::Applied(o) => {
                if let Object::Pvc(c) = &**o {
                    let source = c
                        .spec
                        .data_source
                        .as_ref()
                        .map(|s| s.kind.clone())
                        .unwrap_or_default();
                    self.claims.insert(o.key(), (c.class().to_string(), source));
                }
            }
            Watch::Deleted(o) => {
                self.claims.remove(&o.key());
                self.started.remove(&o.key());
            }
        }
    }

    /// Counts what an event of the role says about an attempt.
    pub fn event(&mut self, e: &Event, metrics: &Metrics) {
        match e.reason.as_str() {
            reason::PROVISIONING => {
                self.started.insert(e.object.clone(), Instant::now());
            }
            reason::PROVISIONING_SUCCEEDED | reason::PROVISIONING_FAILED => {
                let Some((class, source)) = self.claims.get(&e.object) else {
                    return;
                };
                let took = self.started.remove(&e.object).map(|t| t.elapsed());
                let ok = e.reason == reason::PROVISIONING_SUCCEEDED;
                // A success is timed from its attempt's start, as upstream.
                let took = if ok {
                    Some(took.unwrap_or_default())
                } else {
                    None
                };
                metrics.provisioned(class, source, took);
            }
            _ => {}
        }
    }
}
