//! The `taskgrain` command line; all of it lives in the library's `cli` module.

fn main() -> std::process::ExitCode {
    taskgrain::cli::main()
}
