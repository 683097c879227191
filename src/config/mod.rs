//! The daemon's TOML configuration: the schema, defaults and validation.
//!
//! The schema is the user-facing contract: keys may be added, never renamed. Every error
//! names the offending key (`volume[1] "vm1-data".offset: ...`) so an operator can fix the
//! file without reading code. Validation runs in two steps: [`Config::validate`] checks
//! everything that needs no I/O; [`Config::validate_layout`] checks the volume ranges once
//! the host disk's size and logical block size are known.

mod security;
mod socket_access;
mod validate;

use crate::size::ByteSize;
pub use security::{Identity, SecurityConfig};
pub use socket_access::{group_id, FileMode};

use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The name of the implicit root of the group hierarchy.
pub const ROOT_GROUP: &str = "root";
/// virtio-blk GET_ID returns at most this many bytes.
pub const SERIAL_MAX_BYTES: usize = 20;
/// Queues are handed to worker threads as 64-bit masks.
pub const MAX_QUEUES: u16 = 64;
/// The largest split virtqueue the virtio spec allows.
pub const MAX_QUEUE_SIZE: u16 = 32_768;

/// A configuration error: which key, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config: {key}: {message}")]
    Invalid { key: String, message: String },
    /// A section validated by the QoS core; its message starts with the key.
    #[error("config: {0}")]
    Section(String),
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub device: DeviceConfig,
    #[serde(default)]
    pub control: ControlConfig,
    #[serde(default, skip_serializing_if = "MetricsConfig::is_off")]
    pub metrics: MetricsConfig,
    #[serde(default, skip_serializing_if = "SecurityConfig::is_empty")]
    pub security: SecurityConfig,
    #[serde(default, rename = "group")]
    pub groups: Vec<GroupConfig>,
    #[serde(default, rename = "volume")]
    pub volumes: Vec<VolumeConfig>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// A block device or a regular file holding all volumes.
    #[default]
    File,
    /// No storage: every request completes at once without I/O (reads return guest memory
    /// untouched). For measuring the daemon's own overhead.
    Null,
    /// A file like `file`, whose completions are held until the model of
    /// `[device.emulated]` says the request is done: a disk whose behaviour is known, for
    /// reproducible QoS tests and benchmarks.
    Emulated,
}

impl DeviceKind {
    /// Whether `device.path` holds the data.
    pub fn has_file(self) -> bool {
        self != DeviceKind::Null
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// Block device or file holding all volumes. Relative paths are resolved against the
    /// daemon's working directory. Ignored for `kind = "null"`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Create a file of this size if `path` does not exist.
    #[serde(default)]
    pub create_size: Option<ByteSize>,
    /// Allocate the whole file the daemon creates (`create_size`), so that no volume can
    /// later fail with ENOSPC because others filled the host filesystem; `false` leaves
    /// it sparse.
    #[serde(default = "default_true")]
    pub preallocate: bool,
    #[serde(default)]
    pub kind: DeviceKind,
    /// Open with O_DIRECT (bypass the host page cache).
    #[serde(default = "default_true")]
    pub direct: bool,
    /// Requests in flight to the device, all volumes together.
    #[serde(default = "default_queue_depth")]
    pub queue_depth: u32,
    /// How long a volume's worker may keep looking for new requests and completions
    /// after its last work before it sleeps; its windows (one for waits on the device, one
    /// for the guest's next request) adapt to how soon work follows and close when it
    /// does not come within this (design §8.10). `"0us"`: never poll.
    #[serde(default = "default_poll_max")]
    pub poll_max: crate::duration::DurationUs,
    /// The cost model (`[device.model]`).
    #[serde(default)]
    pub model: crate::cost_model::ModelConfig,
    /// QoS parameters (`[device.qos]`).
    #[serde(default)]
    pub qos: crate::qos::QosConfig,
    /// The true behaviour of `kind = "emulated"` (`[device.emulated]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulated: Option<crate::emulated::EmulatedConfig>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ControlConfig {
    /// REST control socket (served by the control plane).
    #[serde(default)]
    pub socket: Option<PathBuf>,
}

/// `[metrics]`: a read-only listener serving `GET /metrics` alone, for Prometheus.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// `"HOST:PORT"` (TCP, e.g. `"127.0.0.1:9477"`) or an absolute path (a unix socket,
    /// mode 0660). Absent: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
}

/// Where the metrics listener listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetricsAddr {
    Tcp(std::net::SocketAddr),
    Unix(PathBuf),
}

impl MetricsConfig {
    fn is_off(&self) -> bool {
        self.listen.is_none()
    }

    /// The listener's address; None when off. The error is for `metrics.listen`.
    pub fn addr(&self) -> Result<Option<MetricsAddr>, String> {
        let Some(text) = &self.listen else {
            return Ok(None);
        };
        if text.starts_with('/') {
            return Ok(Some(MetricsAddr::Unix(PathBuf::from(text))));
        }
        text.parse()
            .map(|a| Some(MetricsAddr::Tcp(a)))
            .map_err(|_| {
                format!(
                "expected HOST:PORT with a numeric host (e.g. \"127.0.0.1:9477\", \"[::1]:9477\") \
                 or an absolute unix socket path (got {text:?})"
            )
            })
    }
}

impl GroupConfig {
    /// The settings the QoS core applies beyond the weight.
    pub fn policy(&self) -> crate::qos::GroupPolicy {
        crate::qos::GroupPolicy {
            caps: self.caps,
            reserve: self.reserve,
            class: self.class,
            latency_target: self.latency_target,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    pub name: String,
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Parent group; the implicit `root` if absent.
    #[serde(default)]
    pub parent: Option<String>,
    /// Hard limits on the sum of the group's volumes, as a volume's `caps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caps: Option<crate::qos::CapsConfig>,
    /// The minimum the group's volumes get together while they have demand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<crate::qos::ReserveConfig>,
    /// `normal`; `background`: the whole group yields to its foreground siblings;
    /// `latency`: its volumes' latency together meets `latency_target`.
    #[serde(default)]
    pub class: crate::qos::Class,
    /// `class = "latency"`: the target its volumes' requests together must meet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_target: Option<crate::qos::LatencyTarget>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeConfig {
    pub name: String,
    /// The vhost-user socket this volume listens on.
    pub socket: PathBuf,
    /// Permission bits of the socket (default: as the daemon's umask leaves them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_mode: Option<FileMode>,
    /// Group owning the socket, a name or a number (default: the daemon's group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_group: Option<String>,
    /// The frontend's user ids this volume serves (with `allowed_gids`: either matches;
    /// neither given: any process that can connect). Checked on the peer's credentials
    /// before any vhost-user message is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_uids: Option<Vec<u32>>,
    /// The frontend's group ids this volume serves (its primary group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_gids: Option<Vec<u32>>,
    /// First byte of the host disk owned by this volume.
    #[serde(default)]
    pub offset: ByteSize,
    /// The volume's own image file or block device (an LV) instead of a range of
    /// `device.path`: a missing file is created with `size` bytes (allocated unless
    /// `device.preallocate = false`). Its requests still share the device's QoS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Bytes of the host disk owned by this volume (its capacity as the guest sees it).
    pub size: ByteSize,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default = "default_weight")]
    pub weight: u32,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default = "default_num_queues")]
    pub num_queues: u16,
    #[serde(default = "default_queue_size")]
    pub queue_size: u16,
    /// Worker threads serving the volume's queues, each every `workers`-th queue
    /// (1..=num_queues): more than one lets a multi-queue guest use more than one core.
    #[serde(default = "default_workers")]
    pub workers: u16,
    /// One CPU per worker thread, worker `t` pinned to the `t % len`-th (taskset's
    /// numbers): beside the guest's vCPU and the disk's interrupt, a request wakes no
    /// other CPU. Absent: the scheduler places them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_affinity: Option<Vec<u16>>,
    /// Returned by VIRTIO_BLK_T_GET_ID; the volume name if absent.
    #[serde(default)]
    pub serial: Option<String>,
    /// Hard limits on IOPS and bandwidth, with QEMU's throttling semantics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caps: Option<crate::qos::CapsConfig>,
    /// Caps per operation (flush, discard, write_zeroes), which `caps` leave alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_caps: Option<crate::qos::OpCapsConfig>,
    /// `normal`; `latency`: meets `latency_target`; `background`: served from what the
    /// others leave idle.
    #[serde(default)]
    pub class: crate::qos::Class,
    /// The latency class's target, `"p99 2ms"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_target: Option<crate::qos::LatencyTarget>,
    /// The minimum the volume gets while it has demand, whatever the weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<crate::qos::ReserveConfig>,
}

fn default_true() -> bool {
    true
}
fn default_queue_depth() -> u32 {
    256
}
/// QEMU's default for an iothread's `poll-max-ns`: long enough to catch the next requests
/// of a guest that refills its queue as completions come back, sparing the worker's
/// wake-ups (BENCHMARKS.md, data path).
fn default_poll_max() -> crate::duration::DurationUs {
    crate::duration::DurationUs(POLL_MAX_DEFAULT_US)
}
const POLL_MAX_DEFAULT_US: u64 = 32;
/// A window longer than this would only burn CPU: a wake-up costs far less.
const POLL_MAX_LIMIT_US: u64 = 1_000;
fn default_weight() -> u32 {
    crate::qos::WEIGHT_DEFAULT
}
fn default_num_queues() -> u16 {
    1
}
fn default_workers() -> u16 {
    1
}
fn default_queue_size() -> u16 {
    256
}

impl VolumeConfig {
    /// The settings the QoS core applies beyond the weight.
    pub fn policy(&self) -> crate::qos::VolumePolicy {
        crate::qos::VolumePolicy {
            caps: self.caps,
            op_caps: self.op_caps,
            class: self.class,
            latency_target: self.latency_target,
            reserve: self.reserve,
        }
    }

    /// The GET_ID answer: the configured serial or the volume name, at most 20 bytes.
    pub fn serial_bytes(&self) -> Vec<u8> {
        let s = self.serial.as_deref().unwrap_or(&self.name).as_bytes();
        s[..s.len().min(SERIAL_MAX_BYTES)].to_vec()
    }

    /// The numeric group of `socket_group`, looked up in the system's group database.
    pub fn socket_gid(&self, index: usize) -> Result<Option<u32>, ConfigError> {
        self.socket_group
            .as_deref()
            .map(|g| group_id(g).map_err(|e| invalid(self.key(index, "socket_group"), e)))
            .transpose()
    }

    /// How errors name one of its fields: `volume[1] "vm1-data".offset`.
    pub fn key(&self, index: usize, field: &str) -> String {
        format!("volume[{index}] \"{}\".{field}", self.name)
    }
}

impl Config {
    /// Reads, parses and validates (without I/O on the device) a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let config = Self::parse(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.to_owned(),
                message,
            },
            other => other,
        })?;
        Ok(config)
    }

    /// Parses and validates config text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::from("<text>"),
            message: e.to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Groups ordered so that every parent comes before its children (the QoS tree is
    /// built in this order).
    pub fn groups_parents_first(&self) -> Vec<&GroupConfig> {
        let mut placed: HashSet<&str> = HashSet::from([ROOT_GROUP]);
        let mut out = Vec::with_capacity(self.groups.len());
        while out.len() < self.groups.len() {
            let before = out.len();
            for g in &self.groups {
                let parent = g.parent.as_deref().unwrap_or(ROOT_GROUP);
                if !placed.contains(g.name.as_str()) && placed.contains(parent) {
                    placed.insert(&g.name);
                    out.push(g);
                }
            }
            if out.len() == before {
                break; // a cycle; validate() refuses those
            }
        }
        out
    }

    /// A human-readable description of the resolved layout (for `vhost-iocost check`).
    pub fn describe(&self, device_size: Option<u64>, block_size: Option<u64>) -> String {
        use std::fmt::Write;
        let d = &self.device;
        let mut out = String::new();
        let path = d
            .path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "device: kind={:?} path={path} direct={} queue_depth={}",
            d.kind, d.direct, d.queue_depth
        );
        if let (Some(size), Some(bs)) = (device_size, block_size) {
            let _ = writeln!(
                out,
                "  size={} ({size} bytes) logical_block={bs}",
                ByteSize(size)
            );
        }
        if let Some(s) = &self.control.socket {
            let _ = writeln!(out, "control: socket={}", s.display());
        }
        for g in &self.groups {
            let _ = writeln!(
                out,
                "group {:<16} weight={:<5} parent={}",
                g.name,
                g.weight,
                g.parent.as_deref().unwrap_or(ROOT_GROUP)
            );
        }
        for v in &self.volumes {
            let place = match &v.path {
                Some(path) => format!("file {}", path.display()),
                None => format!("bytes {}..{}", v.offset.0, v.offset.0 + v.size.0),
            };
            let _ = writeln!(
                out,
                "volume {:<16} {place} ({}) weight={} group={} queues={}x{} {} socket={}",
                v.name,
                v.size,
                v.weight,
                v.group.as_deref().unwrap_or(ROOT_GROUP),
                v.num_queues,
                v.queue_size,
                if v.read_only { "ro" } else { "rw" },
                v.socket.display()
            );
        }
        out
    }
}

/// Volume and group names appear in URLs, metric labels, log lines and thread names:
/// 1 to 64 of `A–Z a–z 0–9 . _ -`, not starting with `.` or `-`.
pub const NAME_MAX: usize = 64;

#[cfg(test)]
mod tests;
