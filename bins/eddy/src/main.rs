//! The `eddy` binary: its allocator, then [`eddy::cli::main`] (argument parsing,
//! configuration layering, logging, start-up and exit codes).
#![cfg_attr(test, allow(clippy::too_many_lines))] // tests are exempt from the 100-line rule

/// The server's allocator. Connection tasks allocate requests and replies on the runtime's
/// threads and the storage threads free them (and the other way round for committed state);
/// glibc's malloc takes an arena lock for every such cross-thread free, which showed up as
/// futex waits in profiles under load. mimalloc frees to the owning thread's heap lock-free.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    eddy::cli::main()
}
