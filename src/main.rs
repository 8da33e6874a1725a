//! The `kafka-dlq` binary; everything lives in the `cli` module and the library.

#![warn(unreachable_pub)]

mod cli;

/// mimalloc rather than glibc's allocator: records are allocated on the thread that polls and
/// freed on the thread that handles them, a pattern that costs glibc's per-thread arenas
/// (and memory) dearly; the benchmark measured it. It serves librdkafka's `malloc` too (the
/// `override` feature: the binary exports `malloc` and `free`, so C code and the shared
/// libraries it loads use it): librdkafka allocates each message it is given on the worker's
/// thread and frees it on the producer's polling thread, the same pattern, and glibc's
/// allocator took about 3 µs of a dead letter's CPU; with mimalloc a record costs a quarter
/// less CPU. Without huge pages (`no_thp`), as glibc's allocator: with them the same runs held
/// 20-50 MB more.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
