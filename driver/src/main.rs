fn main() -> std::process::ExitCode {
    volplane::cli::run()
}
