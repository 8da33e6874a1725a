//! The `kafka-dlq` binary; everything lives in the `cli` module and the library.

#![warn(unreachable_pub)]

mod cli;

/// mimalloc rather than glibc's allocator: records are allocated on the thread that polls and
/// freed on the thread that handles them, a pattern that costs glibc's per-thread arenas
/// (and memory) dearly; the benchmark measured it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
