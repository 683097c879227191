//! Configuration checks: everything that needs no I/O ([`Config::validate`]) and the
//! volume ranges once the device is open ([`Config::validate_layout`]). Every error names
//! its key.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::{
    invalid, Config, ConfigError, DeviceKind, MetricsAddr, VolumeConfig, MAX_QUEUES,
    MAX_QUEUE_SIZE, NAME_MAX, POLL_MAX_LIMIT_US, ROOT_GROUP, SERIAL_MAX_BYTES,
};

impl Config {
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
        self.metrics
            .addr()
            .map_err(|e| invalid("metrics.listen", e))?;
        if let (Some(MetricsAddr::Unix(path)), Some(control)) =
            (self.metrics.addr().ok().flatten(), &self.control.socket)
        {
            if &path == control {
                return Err(invalid("metrics.listen", "the same path as control.socket"));
            }
        }
        d.model.validate().map_err(ConfigError::Section)?;
        d.qos.validate().map_err(ConfigError::Section)?;
        self.security.identity()?;
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
            if let Some(group) = &v.group {
                if !groups.contains(group.as_str()) && group != ROOT_GROUP {
                    return Err(invalid(
                        v.key(i, "group"),
                        format!("unknown group `{group}`"),
                    ));
                }
            }
            self.check_volume_sockets(i, v, &mut sockets)?;
            for (key, ids) in [
                ("allowed_uids", &v.allowed_uids),
                ("allowed_gids", &v.allowed_gids),
            ] {
                if ids.as_ref().is_some_and(|ids| ids.is_empty()) {
                    return Err(invalid(
                        v.key(i, key),
                        "an empty list would refuse every frontend; leave it out to allow any",
                    ));
                }
            }
            self.check_volume_path(i, v, &mut paths)?;
            check_volume_qos(i, v)?;
            check_volume_queues(i, v)?;
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

    /// A volume listens on its socket and on `<socket>.handover` (design §8.9): both must
    /// fit a Unix socket path and be used by nothing else.
    fn check_volume_sockets(
        &self,
        i: usize,
        v: &VolumeConfig,
        sockets: &mut HashSet<PathBuf>,
    ) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// A volume in a file of its own: only on a device with data, from its byte 0, and
    /// in a file no other volume and not the device uses.
    fn check_volume_path<'a>(
        &self,
        i: usize,
        v: &'a VolumeConfig,
        paths: &mut HashSet<&'a Path>,
    ) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// Checks the volume ranges against the opened device: block alignment, the end of the
    /// device, and overlaps between volumes.
    pub fn validate_layout(&self, device_size: u64, block_size: u64) -> Result<(), ConfigError> {
        let mut ranges: Vec<(u64, u64, usize)> = Vec::with_capacity(self.volumes.len());
        for (i, v) in self.volumes.iter().enumerate() {
            if v.path.is_some() {
                // Its own file: its size is checked against that file's block size when
                // it is opened ([`crate::backend::io::disk::HostDisk::open_volume`]).
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

/// A volume's QoS settings: weight, caps, class and reservation.
fn check_volume_qos(i: usize, v: &VolumeConfig) -> Result<(), ConfigError> {
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
    Ok(())
}

/// A volume's virtio queues, their workers and placement, and its serial.
fn check_volume_queues(i: usize, v: &VolumeConfig) -> Result<(), ConfigError> {
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
    Ok(())
}
