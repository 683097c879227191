//! The command line of `vhost-iocost ctl`: its global options, commands and their
//! arguments (clap definitions only; `ctl` runs them).

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// Environment variable naming the control socket.
pub const SOCKET_ENV: &str = "VHOST_IOCOST_SOCKET";

#[derive(Args, Debug)]
pub struct CtlArgs {
    /// The daemon's control socket (default: from --config, else $VHOST_IOCOST_SOCKET).
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Read the control socket from this daemon config (`[control] socket`).
    #[arg(long, short = 'c', global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: CtlCommand,
}

#[derive(Subcommand, Debug)]
pub enum CtlCommand {
    /// List volumes: group, weight (`*` = changed at runtime), connections, socket, caps.
    Volumes,
    /// List groups: parent, weight, member volumes, caps.
    Groups,
    /// Add a volume at runtime (persistently): its socket listens when this returns.
    /// Without --offset or --path the daemon allocates the first free range of the
    /// device. More keys of `[[volume]]` as KEY=VALUE (e.g. `num_queues=4`,
    /// `'cpu_affinity=[2,3]'`, quoted for the shell: a JSON list `[...]` goes as a list).
    AddVolume(AddVolumeArgs),
    /// Remove a volume at runtime (persistently). Refused while a frontend is connected
    /// unless --force, which completes its in-flight requests and disconnects it first.
    /// Its data (range or file) is left as it is.
    RemoveVolume {
        name: String,
        #[arg(long)]
        force: bool,
    },
    /// Grow a volume at runtime (persistently), e.g. `resize vm1-root 20GiB`: into the free
    /// space after its range, or by growing its own file. The guest is told when its
    /// frontend set up the channel for it (QEMU does).
    Resize {
        name: String,
        /// The new size, e.g. "20GiB".
        size: String,
    },
    /// Add a group at runtime (persistently).
    AddGroup {
        name: String,
        /// Parent group (default: the root).
        #[arg(long)]
        parent: Option<String>,
        /// Weight, 1..10000 (default 100).
        #[arg(long)]
        weight: Option<u32>,
    },
    /// Remove an empty group at runtime (persistently).
    RemoveGroup { name: String },
    /// Set the weight (1..10000) of a volume or group, at runtime and persistently.
    SetWeight {
        /// Volume or group name.
        name: String,
        /// The new weight.
        weight: u32,
    },
    /// Set the caps of a volume or group, at runtime and persistently: KEY=VALUE pairs
    /// with the keys of `caps` in the config (iops, bps, read_iops, write_bps, burst_iops,
    /// burst_bps, burst_seconds, iops_size; sizes as "200MiB"). The given caps replace
    /// the old ones as a whole; no pairs removes them.
    SetCaps {
        /// Volume or group name.
        name: String,
        /// Limits, e.g. `iops=2000 bps=200MiB`.
        #[arg(value_name = "KEY=VALUE")]
        limits: Vec<String>,
    },
    /// Set a volume's or group's class, at runtime and persistently: `normal`, `latency`
    /// (meets its own latency target, a group's volumes together; give `--target` unless
    /// it has one) or `background` (served from what the others leave idle).
    SetClass {
        /// Volume or group name.
        name: String,
        /// `normal`, `latency` or `background`.
        class: String,
        /// The latency class's target, e.g. "p99 2ms".
        #[arg(long)]
        target: Option<String>,
    },
    /// Return a volume's weight, group, caps, class, latency target and reservation to
    /// its configured settings (the config file, or the add-volume that added it),
    /// forgetting their runtime changes, persistently. A grown size stays.
    Reset {
        /// Volume name.
        name: String,
    },
    /// Set the reservation of a volume or group, at runtime and persistently: KEY=VALUE
    /// pairs with the keys of `reserve` in the config (iops, bps, pct). No pairs removes it.
    SetReserve {
        /// Volume or group name.
        name: String,
        /// e.g. `iops=500` or `pct=30`.
        #[arg(value_name = "KEY=VALUE")]
        values: Vec<String>,
    },
    /// Show the device QoS, or change the given keys (the others keep their values).
    Qos(QosArgs),
    /// Per-volume statistics (one table).
    Stats,
    /// A live per-volume table refreshed every second; Ctrl-C exits.
    Top {
        /// Print one frame and exit.
        #[arg(long)]
        once: bool,
        /// Refresh interval in seconds.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
    },
}

/// `ctl add-volume`'s arguments.
#[derive(Args, Debug)]
pub struct AddVolumeArgs {
    /// The volume's name.
    pub name: String,
    /// Its vhost-user socket (the path the frontend connects to; `--socket` is the
    /// control socket).
    #[arg(long, value_name = "PATH")]
    pub vhost_socket: String,
    /// Capacity, e.g. "10GiB".
    #[arg(long)]
    pub size: String,
    /// First byte on the device (default: allocated).
    #[arg(long, conflicts_with = "path")]
    pub offset: Option<String>,
    /// An image file or block device of its own (created with --size if missing).
    #[arg(long)]
    pub path: Option<String>,
    /// Its group (default: the root).
    #[arg(long)]
    pub group: Option<String>,
    /// Weight, 1..10000 (default 100).
    #[arg(long)]
    pub weight: Option<u32>,
    /// Further `[[volume]]` keys, e.g. `num_queues=4 read_only=true 'cpu_affinity=[2]'`.
    #[arg(value_name = "KEY=VALUE")]
    pub keys: Vec<String>,
}

/// `ctl qos`'s arguments: the keys to change.
#[derive(Args, Debug)]
pub struct QosArgs {
    /// Throttle at all (true/false).
    #[arg(long)]
    pub enable: Option<bool>,
    /// Read latency percentile (0..100).
    #[arg(long)]
    pub rpct: Option<f64>,
    /// Read latency target ("250us", "5ms").
    #[arg(long)]
    pub rlat: Option<String>,
    /// Write latency percentile.
    #[arg(long)]
    pub wpct: Option<f64>,
    /// Write latency target.
    #[arg(long)]
    pub wlat: Option<String>,
    /// Lower vrate bound, percent.
    #[arg(long)]
    pub min: Option<f64>,
    /// Upper vrate bound, percent.
    #[arg(long)]
    pub max: Option<f64>,
    /// Whose latency misses lower vrate: "all" or "underserved".
    #[arg(long)]
    pub protect: Option<String>,
}
