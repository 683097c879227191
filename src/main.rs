//! `vhost-iocost`: a vhost-user-blk daemon that shares one host disk between many VMs.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use vhost_iocost::backend::io::disk::HostDisk;
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
        /// The TOML configuration (see configs/demo.toml and docs/configuration.md).
        #[arg(long, short = 'c', value_name = "FILE")]
        config: PathBuf,
    },
    /// Load generator: drive volume sockets directly (vhost-user, no VM) and report per
    /// tenant IOPS, bandwidth and latency percentiles, overall and per second.
    ///
    /// Tenants come from a job file (--job, TOML: [defaults] and [[tenant]] tables) and/or
    /// --tenant lists (comma-separated key=value). Keys: socket (required), name, rw
    /// (randread, randwrite, randrw, read, write), rwmixread (percent reads for randrw), bs,
    /// iodepth, rate_iops, runtime, ramp, delay, queues. Precedence, lowest first: built-in
    /// defaults, the job's [defaults], the flags --rw --bs --iodepth --runtime --ramp, the
    /// tenant's own keys. Examples:
    ///   vhost-iocost bench --job configs/bench/weighted-split.toml --socket-dir var --plot split
    ///   vhost-iocost bench --runtime 10s --tenant socket=var/vm1-root.sock,rw=randread,bs=4k,iodepth=1
    ///                                    --tenant socket=var/vm2-root.sock,rw=write,bs=1M,iodepth=8
    #[command(verbatim_doc_comment)]
    Bench(vhost_iocost::loadgen::BenchArgs),
    /// Run a QoS scenario in the deterministic simulator and print a per-volume report.
    ///
    /// The simulator drives the same QoS code as the daemon against a modelled device in
    /// virtual time (no I/O, no waiting). See configs/sim/*.toml for scenarios.
    Simulate {
        /// The scenario file (TOML).
        #[arg(value_name = "SCENARIO")]
        scenario: PathBuf,
    },
    /// Client of a running daemon's control API (REST over its `[control] socket`).
    ///
    /// Examples:
    ///   vhost-iocost ctl --config disk1.toml volumes
    ///   vhost-iocost ctl --socket var/control.sock set-weight vm1-root 300
    ///   vhost-iocost ctl qos --rlat 5ms --min 50
    ///   vhost-iocost ctl top
    #[command(verbatim_doc_comment)]
    Ctl(vhost_iocost::control::ctl::CtlArgs),
    /// Measure a disk or file and print its cost model and suggested QoS targets.
    Profile(vhost_iocost::profile::cli::ProfileArgs),
    /// Sweep a pinned vrate with a protected tenant and an aggressor; suggest min/max.
    Tune(vhost_iocost::tune::TuneArgs),
    /// libvirt's qemu hook: apply the QoS a domain declares (its <metadata> and the
    /// <iotune> of its vhostuser disks) when it starts, and return those volumes to their
    /// configured settings when it stops.
    LibvirtHook(vhost_iocost::libvirt_hook::HookArgs),
    /// Validate a config and print the resolved layout; changes nothing on disk.
    Check {
        /// The TOML configuration to check.
        #[arg(long, short = 'c', value_name = "FILE")]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    vhost_iocost::logging::init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run { config } => run(&config),
        Command::Check { config } => check(&config),
        Command::Profile(args) => vhost_iocost::profile::cli::run(&args),
        Command::Tune(args) => vhost_iocost::tune::run(&args),
        Command::Simulate { scenario } => vhost_iocost::sim::run_file(&scenario)
            .map(|report| print!("{report}"))
            .map_err(|e| e.into()),
        Command::Bench(args) => vhost_iocost::loadgen::cli(&args),
        Command::Ctl(args) => vhost_iocost::control::ctl::run(&args).map_err(|e| e.into()),
        Command::LibvirtHook(args) => vhost_iocost::libvirt_hook::run(&args).map_err(|e| e.into()),
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
    let file_config = Config::load(path)?;
    // Before anything is touched: a second instance on the same disk stops here.
    let _lock = vhost_iocost::instance_lock::InstanceLock::acquire(&file_config.device)?;
    // A state file the daemon cannot read stops it here, before any socket exists.
    let state_file = vhost_iocost::control::state::state_path(path);
    let state = vhost_iocost::control::state::RuntimeState::load(&state_file)?;
    // With the groups and volumes added and removed at run time.
    let config = state.running_config(&file_config, &state_file)?;
    // Before any thread exists: each installs its class's filter as it starts.
    vhost_iocost::seccomp::set_mode(config.security.seccomp)
        .map_err(|e| format!("security.seccomp: cannot install the SIGSYS handler: {e}"))?;
    // Block the signals before any thread exists, so every thread inherits the mask and
    // only the main thread takes them.
    let signals = daemon::block_termination_signals();
    // On a thread of its own: io_uring's kernel workers for its I/O go with that thread,
    // so none created as root outlives a drop of privileges.
    let calibration = std::thread::scope(|s| {
        s.spawn(|| vhost_iocost::control::calibrated::resolve(&config, path))
            .join()
    })
    .map_err(|_| "calibration panicked")?;
    let effective = vhost_iocost::control::calibrated::apply(&config, calibration.as_ref());
    let daemon = Daemon::start(&effective)?;
    let control =
        match vhost_iocost::control::start(&config, &file_config, path, &daemon, calibration) {
            Ok(c) => c,
            Err(e) => {
                daemon.stop();
                return Err(e.into());
            }
        };
    if let Err(e) = drop_privileges(&config, &state_file) {
        daemon.stop();
        if let Some(c) = control {
            c.stop();
        }
        return Err(e.into());
    }
    daemon.volumes.serve_frontends();
    vhost_iocost::seccomp::confine(vhost_iocost::seccomp::ThreadClass::Main);
    tracing::info!(
        volumes = daemon.volumes.list().len(),
        qos = daemon.qos.enabled(),
        "vhost-iocost running"
    );
    let status = format!("serving {} volumes", daemon.volumes.list().len());
    tell_systemd(&format!("READY=1\nSTATUS={status}"));
    let (sig, sender) = daemon::wait_for_signal(&signals);
    tracing::info!(
        signal = sig,
        sender_pid = sender,
        "stopping: completing in-flight I/O"
    );
    tell_systemd("STOPPING=1\nSTATUS=completing in-flight I/O");
    daemon.stop();
    if let Some(c) = control {
        c.stop();
    }
    match vhost_iocost::stage_trace::write("daemon") {
        Ok(Some(path)) => tracing::info!(path = %path.display(), "stage trace written"),
        Ok(None) => {}
        Err(e) => tracing::warn!(
            "cannot write the stage trace ({}): {e}",
            vhost_iocost::stage_trace::ENV
        ),
    }
    tracing::info!("stopped");
    Ok(())
}

/// Switches to `[security] user` once the disk, the volumes' files, the sockets and the
/// state file are open; says where runtime changes could not be kept as that user.
fn drop_privileges(config: &Config, state_file: &std::path::Path) -> Result<(), String> {
    let Some(id) = config.security.identity().map_err(|e| e.to_string())? else {
        return Ok(());
    };
    vhost_iocost::privileges::drop_to(&id).map_err(|e| {
        format!(
            "security.user: cannot switch to `{}` (uid {}, gid {}): {e}; start the daemon as \
             root with CAP_SETUID and CAP_SETGID, or leave [security] out",
            id.user, id.uid, id.gid
        )
    })?;
    tracing::info!(user = %id.user, uid = id.uid, gid = id.gid, "running unprivileged: no capabilities left");
    let dir = state_file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if let Err(e) = vhost_iocost::privileges::can_write_in(dir) {
        tracing::warn!(
            dir = %dir.display(), user = %id.user,
            "runtime changes cannot be kept in the state file: this user cannot create files in its directory ({e})"
        );
    }
    Ok(())
}

/// Readiness and stopping for a `Type=notify` unit; a failure is logged, never fatal.
fn tell_systemd(state: &str) {
    if let Err(e) = vhost_iocost::sd_notify::notify(state) {
        tracing::warn!("cannot notify systemd ($NOTIFY_SOCKET): {e}");
    }
}

fn check(path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::load(path)?;
    // The daemon refuses to start over a state file it cannot read: say so here, where
    // systemd's ExecStartPre can stop a restart loop. Its added and removed volumes are
    // checked with the file's.
    let state_file = vhost_iocost::control::state::state_path(path);
    let state = vhost_iocost::control::state::RuntimeState::load(&state_file)?;
    let config = state.running_config(&config, &state_file)?;
    let (size, block) = HostDisk::probe(&config.device)?;
    config.validate_layout(size, block)?;
    // Reservations are priced by the model `run` would use: the calibration it would
    // take, or the emulated device's measured as it would measure it.
    let calibration = vhost_iocost::control::calibrated::for_check(&config, path, size)?;
    let effective = vhost_iocost::control::calibrated::apply(&config, calibration.as_ref());
    vhost_iocost::daemon::check_qos(&effective)?;
    for (i, v) in config.volumes.iter().enumerate() {
        v.socket_gid(i)?;
    }
    HostDisk::probe_volume_files(&config)?;
    print!("{}", config.describe(Some(size), Some(block)));
    println!("config OK");
    Ok(())
}
