//! Helpers for the workspace integration tests live in `tests/tests/common`.
