//! Persistence of runtime changes: the state file beside the config.
//!
//! Every change made over the REST API is recorded in `<config file>.state.json`
//! (`config.toml` → `config.toml.state.json`) and re-applied at the next start, on top of
//! the config file, so that it survives a restart. The file holds only what was changed
//! at runtime; everything else keeps coming from the config, and `GET` reports for each
//! value which of the two it comes from (`"source": "config"` or `"runtime"`).
//!
//! ```json
//! {
//!   "version": 1,
//!   "qos":   { "enable": true, "rpct": 95.0, "rlat": "5ms", ... },   // PUT /v1/device/qos
//!   "model": { "preset": "ssd", ... },                                // PUT /v1/device/model
//!   "groups":  { "tenant-a": { "weight": 300, "caps": { "iops": 10000 } } },  // PATCH /v1/groups/..
//!   "volumes": { "vm1-root": { "weight": 50, "group": "tenant-a",            // PATCH /v1/volumes/..
//!                              "class": "background", "reserve": { "pct": 5.0 } } },
//!   "calibrated": { "device": "/dev/nvme0n1", "size": ..., "model": {...}, ... },
//!   "learned": { "device": "/dev/nvme0n1", "base": {...}, "model": { "rbps": ..., ... } }
//! }
//! ```
//!
//! `qos` and `model` replace the whole config section. A volume `group` of `"root"` is
//! the implicit root. The file is written atomically: a temporary file in the same
//! directory is written and fsynced, then renamed over the old one (and the directory
//! fsynced), so a crash leaves either the old or the new state, never a torn one. Names
//! that no longer exist in the config are dropped (with a warning) when the state is
//! applied at start-up.

use crate::calibration::Calibration;
use crate::config::{Config, GroupConfig, VolumeConfig};
use crate::cost_model::ModelConfig;
use crate::qos::{CapsConfig, Class, LatencyTarget, OpCapsConfig, QosConfig, ReserveConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Current state-file format.
pub const STATE_VERSION: u32 = 1;

/// Runtime overrides of a group.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupOverride {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Parent group; `"root"` = the top level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// `{}` = caps removed at runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caps: Option<CapsConfig>,
    /// `{}` = reservation removed at runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<ReserveConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<Class>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_target: Option<LatencyTarget>,
}

/// Runtime overrides of a volume.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeOverride {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Grown at run time, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<crate::size::ByteSize>,
    /// Group name; `"root"` = the root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// `{}` = caps removed at runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caps: Option<CapsConfig>,
    /// `{}` = caps per operation removed at runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_caps: Option<OpCapsConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<Class>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_target: Option<LatencyTarget>,
    /// `{}` = reservation removed at runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<ReserveConfig>,
}

/// Everything changed at runtime.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeState {
    pub version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelConfig>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<String, GroupOverride>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub volumes: BTreeMap<String, VolumeOverride>,
    /// The model measured at start-up when the config gives none (`crate::calibration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibrated: Option<Calibration>,
    /// The model learned from live traffic (`super::learned`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned: Option<LearnedEntry>,
    /// Groups added at run time (`POST /v1/groups`), as `[[group]]` tables.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added_groups: Vec<GroupConfig>,
    /// Volumes added at run time (`POST /v1/volumes`), as `[[volume]]` tables (an
    /// allocated range as its `offset`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added_volumes: Vec<VolumeConfig>,
    /// Groups and volumes of the config file removed at run time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
}

impl Default for RuntimeState {
    fn default() -> Self {
        RuntimeState {
            version: STATE_VERSION,
            qos: None,
            model: None,
            groups: BTreeMap::new(),
            volumes: BTreeMap::new(),
            calibrated: None,
            learned: None,
            added_groups: Vec::new(),
            added_volumes: Vec::new(),
            removed: Vec::new(),
        }
    }
}

/// The state file for a config file: `<config>.state.json` in the same directory.
pub fn state_path(config: &Path) -> PathBuf {
    let mut name = config
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "vhost-iocost".into());
    name.push(".state.json");
    config.with_file_name(name)
}

impl RuntimeState {
    /// Read the state file; a missing file is an empty state.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(format!("state file {}: {e}", path.display())),
        };
        // What to do about it, for every error below: the daemon does not start over a
        // file it cannot read, because that would silently drop the runtime settings.
        let remedy = "repair it, or move it aside to start without the runtime settings it \
                      holds (weights, limits and the calibration set since start-up)";
        let state: RuntimeState = serde_json::from_str(&text)
            .map_err(|e| format!("state file {}: unreadable: {e}; {remedy}", path.display()))?;
        if state.version != STATE_VERSION {
            return Err(format!(
                "state file {}: version {} is not supported (expected {STATE_VERSION}); {remedy}",
                path.display(),
                state.version
            ));
        }
        Ok(state)
    }

    /// Write atomically: temporary file in the same directory, fsync, rename, fsync dir.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
        tmp_name.push(format!(".tmp.{}", std::process::id()));
        let tmp = dir.join(tmp_name);
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        let result = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)?;
            std::fs::File::open(dir)?.sync_all()
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    /// Nothing recorded.
    pub fn is_empty(&self) -> bool {
        self.qos.is_none()
            && self.model.is_none()
            && self.groups.is_empty()
            && self.volumes.is_empty()
            && self.added_groups.is_empty()
            && self.added_volumes.is_empty()
            && self.removed.is_empty()
    }

    /// The config the daemon runs: `file` without the groups and volumes removed at run
    /// time, with those added, validated as a whole.
    pub fn running_config(&self, file: &Config, path: &Path) -> Result<Config, String> {
        let mut config = file.clone();
        config.groups.retain(|g| !self.removed.contains(&g.name));
        config.volumes.retain(|v| !self.removed.contains(&v.name));
        config.groups.extend(self.added_groups.iter().cloned());
        config.volumes.extend(self.added_volumes.iter().cloned());
        // Groups and volumes moved at run time are built where they went (moved one by
        // one, groups could pass through a cycle), and a group removed after its volumes
        // moved out is not missed.
        let root = crate::config::ROOT_GROUP;
        let mut moved = false;
        for g in &mut config.groups {
            if let Some(parent) = self.groups.get(&g.name).and_then(|o| o.parent.as_ref()) {
                g.parent = Some(parent.clone()).filter(|p| p != root);
                moved = true;
            }
        }
        for v in &mut config.volumes {
            let Some(o) = self.volumes.get(&v.name) else {
                continue;
            };
            if let Some(group) = &o.group {
                v.group = Some(group.clone()).filter(|g| g != root);
                moved = true;
            }
            if let Some(size) = o.size {
                v.size = size;
                moved = true;
            }
        }
        if !moved
            && self.added_groups.is_empty()
            && self.added_volumes.is_empty()
            && self.removed.is_empty()
        {
            return Ok(config);
        }
        config.validate().map_err(|e| {
            format!(
                "state file {}: the groups and volumes added, moved and removed at run time do not \
                 fit the config file any more ({e}); edit either so that they do",
                path.display()
            )
        })?;
        Ok(config)
    }

    /// Records that a group or volume was added at run time.
    pub fn record_added(&mut self, node: Added) {
        match node {
            Added::Group(g) => self.added_groups.push(g),
            Added::Volume(v) => self.added_volumes.push(*v),
        }
    }

    /// Records that a group or volume was removed at run time, with its overrides.
    pub fn record_removed(&mut self, name: &str) {
        self.groups.remove(name);
        self.volumes.remove(name);
        let added = self.added_groups.len() + self.added_volumes.len();
        self.added_groups.retain(|g| g.name != name);
        self.added_volumes.retain(|v| v.name != name);
        let was_added = self.added_groups.len() + self.added_volumes.len() < added;
        if !was_added && !self.removed.iter().any(|r| r == name) {
            self.removed.push(name.to_owned());
        }
    }
}

/// A group or volume added at run time.
pub enum Added {
    Group(GroupConfig),
    Volume(Box<VolumeConfig>),
}

/// A learned model kept in the state file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LearnedEntry {
    /// The device it was learned on (its path).
    pub device: String,
    /// The model it was learned from.
    pub base: ModelConfig,
    /// The six numbers learned.
    pub model: ModelConfig,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_is_beside_the_config() {
        assert_eq!(
            state_path(Path::new("/etc/x/disk1.toml")),
            PathBuf::from("/etc/x/disk1.toml.state.json")
        );
        assert_eq!(
            state_path(Path::new("config.toml")),
            PathBuf::from("config.toml.state.json")
        );
    }

    #[test]
    fn saves_atomically_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml.state.json");
        assert_eq!(RuntimeState::load(&path).unwrap(), RuntimeState::default());
        let mut s = RuntimeState::default();
        s.volumes.insert(
            "vm1".into(),
            VolumeOverride {
                weight: Some(300),
                size: None,
                group: Some("root".into()),
                caps: Some(CapsConfig {
                    iops: 2000,
                    ..CapsConfig::default()
                }),
                op_caps: None,
                class: Some(Class::Latency),
                latency_target: Some(LatencyTarget::parse("p99 2ms").unwrap()),
                reserve: Some(ReserveConfig {
                    pct: 5.0,
                    ..ReserveConfig::default()
                }),
            },
        );
        s.groups.insert(
            "g".into(),
            GroupOverride {
                weight: Some(5),
                parent: None,
                caps: Some(CapsConfig::default()),
                reserve: None,
                class: Some(Class::Latency),
                latency_target: Some(LatencyTarget::parse("p99 5ms").unwrap()),
            },
        );
        s.qos = Some(QosConfig {
            min: 50.0,
            ..QosConfig::default()
        });
        s.save(&path).unwrap();
        assert_eq!(RuntimeState::load(&path).unwrap(), s);
        // Only the state file is left: the temporary was renamed.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
        std::fs::write(&path, "{\"version\": 9}").unwrap();
        assert!(RuntimeState::load(&path).unwrap_err().contains("version 9"));
        std::fs::write(&path, "{\"version\": 1, \"bogus\": 1}").unwrap();
        assert!(RuntimeState::load(&path).unwrap_err().contains("bogus"));
    }
}
