//! The `kafka-dlq` binary; everything lives in the `cli` module and the library.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
