//! The `volplane` binary, built inside the tests package so that integration
//! tests can start it as a real process (`CARGO_BIN_EXE_volplane-under-test`).
//! Unlike `volplane`, it honours the test knobs (planted bugs, crash hooks).
fn main() -> std::process::ExitCode {
    volplane_cli::cli::run_under_test()
}
