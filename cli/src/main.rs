//! The `volplane` command.

fn main() -> std::process::ExitCode {
    volplane_cli::cli::run()
}
