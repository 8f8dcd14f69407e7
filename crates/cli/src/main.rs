//! The stock `drover` binary: every command, with the built-in kinds (`noop`, `sleep`, `fail`,
//! and `exec` behind `--allow-exec`).

/// mimalloc instead of the system allocator: a job's life allocates and frees many small
/// objects across the runtime's threads, where glibc's malloc spent about a quarter of the
/// memory store's processing time in its own bookkeeping (BENCHMARKS.md). Only the binary
/// chooses; an application embedding the library keeps its own allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    drover_cli::run_stock()
}
