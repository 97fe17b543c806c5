//! gRPC status codes as the CSI specification uses them, and the error a
//! machine answers a request with.

use serde::{Deserialize, Serialize};

/// The canonical gRPC status codes (numbers as on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[repr(i32)]
// Each code is gRPC's of the same name.
pub enum Code {
    /// Success.
    Ok = 0,
    /// The caller cancelled.
    Cancelled = 1,
    /// An error of no known kind.
    Unknown = 2,
    /// The request is malformed.
    InvalidArgument = 3,
    /// The deadline passed first.
    DeadlineExceeded = 4,
    /// What was named does not exist.
    NotFound = 5,
    /// It exists, incompatibly.
    AlreadyExists = 6,
    /// Not allowed.
    PermissionDenied = 7,
    /// Out of a resource (space, a per-node limit, size).
    ResourceExhausted = 8,
    /// Not in a state that allows it; the caller must change something first.
    FailedPrecondition = 9,
    /// Another operation on the same object is in flight; retry.
    Aborted = 10,
    /// A value past what is supported.
    OutOfRange = 11,
    /// Not offered.
    Unimplemented = 12,
    /// A bug, or a broken invariant.
    Internal = 13,
    /// Not reachable now; retry.
    Unavailable = 14,
    /// Data lost or corrupted.
    DataLoss = 15,
    /// No valid credentials.
    Unauthenticated = 16,
}

impl Code {
    /// The name gRPC tools print (`INVALID_ARGUMENT`, …).
    pub fn name(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }

    /// The name grpc-go prints for the code (`codes.Code.String()`), as
    /// csi-lib-utils' metrics label it: `OK`, `DeadlineExceeded`, `Canceled`…
    pub fn go_name(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Cancelled => "Canceled",
            Code::Unknown => "Unknown",
            Code::InvalidArgument => "InvalidArgument",
            Code::DeadlineExceeded => "DeadlineExceeded",
            Code::NotFound => "NotFound",
            Code::AlreadyExists => "AlreadyExists",
            Code::PermissionDenied => "PermissionDenied",
            Code::ResourceExhausted => "ResourceExhausted",
            Code::FailedPrecondition => "FailedPrecondition",
            Code::Aborted => "Aborted",
            Code::OutOfRange => "OutOfRange",
            Code::Unimplemented => "Unimplemented",
            Code::Internal => "Internal",
            Code::Unavailable => "Unavailable",
            Code::DataLoss => "DataLoss",
            Code::Unauthenticated => "Unauthenticated",
        }
    }

    /// The code for a wire number; numbers gRPC does not define map to `Unknown`.
    pub fn from_i32(n: i32) -> Code {
        const ALL: [Code; 17] = [
            Code::Ok,
            Code::Cancelled,
            Code::Unknown,
            Code::InvalidArgument,
            Code::DeadlineExceeded,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unimplemented,
            Code::Internal,
            Code::Unavailable,
            Code::DataLoss,
            Code::Unauthenticated,
        ];
        usize::try_from(n)
            .ok()
            .and_then(|i| ALL.get(i).copied())
            .unwrap_or(Code::Unknown)
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A request refused or failed: the status code the CSI specification names
/// for the condition, and a message that says what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error, Hash)]
#[error("{code}: {message}")]
pub struct Status {
    /// The gRPC status code the CSI spec names for this case.
    pub code: Code,
    /// What happened, for a person to act on.
    pub message: String,
}

impl Status {
    /// The error as grpc-go prints it, as the sidecars' and the kubelet's
    /// events and conditions show it: `rpc error: code = Unavailable desc = …`.
    pub fn go_error(&self) -> String {
        format!(
            "rpc error: code = {} desc = {}",
            self.code.go_name(),
            self.message
        )
    }

    /// True when the call is known to have ended: anything but CANCELLED,
    /// DEADLINE_EXCEEDED, UNAVAILABLE, RESOURCE_EXHAUSTED and ABORTED, after
    /// which the operation may still be running (csi-lib-utils'
    /// `IsFinalError`).
    pub fn is_final(&self) -> bool {
        !matches!(
            self.code,
            Code::Cancelled
                | Code::DeadlineExceeded
                | Code::Unavailable
                | Code::ResourceExhausted
                | Code::Aborted
        )
    }

    /// A final error that says the operation can never succeed as asked:
    /// INVALID_ARGUMENT, OUT_OF_RANGE or NOT_FOUND (external-resizer's
    /// `IsInfeasibleError`); only a changed request may.
    pub fn is_infeasible(&self) -> bool {
        matches!(
            self.code,
            Code::InvalidArgument | Code::OutOfRange | Code::NotFound
        )
    }

    /// A status with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status {
            code,
            message: message.into(),
        }
    }
    /// INVALID_ARGUMENT.
    pub fn invalid(message: impl Into<String>) -> Status {
        Status::new(Code::InvalidArgument, message)
    }
    /// NOT_FOUND.
    pub fn not_found(message: impl Into<String>) -> Status {
        Status::new(Code::NotFound, message)
    }
    /// ALREADY_EXISTS.
    pub fn already_exists(message: impl Into<String>) -> Status {
        Status::new(Code::AlreadyExists, message)
    }
    /// FAILED_PRECONDITION.
    pub fn failed_precondition(message: impl Into<String>) -> Status {
        Status::new(Code::FailedPrecondition, message)
    }
    /// INTERNAL.
    pub fn internal(message: impl Into<String>) -> Status {
        Status::new(Code::Internal, message)
    }
    /// UNIMPLEMENTED.
    pub fn unimplemented(message: impl Into<String>) -> Status {
        Status::new(Code::Unimplemented, message)
    }
    /// The answer for a request on a volume that already has an operation in
    /// flight (CSI: "operation pending for volume").
    pub fn aborted_pending(volume: &str) -> Status {
        Status::new(
            Code::Aborted,
            format!("operation pending for volume {volume:?}; retry after it completes"),
        )
    }

    /// ABORTED: an operation on this snapshot is already in flight.
    pub fn aborted_pending_snapshot(snapshot: &str) -> Status {
        Status::new(
            Code::Aborted,
            format!("operation pending for snapshot {snapshot:?}; retry after it completes"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_wire_numbers() {
        for n in 0..17 {
            assert_eq!(Code::from_i32(n) as i32, n);
        }
        assert_eq!(Code::from_i32(99), Code::Unknown);
        assert_eq!(Code::from_i32(-1), Code::Unknown);
    }
}
