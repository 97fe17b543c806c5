//! Whether this process honours test knobs: the planted bugs
//! (`VOLPLANE_PLANT`, `volplane sim --plant`) and the crash hooks
//! (`VOLPLANE_CRASH_AFTER`, `VOLPLANE_SLOW_CREATE_MS`).
//!
//! A knob's code is in a build only with its feature (`plants`,
//! `crash-hooks`), and a workspace build unifies the tests' features into
//! every binary that shares the library. So the `volplane` binary refuses
//! them whatever it was built with: only the tests' own binary
//! (`volplane-under-test`, which calls [`crate::cli::run_under_test`])
//! honours them.

/// Whether test knobs are honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knobs {
    /// The `volplane` a user runs: every knob is refused, with a warning.
    Refused,
    /// The tests' binary: the knobs this build has are honoured.
    Honoured,
}

impl Knobs {
    /// Planted bugs are honoured.
    pub fn plants(self) -> bool {
        cfg!(feature = "plants") && self == Knobs::Honoured
    }

    /// Crash hooks are honoured.
    pub fn crash_hooks(self) -> bool {
        cfg!(feature = "crash-hooks") && self == Knobs::Honoured
    }
}
