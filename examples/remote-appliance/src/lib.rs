//! remote-appliance: a CSI driver for storage that is the truth. Its
//! controller asks a storage appliance over HTTP — the appliance, not the
//! driver's state directory, says which volumes exist — with the token the
//! request's secrets carry; every change carries the driver process's
//! incarnation, so a request of a killed process that lands late is
//! refused rather than acting after its successor. Its node side attaches
//! the volume's image as a loop device while the volume is staged.
//!
//! The appliance ([`appliance`], the `appliance` binary) is a small
//! service of this example's own: images in a directory, an HTTP JSON API
//! ([`api`]), busy (503) and slow answers on a fixed rhythm.

pub mod api;
pub mod appliance;
mod driver;
pub mod http;

pub use driver::{NAME, RemoteAppliance, TOKEN_KEY};
