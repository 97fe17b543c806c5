//! The machines' events as Kubernetes events (events.k8s.io/v1, through
//! kube-runtime's recorder, which folds repeats into a series as client-go's
//! recorder does), with the machines' reasons, about the object they name.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeType, Recorder, Reporter};
use volplane_core::control::{Event, EventType};

use crate::api::Seen;
use crate::resources::api_resource;

/// Records the machines' events.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
    seen: Seen,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

impl Events {
    /// Events reported by `controller` (the reporting controller, e.g.
    /// `volplane-provisioner`) from `instance` (this replica).
    pub fn new(client: Client, controller: &str, instance: &str, seen: Seen) -> Events {
        let reporter = Reporter {
            controller: controller.into(),
            instance: Some(instance.into()),
        };
        Events {
            recorder: Recorder::new(client, reporter),
            seen,
        }
    }

    /// Records `event`; a failure is logged (events are best effort, as in
    /// client-go).
    pub async fn record(&self, event: Event) {
        let r = api_resource(event.object.kind);
        let uid = self.seen.get(&event.object).map(|o| o.meta().uid.clone());
        let reference = ObjectReference {
            api_version: Some(r.api_version),
            kind: Some(r.kind),
            name: Some(event.object.name.to_string()),
            namespace: (!event.object.namespace.is_empty())
                .then(|| event.object.namespace.to_string()),
            uid: uid.filter(|u| !u.is_empty()),
            ..ObjectReference::default()
        };
        let e = KubeEvent {
            type_: match event.type_ {
                EventType::Normal => KubeType::Normal,
                EventType::Warning => KubeType::Warning,
            },
            reason: event.reason.clone(),
            note: Some(event.message.clone()),
            action: event.reason.clone(),
            secondary: None,
        };
        match event.type_ {
            EventType::Normal => {
                tracing::info!(object = %event.object, reason = event.reason, "{}", event.message)
            }
            EventType::Warning => {
                tracing::warn!(object = %event.object, reason = event.reason, "{}", event.message)
            }
        }
        if let Err(e) = self.recorder.publish(&e, &reference).await {
            tracing::warn!(object = %event.object, reason = event.reason, "event not recorded: {e}");
        }
    }
}
