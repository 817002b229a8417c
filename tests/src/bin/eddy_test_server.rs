//! The `eddy` binary, built inside the test package so integration tests can spawn it.
fn main() -> std::process::ExitCode {
    eddy_cli::main()
}
