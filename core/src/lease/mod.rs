//! Leader election on a coordination.k8s.io/v1 Lease, as client-go's
//! leaderelection does it, as pure decisions: the adapter reads the Lease,
//! asks [`Elector::decide`] what to write, writes it with the Lease's
//! resourceVersion as the precondition, and reports back.
//!
//! Guarantees (with `renew_deadline < lease_duration`):
//! * A candidate takes a Lease held by another only once the holder's record
//!   has not changed for `lease_duration`, timed on the candidate's own
//!   clock from when it saw the record change (clocks are not compared).
//! * A leader that has not renewed within `renew_deadline` of its last
//!   successful renewal stops leading ([`Elector::leading`] turns false)
//!   before any other candidate can take the Lease.

mod candidate;

pub use candidate::{Candidate, LeaseEffect, LeaseInput};

use crate::Tick;

/// What a Lease says (`spec` and the resourceVersion).
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct LeaseRecord {
    /// `holderIdentity` ("" when released).
    pub holder: String,
    /// `leaseDurationSeconds`.
    pub duration_seconds: u32,
    /// `leaseTransitions`.
    pub transitions: u32,
    /// The resourceVersion it was read at (the write's precondition).
    pub resource_version: String,
}

/// How leadership is held (client-go's defaults: 15 s, 10 s, 2 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseTimings {
    /// How long a record that does not change is honoured.
    pub lease_duration: Tick,
    /// How long a leader keeps acting without a successful renewal.
    pub renew_deadline: Tick,
    /// How often to try.
    pub retry_period: Tick,
}

impl Default for LeaseTimings {
    fn default() -> LeaseTimings {
        LeaseTimings {
            lease_duration: 15_000,
            renew_deadline: 10_000,
            retry_period: 2_000,
        }
    }
}

/// Timings that cannot keep two leaders apart (all in ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TimingsError {
    /// A leader could act on after another may have taken over.
    #[error(
        "the renew deadline ({renew_deadline} ms) must be shorter than the lease duration ({lease_duration} ms)"
    )]
    RenewDeadline {
        /// The renew deadline given.
        renew_deadline: Tick,
        /// The lease duration given.
        lease_duration: Tick,
    },
    /// No renewal would be tried in time (or tries would never pause).
    #[error(
        "the retry period ({retry_period} ms) must be positive and shorter than the renew deadline ({renew_deadline} ms)"
    )]
    RetryPeriod {
        /// The retry period given.
        retry_period: Tick,
        /// The renew deadline given.
        renew_deadline: Tick,
    },
}

impl LeaseTimings {
    /// Why these timings cannot keep two leaders apart, if they cannot.
    pub fn check(&self) -> Result<(), TimingsError> {
        if self.renew_deadline >= self.lease_duration {
            return Err(TimingsError::RenewDeadline {
                renew_deadline: self.renew_deadline,
                lease_duration: self.lease_duration,
            });
        }
        if self.retry_period == 0 || self.retry_period >= self.renew_deadline {
            return Err(TimingsError::RetryPeriod {
                retry_period: self.retry_period,
                renew_deadline: self.renew_deadline,
            });
        }
        Ok(())
    }
}

/// What to write to the Lease.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Create it, held by us.
    Create(LeaseRecord),
    /// Replace it (precondition: the record's resourceVersion), held by us.
    Update(LeaseRecord),
    /// Someone else holds it: try again later.
    Wait,
}

/// One candidate's election state.
#[derive(Debug, Clone, Hash)]
pub struct Elector {
    identity: String,
    timings: LeaseTimings,
    /// The record last read and when (our clock) it was seen to change.
    observed: Option<(LeaseRecord, Tick)>,
    /// When our last write succeeded while holding it.
    renewed: Option<Tick>,
}

impl Elector {
    /// A candidate named `identity`.
    pub fn new(identity: &str, timings: LeaseTimings) -> Elector {
        Elector {
            identity: identity.into(),
            timings,
            observed: None,
            renewed: None,
        }
    }

    /// This candidate's name.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The timings.
    pub fn timings(&self) -> LeaseTimings {
        self.timings
    }

    /// What to write, given the Lease as read at `now` (`None`: it does not exist).
    pub fn decide(&mut self, now: Tick, lease: Option<LeaseRecord>) -> Decision {
        let duration_seconds =
            u32::try_from(self.timings.lease_duration.div_ceil(1000)).unwrap_or(u32::MAX);
        let Some(lease) = lease else {
            self.observed = None;
            return Decision::Create(LeaseRecord {
                holder: self.identity.clone(),
                duration_seconds,
                transitions: 0,
                resource_version: String::new(),
            });
        };
        match &self.observed {
            Some((seen, _)) if *seen == lease => {}
            _ => self.observed = Some((lease.clone(), now)),
        }
        let since = self.observed.as_ref().map_or(now, |(_, t)| *t);
        let mine = lease.holder == self.identity;
        let honoured = Tick::from(lease.duration_seconds)
            .saturating_mul(1000)
            .max(self.timings.lease_duration);
        if !mine && !lease.holder.is_empty() && now < since.saturating_add(honoured) {
            return Decision::Wait;
        }
        Decision::Update(LeaseRecord {
            holder: self.identity.clone(),
            duration_seconds,
            transitions: if mine {
                lease.transitions
            } else {
                lease.transitions + 1
            },
            resource_version: lease.resource_version,
        })
    }

    /// Our write at `now` (decided at `decided`) succeeded, or not.
    pub fn wrote(&mut self, decided: Tick, ok: bool) {
        if ok {
            // Leadership counts from when the write was decided, not when
            // its answer came: the server may have taken it at any time since.
            self.renewed = Some(decided);
        }
    }

    /// Whether we may act at `now`: our last successful write is within
    /// the renew deadline.
    pub fn leading(&self, now: Tick) -> bool {
        self.leading_until().is_some_and(|t| now < t)
    }

    /// Until when we may act (our last successful write plus the renew deadline).
    pub fn leading_until(&self) -> Option<Tick> {
        self.renewed
            .map(|t| t.saturating_add(self.timings.renew_deadline))
    }

    /// When to try again after a try at `now`.
    pub fn next_try(&self, now: Tick) -> Tick {
        now + self.timings.retry_period
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(holder: &str, rv: &str) -> LeaseRecord {
        LeaseRecord {
            holder: holder.into(),
            duration_seconds: 15,
            transitions: 0,
            resource_version: rv.into(),
        }
    }

    #[test]
    fn a_missing_lease_is_created_and_leadership_starts_with_the_write() {
        let mut a = Elector::new("a", LeaseTimings::default());
        assert!(
            matches!(a.decide(0, None), Decision::Create(r) if r.holder == "a" && r.duration_seconds == 15)
        );
        assert!(!a.leading(0), "nothing is led before the write succeeds");
        a.wrote(0, true);
        assert!(a.leading(9_999));
        assert!(
            !a.leading(10_000),
            "without renewals, leadership ends at the renew deadline"
        );
    }

    #[test]
    fn another_holder_is_honoured_for_the_lease_duration_from_when_its_record_last_changed() {
        let mut b = Elector::new("b", LeaseTimings::default());
        assert_eq!(b.decide(1_000, Some(record("a", "1"))), Decision::Wait);
        assert_eq!(b.decide(15_999, Some(record("a", "1"))), Decision::Wait);
        // a renewed: the record changed, the wait starts again.
        assert_eq!(b.decide(10_000, Some(record("a", "2"))), Decision::Wait);
        assert_eq!(b.decide(24_999, Some(record("a", "2"))), Decision::Wait);
        let Decision::Update(r) = b.decide(25_000, Some(record("a", "2"))) else {
            panic!("a's record expired");
        };
        assert_eq!(
            (
                r.holder.as_str(),
                r.transitions,
                r.resource_version.as_str()
            ),
            ("b", 1, "2")
        );
    }

    #[test]
    fn a_leader_that_cannot_renew_stops_before_anyone_else_may_take_over() {
        let t = LeaseTimings::default();
        let mut a = Elector::new("a", t);
        let mut b = Elector::new("b", t);
        a.decide(0, None);
        a.wrote(0, true);
        // b sees a's record at once, then a's renewals fail from here on.
        assert_eq!(b.decide(0, Some(record("a", "1"))), Decision::Wait);
        let mut first_b = None;
        for now in (0..40_000).step_by(100) {
            if first_b.is_none()
                && matches!(b.decide(now, Some(record("a", "1"))), Decision::Update(_))
            {
                first_b = Some(now);
            }
            if a.leading(now) {
                assert!(first_b.is_none(), "two leaders at {now}");
            }
        }
        assert_eq!(first_b, Some(15_000));
    }

    #[test]
    fn a_holder_renews_its_own_lease_and_keeps_its_transitions() {
        let mut a = Elector::new("a", LeaseTimings::default());
        let mut mine = record("a", "5");
        mine.transitions = 3;
        assert!(
            matches!(a.decide(0, Some(mine)), Decision::Update(r) if r.transitions == 3 && r.holder == "a")
        );
        // A released lease (empty holder) is taken at once.
        let mut b = Elector::new("b", LeaseTimings::default());
        assert!(
            matches!(b.decide(0, Some(record("", "6"))), Decision::Update(r) if r.holder == "b")
        );
    }

    #[test]
    fn timings_that_could_let_two_lead_are_refused() {
        let bad = LeaseTimings {
            lease_duration: 10_000,
            renew_deadline: 10_000,
            retry_period: 2_000,
        };
        assert!(bad.check().is_err());
        assert!(LeaseTimings::default().check().is_ok());
        for retry_period in [0, 10_000, 12_000] {
            let bad = LeaseTimings {
                retry_period,
                ..LeaseTimings::default()
            };
            assert!(bad.check().is_err(), "retry period {retry_period}");
        }
    }

    #[test]
    fn the_next_try_is_one_retry_period_later_and_the_elector_says_who_it_is() {
        let timings = LeaseTimings {
            lease_duration: 9_000,
            renew_deadline: 6_000,
            retry_period: 1_500,
        };
        let e = Elector::new("replica-1", timings);
        assert_eq!(e.identity(), "replica-1");
        assert_eq!(e.timings(), timings);
        assert_eq!(e.next_try(10_000), 11_500);
    }
}
