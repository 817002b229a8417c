//! The `eddy` binary, built inside the test package so integration tests can spawn it: the
//! same allocator and the same entry point as `bins/eddy`.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    eddy::cli::main()
}
