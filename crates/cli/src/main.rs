//! The stock `drover` binary: every command, with the built-in kinds (`noop`, `sleep`, `fail`,
//! and `exec` behind `--allow-exec`).

fn main() -> std::process::ExitCode {
    drover_cli::run_stock()
}
