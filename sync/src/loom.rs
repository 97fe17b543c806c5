//! One place that picks std or loom primitives (as tokio's `loom` module does).

#[cfg(volplane_loom)]
pub(crate) use loom::sync::{Arc, Mutex};

#[cfg(not(volplane_loom))]
pub(crate) use std::sync::{Arc, Mutex};
