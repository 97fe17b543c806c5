//! The storage side: what a driver that lists (ListVolumes,
//! ListSnapshots) holds before the run and after its teardown. Whatever
//! the second listing holds that the first did not was made by the run
//! and never put away — an orphan, such as a create a killed process
//! finished after its successor's delete — and breaks
//! [`Rule::NothingStored`].

use std::collections::BTreeSet;

use super::{Checker, Phase};
use crate::check::oracle::{Answer, Breach};
use crate::check::protocol::Violation;
use crate::check::rules::Rule;
use crate::driver::request::{ListSnapshots, ListVolumes};
use crate::driver::{ControllerCapability, Request, Response, Secrets};

/// Most pages one inventory walks before it gives up.
const MOST_PAGES: u32 = 10_000;

/// Which inventory, and which kind of object it is listing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Taking {
    /// Before the run's first step (else: after its teardown).
    pub before: bool,
    /// Listing snapshots (else: volumes).
    pub snapshots: bool,
}

/// What a driver's storage lists: volume ids, snapshot ids.
#[derive(Debug, Clone, Default)]
pub(super) struct Stored {
    volumes: BTreeSet<String>,
    snapshots: BTreeSet<String>,
    tokens: BTreeSet<String>,
    pages: u32,
    /// A listing failed: the inventory says nothing.
    failed: Option<String>,
}

impl Checker {
    /// Lists what the storage holds, when the driver lists; `before`:
    /// ahead of the steps, else after the teardown.
    pub(super) fn take_inventory(&mut self, before: bool) {
        self.stored_now = Stored::default();
        let facts = &self.outcome.facts;
        if facts.has(ControllerCapability::ListVolumes) {
            return self.list_page(
                Taking {
                    before,
                    snapshots: false,
                },
                String::new(),
            );
        }
        self.list_snapshots_or_finish(before);
    }

    fn list_snapshots_or_finish(&mut self, before: bool) {
        if self.outcome.facts.has(ControllerCapability::ListSnapshots) {
            self.stored_now.tokens.clear();
            return self.list_page(
                Taking {
                    before,
                    snapshots: true,
                },
                String::new(),
            );
        }
        self.inventory_taken(before);
    }

    fn list_page(&mut self, taking: Taking, token: String) {
        self.phase = Phase::Inventory(taking);
        self.ask(if taking.snapshots {
            Request::ListSnapshots(ListSnapshots {
                max_entries: 0,
                starting_token: token,
                source_volume_id: String::new(),
                snapshot_id: String::new(),
                secrets: Secrets::default(),
            })
        } else {
            Request::ListVolumes(ListVolumes {
                max_entries: 0,
                starting_token: token,
            })
        });
    }

    /// A page of the inventory came.
    pub(super) fn inventory_page(&mut self, taking: Taking, answer: Answer) {
        let next_token = match answer {
            Answer::Reply(Response::Volumes {
                entries,
                next_token,
            }) if !taking.snapshots => {
                let ids = entries.into_iter().map(|e| e.volume.volume_id);
                self.stored_now.volumes.extend(ids);
                next_token
            }
            Answer::Reply(Response::Snapshots {
                entries,
                next_token,
            }) if taking.snapshots => {
                let ids = entries.into_iter().map(|s| s.snapshot_id);
                self.stored_now.snapshots.extend(ids);
                next_token
            }
            other => {
                let what = if taking.snapshots {
                    "ListSnapshots"
                } else {
                    "ListVolumes"
                };
                self.stored_now.failed = Some(format!("{what}: {other}"));
                String::new()
            }
        };
        self.stored_now.pages += 1;
        let held = self.stored_now.volumes.len() + self.stored_now.snapshots.len();
        if held > super::MOST_LISTED {
            // Too many to hold: the inventory says nothing.
            self.stored_now.failed =
                Some(format!("more than {} entries listed", super::MOST_LISTED));
            self.stored_now.volumes.clear();
            self.stored_now.snapshots.clear();
            return self.inventory_taken(taking.before);
        }
        let fresh = self.stored_now.tokens.insert(next_token.clone());
        if !next_token.is_empty() && fresh && self.stored_now.pages < MOST_PAGES {
            return self.list_page(taking, next_token);
        }
        if !taking.snapshots {
            return self.list_snapshots_or_finish(taking.before);
        }
        self.inventory_taken(taking.before);
    }

    fn inventory_taken(&mut self, before: bool) {
        let stored = std::mem::take(&mut self.stored_now);
        if before {
            self.stored_before = Some(stored);
            self.phase = Phase::Steps;
            return self.next_group();
        }
        self.judge_storage(&stored);
        self.leftovers();
    }

    /// After the teardown: with every volume and snapshot of the run
    /// deleted (and no rule broken before), the storage lists nothing it
    /// did not list before the run.
    fn judge_storage(&mut self, after: &Stored) {
        let Some(before) = &self.stored_before else {
            return;
        };
        if !self.storage_judged() || before.failed.is_some() || after.failed.is_some() {
            return;
        }
        self.outcome.tally.checked(Rule::NothingStored);
        let volumes: Vec<&String> = after.volumes.difference(&before.volumes).collect();
        let snapshots: Vec<&String> = after.snapshots.difference(&before.snapshots).collect();
        if volumes.is_empty() && snapshots.is_empty() {
            return;
        }
        let detail = format!(
            "with every volume and snapshot of the run deleted, the storage still lists what it did not before the run: volumes {volumes:?}, snapshots {snapshots:?}"
        );
        self.storage_breached(detail);
    }

    /// After the teardown, as [`Checker::judge_storage`] for a driver's
    /// storage directories (`Config::storage_dirs`): an entry they did not
    /// hold before the run is a volume or snapshot the run left — one a
    /// failed create made and never removed, one a late call remade.
    pub(super) fn judge_storage_dirs(&mut self, after: &BTreeSet<String>) {
        if self.config.storage_dirs.is_empty() || !self.storage_judged() {
            return;
        }
        // Too many to hold (the carrier stops reading past the bound): the
        // stock taken says nothing.
        if after.len() > super::MOST_LISTED || self.dirs_before.len() > super::MOST_LISTED {
            return;
        }
        self.outcome.tally.checked(Rule::NothingStored);
        let new: Vec<&String> = after.difference(&self.dirs_before).collect();
        if new.is_empty() {
            return;
        }
        let detail = format!(
            "with every volume and snapshot of the run deleted, the storage directories hold what they did not before the run: {new:?}"
        );
        self.storage_breached(detail);
    }

    /// Whether the storage can be judged now: the run put every volume,
    /// snapshot and group away, no call's effect is still unknown, and no
    /// rule was broken before.
    fn storage_judged(&self) -> bool {
        if self.outcome.violation.is_some() || self.stopped {
            return false;
        }
        let w = &self.worlds[0];
        let put_away = w.volumes.is_empty() && w.snapshots.is_empty() && w.groups.is_empty();
        // A call whose effect is still unknown may yet make or remove something.
        let settled = self.lingering.is_empty() && self.unsettled.is_none();
        put_away && settled
    }

    fn storage_breached(&mut self, detail: String) {
        self.outcome.tally.violated(Rule::NothingStored);
        self.outcome.violation = Some(Violation {
            breach: Breach {
                rule: Rule::NothingStored,
                detail,
            },
            group: self.groups,
        });
    }
}
