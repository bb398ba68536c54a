//! `joinery`: a Karpenter-compatible node autoscaler with WebAssembly plugins.
//!
//! This file only parses the command line, sets up logging and runs the chosen command; the
//! commands themselves live in [`commands`].

mod commands;
mod endpoints;
mod exit;
mod kube_options;
mod logging;
mod management;
mod plugin_options;
mod snapshot_input;
mod value_parsers;

use clap::Parser;

use crate::commands::{Command, Execute};
use crate::logging::LogFormat;

/// mimalloc as the process allocator: scheduling passes and the API emulator make many small,
/// short-lived allocations, which it serves markedly faster than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Joinery: a Karpenter-compatible node autoscaler whose cloud backends, bootstrap
/// renderers and pricing functions are WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "joinery", version, about, propagate_version = true)]
struct Cli {
    /// Log format.
    #[arg(
        long,
        global = true,
        env = "JOINERY_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and --version print and succeed; anything else is a usage error (2).
            let _ = e.print();
            return if e.use_stderr() {
                exit::usage()
            } else {
                std::process::ExitCode::SUCCESS
            };
        }
    };
    logging::init_tracing(cli.log_format, &cli.command.default_log_level());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return exit::error();
        }
    };
    match runtime.block_on(cli.command.execute()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", exit::describe(&e));
            exit::error()
        }
    }
}
