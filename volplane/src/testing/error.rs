//! What a kit run reports when it cannot go on: typed, so a driver's own
//! test can tell a refused call (and its code) from a broken promise.

pub use volplane_core::Code;

/// Why a kit run ([`Lifecycle`](super::Lifecycle), [`Check`](super::check::Check),
/// [`DriverProcess`](super::DriverProcess)) stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The driver's socket did not answer.
    #[error("cannot connect to {endpoint}: {reason}")]
    Connect {
        /// The endpoint tried.
        endpoint: String,
        /// What the connection said.
        reason: String,
    },
    /// A call the run had to make was refused.
    #[error("{call}: {code:?}: {message}")]
    Call {
        /// The call (`CreateVolume`, `NodeStageVolume sent again`…).
        call: String,
        /// The code the driver answered.
        code: Code,
        /// Its message.
        message: String,
    },
    /// The driver answered, but not as the CSI specification requires
    /// (no volume in a CreateVolume answer, a hostile path accepted, data
    /// written through one target not read through another…).
    #[error("{0}")]
    Violation(String),
    /// The run could not do its own part: make a directory, start or
    /// restart the driver's process, read a secrets file.
    #[error("{0}")]
    Setup(String),
}

impl Error {
    /// `call` answered `status` (a tonic status from a [`Csi`](super::Csi)
    /// client): its code as volplane names it.
    pub fn call(call: impl Into<String>, status: &tonic::Status) -> Error {
        let s = volplane_proto::convert::from_tonic(status);
        Error::Call {
            call: call.into(),
            code: s.code,
            message: s.message,
        }
    }

    /// The code the driver answered, for a refused call.
    pub fn code(&self) -> Option<Code> {
        match self {
            Error::Call { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}
