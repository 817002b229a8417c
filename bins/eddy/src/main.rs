//! The `eddy` binary: see [`eddy_cli`].
fn main() -> std::process::ExitCode {
    eddy_cli::main()
}
