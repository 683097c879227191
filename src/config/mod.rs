//! The daemon's TOML configuration: the schema, defaults and validation.
//!
//! The schema is the user-facing contract: keys may be added, never renamed. Every error
//! names the offending key (`volume[1] "vm1-data".offset: ...`) so an operator can fix the
//! file without reading code. Validation runs in two steps: [`Config::validate`] checks
//! everything that needs no I/O; [`Config::validate_layout`] checks the volume ranges once
//! the host disk's size and logical block size are known.

mod socket_access;

use crate::size::ByteSize;
pub use socket_access::{group_id, FileMode};

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
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

/// A QoS validation result whose message starts with its key (`caps.iops: ...`), as a
/// config error naming the full key; `key` makes it (`caps.iops` → `volume[0]
/// "a".caps.iops`), `whole` is the key when the message names none.
fn keyed(
    key: &dyn Fn(&str) -> String,
    whole: &str,
    checked: Result<(), String>,
) -> Result<(), ConfigError> {
    checked.map_err(|e| match e.split_once(": ") {
        Some((field, message)) => invalid(key(field), message),
        None => invalid(key(whole), e),
    })
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

    /// Everything that can be checked without opening the device.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let d = &self.device;
        if d.kind.has_file() && d.path.is_none() {
            let kind = if d.kind == DeviceKind::File {
                "file"
            } else {
                "emulated"
            };
            return Err(invalid(
                "device.path",
                format!("required when device.kind = \"{kind}\""),
            ));
        }
        match (&d.emulated, d.kind) {
            (None, DeviceKind::Emulated) => {
                return Err(invalid(
                    "device.emulated",
                    "required when device.kind = \"emulated\" (the device's six numbers)",
                ))
            }
            (Some(_), kind) if kind != DeviceKind::Emulated => {
                return Err(invalid(
                    "device.emulated",
                    "only for device.kind = \"emulated\"",
                ))
            }
            (Some(e), _) => e.validate().map_err(ConfigError::Section)?,
            (None, _) => {}
        }
        if d.queue_depth == 0 || d.queue_depth > 65_536 {
            return Err(invalid(
                "device.queue_depth",
                format!("must be 1..=65536 (got {})", d.queue_depth),
            ));
        }
        if d.poll_max.0 > POLL_MAX_LIMIT_US {
            return Err(invalid(
                "device.poll_max",
                format!(
                    "must be at most {POLL_MAX_LIMIT_US}us (got {}us)",
                    d.poll_max.0
                ),
            ));
        }
        if let Some(size) = d.create_size {
            if size.0 == 0 || size.0 % 512 != 0 {
                return Err(invalid(
                    "device.create_size",
                    format!("must be a non-zero multiple of 512 bytes (got {size})"),
                ));
            }
        }
        d.model.validate().map_err(ConfigError::Section)?;
        d.qos.validate().map_err(ConfigError::Section)?;
        self.validate_groups()?;
        self.validate_volumes()?;
        // Static range check with the smallest possible block size; the real one is checked
        // again in validate_layout once the device is open.
        self.validate_layout(u64::MAX, 512)
    }

    fn validate_groups(&self) -> Result<(), ConfigError> {
        let mut names = HashSet::new();
        for (i, g) in self.groups.iter().enumerate() {
            let key = |f: &str| format!("group[{i}] \"{}\".{f}", g.name);
            if g.name == ROOT_GROUP {
                return Err(invalid(key("name"), format!("must not be `{ROOT_GROUP}`")));
            }
            check_name(&key("name"), &g.name)?;
            if !names.insert(g.name.as_str()) {
                return Err(invalid(key("name"), "duplicate group name"));
            }
            check_weight(&key("weight"), g.weight)?;
            if let Some(caps) = &g.caps {
                keyed(&key, "caps", caps.validate())?;
            }
            if g.class == crate::qos::Class::Latency && g.latency_target.is_none() {
                return Err(invalid(
                    key("latency_target"),
                    "class = \"latency\" needs a target, e.g. \"p99 2ms\"",
                ));
            }
            if let Some(r) = &g.reserve {
                keyed(&key, "reserve", r.validate())?;
            }
        }
        // Parents must exist, and following parents must reach the root (no cycles).
        let parent_of: HashMap<&str, &str> = self
            .groups
            .iter()
            .map(|g| (g.name.as_str(), g.parent.as_deref().unwrap_or(ROOT_GROUP)))
            .collect();
        for (i, g) in self.groups.iter().enumerate() {
            let mut cur = g.name.as_str();
            for _ in 0..=self.groups.len() {
                let parent = parent_of[cur];
                if parent == ROOT_GROUP {
                    break;
                }
                if !parent_of.contains_key(parent) {
                    return Err(invalid(
                        format!("group[{i}] \"{}\".parent", g.name),
                        format!("unknown group `{parent}`"),
                    ));
                }
                cur = parent;
            }
            if parent_of[cur] != ROOT_GROUP {
                return Err(invalid(
                    format!("group[{i}] \"{}\".parent", g.name),
                    "the parent chain forms a cycle",
                ));
            }
        }
        Ok(())
    }

    fn validate_volumes(&self) -> Result<(), ConfigError> {
        if self.volumes.is_empty() && self.control.socket.is_none() {
            return Err(invalid(
                "volume",
                "at least one [[volume]] is required (or a [control] socket, to add them at \
                 run time)",
            ));
        }
        let groups: HashSet<&str> = self.groups.iter().map(|g| g.name.as_str()).collect();
        let mut names = HashSet::new();
        let mut sockets = HashSet::new();
        let mut paths = HashSet::new();
        for (i, v) in self.volumes.iter().enumerate() {
            check_name(&v.key(i, "name"), &v.name)?;
            if !names.insert(v.name.as_str()) {
                return Err(invalid(v.key(i, "name"), "duplicate volume name"));
            }
            if groups.contains(v.name.as_str()) {
                return Err(invalid(
                    v.key(i, "name"),
                    "a group has this name (groups and volumes share names)",
                ));
            }
            // A volume listens on its socket and on `<socket>.handover` (design §8.9).
            let handover = crate::socket_path::handover(&v.socket);
            if handover.as_os_str().len() > crate::socket_path::MAX_LEN {
                return Err(invalid(
                    v.key(i, "socket"),
                    format!(
                        "{} is too long: a Unix socket path holds at most {} bytes, and the \
                         volume also listens on <socket>.handover ({} bytes)",
                        v.socket.display(),
                        crate::socket_path::MAX_LEN,
                        handover.as_os_str().len()
                    ),
                ));
            }
            for path in [v.socket.clone(), handover] {
                if !sockets.insert(path.clone()) {
                    return Err(invalid(
                        v.key(i, "socket"),
                        format!(
                            "{} is already used by another volume (as its socket or its \
                             hand-over socket, <socket>.handover)",
                            path.display()
                        ),
                    ));
                }
                if self.control.socket.as_deref() == Some(path.as_path()) {
                    return Err(invalid(
                        v.key(i, "socket"),
                        format!("{} is control.socket", path.display()),
                    ));
                }
            }
            check_weight(&v.key(i, "weight"), v.weight)?;
            let key = |f: &str| v.key(i, f);
            if let Some(caps) = &v.caps {
                keyed(&key, "caps", caps.validate())?;
            }
            if let Some(op_caps) = &v.op_caps {
                keyed(&key, "op_caps", op_caps.validate())?;
            }
            if v.class == crate::qos::Class::Latency && v.latency_target.is_none() {
                return Err(invalid(
                    v.key(i, "latency_target"),
                    "class = \"latency\" needs a target, e.g. \"p99 2ms\"",
                ));
            }
            if let Some(r) = &v.reserve {
                keyed(&key, "reserve", r.validate())?;
            }
            if let Some(path) = &v.path {
                if !self.device.kind.has_file() {
                    return Err(invalid(
                        v.key(i, "path"),
                        "not with device.kind = \"null\" (it has no data)",
                    ));
                }
                if v.offset.0 != 0 {
                    return Err(invalid(
                        v.key(i, "offset"),
                        "not with path: the volume is its file from byte 0",
                    ));
                }
                if self.device.path.as_deref() == Some(path.as_path()) {
                    return Err(invalid(v.key(i, "path"), "same path as device.path"));
                }
                if !paths.insert(path.as_path()) {
                    return Err(invalid(
                        v.key(i, "path"),
                        format!("{} is already used by another volume", path.display()),
                    ));
                }
            }
            if let Some(group) = &v.group {
                if !groups.contains(group.as_str()) && group != ROOT_GROUP {
                    return Err(invalid(
                        v.key(i, "group"),
                        format!("unknown group `{group}`"),
                    ));
                }
            }
            if v.num_queues == 0 || v.num_queues > MAX_QUEUES {
                return Err(invalid(
                    v.key(i, "num_queues"),
                    format!("must be 1..={MAX_QUEUES} (got {})", v.num_queues),
                ));
            }
            if v.workers == 0 || v.workers > v.num_queues {
                return Err(invalid(
                    v.key(i, "workers"),
                    format!(
                        "must be 1..=num_queues ({}) (got {}): each worker serves at least one queue",
                        v.num_queues, v.workers
                    ),
                ));
            }
            if let Some(cpus) = &v.cpu_affinity {
                crate::cpu_affinity::check(cpus, v.workers)
                    .map_err(|e| invalid(v.key(i, "cpu_affinity"), e))?;
            }
            if !v.queue_size.is_power_of_two() || v.queue_size > MAX_QUEUE_SIZE {
                return Err(invalid(
                    v.key(i, "queue_size"),
                    format!(
                        "must be a power of two up to {MAX_QUEUE_SIZE} (got {})",
                        v.queue_size
                    ),
                ));
            }
            if let Some(serial) = &v.serial {
                if serial.len() > SERIAL_MAX_BYTES {
                    return Err(invalid(
                        v.key(i, "serial"),
                        format!("at most {SERIAL_MAX_BYTES} bytes (got {})", serial.len()),
                    ));
                }
            }
        }
        let faults = self.device.emulated.iter().flat_map(|e| &e.faults);
        for (at, rule) in faults.enumerate() {
            if let Some(v) = rule.volume.as_deref().filter(|v| !names.contains(v)) {
                return Err(invalid(
                    format!("device.emulated.faults[{at}].volume"),
                    format!("no volume named \"{v}\""),
                ));
            }
        }
        Ok(())
    }

    /// Checks the volume ranges against the opened device: block alignment, the end of the
    /// device, and overlaps between volumes.
    pub fn validate_layout(&self, device_size: u64, block_size: u64) -> Result<(), ConfigError> {
        let mut ranges: Vec<(u64, u64, usize)> = Vec::with_capacity(self.volumes.len());
        for (i, v) in self.volumes.iter().enumerate() {
            if v.path.is_some() {
                // Its own file: its size is checked against that file's block size when
                // it is opened ([`crate::backend::disk::HostDisk::open_volume`]).
                if v.size.0 == 0 || v.size.0 % 512 != 0 {
                    return Err(invalid(
                        v.key(i, "size"),
                        format!("must be a non-zero multiple of 512 bytes (got {})", v.size),
                    ));
                }
                continue;
            }
            for (field, value) in [("offset", v.offset.0), ("size", v.size.0)] {
                if value % block_size != 0 {
                    return Err(invalid(
                        v.key(i, field),
                        format!(
                            "{value} is not a multiple of the device's logical block size ({block_size})"
                        ),
                    ));
                }
            }
            if v.size.0 == 0 {
                return Err(invalid(v.key(i, "size"), "must not be zero"));
            }
            let end = v
                .offset
                .0
                .checked_add(v.size.0)
                .ok_or_else(|| invalid(v.key(i, "size"), "offset + size overflows 64 bits"))?;
            if end > device_size {
                return Err(invalid(
                    v.key(i, "size"),
                    format!(
                        "the range {}..{end} ends past the end of the device ({device_size} bytes)",
                        v.offset.0
                    ),
                ));
            }
            ranges.push((v.offset.0, end, i));
        }
        ranges.sort_unstable();
        for pair in ranges.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b.0 < a.1 {
                let (va, vb) = (&self.volumes[a.2], &self.volumes[b.2]);
                return Err(invalid(
                    vb.key(b.2, "offset"),
                    format!(
                        "range {}..{} overlaps volume \"{}\" ({}..{})",
                        b.0, b.1, va.name, a.0, a.1
                    ),
                ));
            }
        }
        Ok(())
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

fn check_name(key: &str, name: &str) -> Result<(), ConfigError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(invalid(key, format!("must be 1 to {NAME_MAX} characters")));
    }
    if let Some(c) = name.chars().find(|&c| !allowed(c)) {
        return Err(invalid(
            key,
            format!("{c:?} is not allowed: use letters, digits, `.`, `_` and `-`"),
        ));
    }
    if name.starts_with(['.', '-']) {
        return Err(invalid(key, "must not start with `.` or `-`"));
    }
    Ok(())
}

fn check_weight(key: &str, weight: u32) -> Result<(), ConfigError> {
    crate::qos::check_weight(weight).map_err(|e| invalid(key, e.to_string()))
}

#[cfg(test)]
mod tests;
