//! `joinery`: a Karpenter-compatible node autoscaler with WebAssembly plugins.

mod bench;
mod bench_scheduling;
mod cli;
mod explain_cmd;
mod plugins_cmd;
mod run_cmd;
mod schedule_cmd;
mod simulate_cmd;
mod userdata;

use clap::Parser;

/// mimalloc as the process allocator: scheduling passes and the API emulator make many small,
/// short-lived allocations, which it serves markedly faster than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    cli::init_tracing(cli.log_format, &cli.command);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
