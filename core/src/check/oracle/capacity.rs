//! What GetCapacity says, held against the creates granted after it: a CO
//! schedules by the capacity a driver reports (Kubernetes' storage
//! capacity tracking keeps a pod off a node whose reported capacity is
//! below its claim), so a driver that reports less than it then grants
//! strands pods that its storage could serve.

use super::{Answer, Cx, Verdict};
use crate::check::rules::Rule;
use crate::check::world::World;
use crate::driver::Response;

/// GetCapacity: it should succeed; what it answered becomes the world's
/// capacity (the smaller of the available capacity and the largest volume).
pub fn reported(cx: &mut Cx<'_>, w: &World, a: &Answer) -> Verdict {
    cx.must_ok(Rule::ValidCallSucceeds, w, a, |_, w, r| {
        if let Some(Response::Capacity {
            available_bytes,
            maximum_volume_size,
            ..
        }) = r
        {
            let most = maximum_volume_size.map_or(*available_bytes, |m| m.min(*available_bytes));
            w.capacity = Some(most);
        }
        Ok(())
    })
}

/// A create was granted `bytes`: no more than the capacity last reported
/// (less what was granted since), else the SHOULD-rule is broken.
pub fn granted(cx: &mut Cx<'_>, w: &mut World, bytes: u64) {
    let Some(capacity) = w.capacity else {
        return;
    };
    cx.checked(Rule::CapacityCoversGranted);
    if bytes > capacity {
        cx.note(
            Rule::CapacityCoversGranted,
            format!(
                "GetCapacity said at most {capacity} bytes could be provisioned (less what was granted since), yet a create was granted {bytes}"
            ),
        );
        w.capacity = None;
    } else {
        w.capacity = Some(capacity - bytes);
    }
}

/// A delete may give space back: what a later create may take is unknown
/// until GetCapacity is asked again.
pub fn freed(verdict: Verdict) -> Verdict {
    verdict.map(|worlds| {
        worlds
            .into_iter()
            .map(|mut w| {
                w.capacity = None;
                w
            })
            .collect()
    })
}
