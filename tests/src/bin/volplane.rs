//! The `volplane` binary, built inside the tests package so that integration
//! tests can start it as a real process (`CARGO_BIN_EXE_volplane`).
fn main() -> std::process::ExitCode {
    volplane_cli::cli::run()
}
