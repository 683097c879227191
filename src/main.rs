//! `vhost-iocost`: a vhost-user-blk daemon that shares one host disk between many VMs.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use vhost_iocost::backend::disk::HostDisk;
use vhost_iocost::config::Config;
use vhost_iocost::daemon::{self, Daemon};

/// A vhost-user-blk daemon that lets many VMs share one host disk fairly.
///
/// One process serves one host disk (block device or file). Each guest disk ("volume") is
/// a byte range of that disk with its own vhost-user socket; attach it from QEMU
/// (vhost-user-blk-pci) or cloud-hypervisor (--disk vhost_user=true). Log verbosity comes
/// from RUST_LOG (e.g. RUST_LOG=debug; default info).
#[derive(Parser, Debug)]
#[command(version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve every volume of the config until SIGINT or SIGTERM.
    ///
    /// Creates the backing file if it is missing and `device.create_size` is set. On
    /// SIGINT/SIGTERM it stops accepting connections, completes in-flight I/O and exits 0.
    Run {
        /// The TOML configuration (see configs/demo.toml and the README).
        #[arg(long, short = 'c', value_name = "FILE")]
        config: PathBuf,
    },
    /// Validate a config and print the resolved layout; changes nothing on disk.
    Check {
        /// The TOML configuration to check.
        #[arg(long, short = 'c', value_name = "FILE")]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run { config } => run(&config),
        Command::Check { config } => check(&config),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::load(path)?;
    // Block the signals before any thread exists, so every thread inherits the mask and
    // only the main thread takes them.
    let signals = daemon::block_termination_signals();
    let daemon = Daemon::start(&config)?;
    tracing::info!(volumes = daemon.servers.len(), "vhost-iocost running");
    let sig = daemon::wait_for_signal(&signals);
    tracing::info!(signal = sig, "stopping: completing in-flight I/O");
    daemon.stop();
    tracing::info!("stopped");
    Ok(())
}

fn check(path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::load(path)?;
    let (size, block) = HostDisk::probe(&config.device)?;
    config.validate_layout(size, block)?;
    print!("{}", config.describe(Some(size), Some(block)));
    println!("config OK");
    Ok(())
}
