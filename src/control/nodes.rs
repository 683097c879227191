//! Adding and removing volumes and groups at run time: validated against the
//! running config as a whole (as a config file would be), recorded in the state file,
//! then applied, so that a refused request changes nothing and an accepted one survives
//! a restart.

use super::api::{GroupView, VolumeView};
use super::context::Control;
use super::error::{parse_body, ApiError};
use super::state::Added;
use crate::config::{Config, ConfigError, GroupConfig, VolumeConfig};
use crate::volume_set::VolumeSetError;

/// Ranges the daemon allocates start on this boundary (or the block size, if larger), as
/// partitioning tools align partitions.
const ALLOCATION_ALIGN: u64 = 1 << 20;

/// A config validation error as a 400 naming the field of the request body
/// (`volume[3] "x".size` → `size`).
fn config_error(e: ConfigError) -> ApiError {
    match e {
        ConfigError::Invalid { key, message } => {
            let field = key.rsplit_once("\".").map_or(key.as_str(), |(_, f)| f);
            ApiError::field(field, message)
        }
        other => ApiError::body(other.to_string()),
    }
}

fn volume_set_error(e: VolumeSetError) -> ApiError {
    match e {
        VolumeSetError::Unknown(_) => ApiError::not_found(e.to_string()),
        VolumeSetError::Busy { .. } => ApiError::conflict(e.to_string()),
        VolumeSetError::Invalid(message) => {
            // `volume[3] "x".path /srv/x.img: holds ... bytes`
            let field = message
                .split_once("\".")
                .and_then(|(_, rest)| rest.split_once(' '))
                .map(|(f, _)| f.trim_end_matches(':').to_owned());
            match field {
                Some(f) => ApiError::field(&f, message),
                None => ApiError::body(message),
            }
        }
        VolumeSetError::Failed { .. } => ApiError::conflict(e.to_string()),
    }
}

/// The first free range of `size` bytes on a device of `device_size` bytes, aligned to
/// `align`, among the ranges the volumes of `config` hold.
fn first_fit(config: &Config, size: u64, device_size: u64, align: u64) -> Option<u64> {
    let mut taken: Vec<(u64, u64)> = config
        .volumes
        .iter()
        .filter(|v| v.path.is_none())
        .map(|v| (v.offset.0, v.offset.0.saturating_add(v.size.0)))
        .collect();
    taken.sort_unstable();
    let mut start = 0u64;
    for (offset, end) in taken {
        if offset >= start && offset - start >= size {
            return Some(start);
        }
        start = start.max(end.checked_next_multiple_of(align)?);
    }
    (device_size.checked_sub(start)? >= size).then_some(start)
}

impl Control {
    /// `POST /v1/volumes`: a `[[volume]]` table as JSON. Without `offset` or `path` the
    /// daemon allocates the first free range (aligned to 1 MiB), zeroes it and reports it.
    /// The volume's own file, if it creates one, is created before it is recorded.
    pub fn add_volume(&self, body: &[u8]) -> Result<VolumeView, ApiError> {
        let raw: serde_json::Value = parse_body(body)?;
        let given = |key: &str| raw.get(key).is_some_and(|v| !v.is_null());
        let allocate = !given("offset") && !given("path");
        let mut volume: VolumeConfig = parse_body(body)?;
        let _changing = self.begin_config_change();
        let config = self.config();
        let (device_size, block) = self.volume_set.disk_geometry();
        if allocate {
            let align = ALLOCATION_ALIGN.max(block);
            let offset =
                first_fit(&config, volume.size.0, device_size, align).ok_or_else(|| {
                    ApiError::conflict(format!(
                        "no free range of {} bytes on the device ({device_size} bytes): remove a \
                     volume, or give the volume a path of its own",
                        volume.size.0
                    ))
                })?;
            volume.offset = crate::size::ByteSize(offset);
        }
        let mut next = (*config).clone();
        next.volumes.push(volume.clone());
        next.validate().map_err(config_error)?;
        next.validate_layout(device_size, block)
            .map_err(config_error)?;
        if let Some(cpus) = &volume.cpu_affinity {
            crate::cpu_affinity::available(cpus).map_err(|e| ApiError::field("cpu_affinity", e))?;
        }
        let index = next.volumes.len() - 1;
        if allocate {
            // Zeroed and on disk before the volume is recorded (it may have held a removed
            // volume's data), and not under the state's lock.
            self.volume_set
                .zero_device_range(volume.offset.0, volume.size.0)
                .map_err(|e| ApiError::conflict(format!("cannot zero the allocated range: {e}")))?;
        }
        self.commit(
            |s| s.record_added(Added::Volume(Box::new(volume.clone()))),
            || {
                self.volume_set
                    .add(&volume, index)
                    .map(drop)
                    .map_err(volume_set_error)
            },
        )?;
        self.set_config(next);
        tracing::info!(volume = %volume.name, offset = volume.offset.0, path = ?volume.path, size = volume.size.0, "volume added");
        self.volume(&volume.name)
    }

    /// `DELETE /v1/volumes/{name}`: refused (409) while a frontend is connected unless
    /// `force`, which completes its in-flight requests and closes the connection first.
    pub fn remove_volume(&self, name: &str, force: bool) -> Result<(), ApiError> {
        let _changing = self.begin_config_change();
        let mut next = (*self.config()).clone();
        next.volumes.retain(|v| v.name != name);
        self.check_removal(&next, name)?;
        // Ended before anything is recorded, and not under the state's lock: a forced
        // removal waits for the volume's requests, which must not hold up the API.
        self.volume_set
            .remove(name, force)
            .map_err(volume_set_error)?;
        self.set_config(next);
        self.commit(|s| s.record_removed(name), || Ok(()))
            .map_err(|e| {
                ApiError::internal(format!(
                    "volume {name:?} was removed, but the state file could not record it, so \
                     it will be back after a restart: {}",
                    e.message
                ))
            })
    }

    /// `POST /v1/groups`: a `[[group]]` table as JSON.
    pub fn add_group(&self, body: &[u8]) -> Result<GroupView, ApiError> {
        let group: GroupConfig = parse_body(body)?;
        let _changing = self.begin_config_change();
        let mut next = (*self.config()).clone();
        next.groups.push(group.clone());
        next.validate().map_err(config_error)?;
        self.commit(
            |s| s.record_added(Added::Group(group.clone())),
            || {
                let parent = group
                    .parent
                    .as_deref()
                    .filter(|p| *p != crate::config::ROOT_GROUP);
                self.qos
                    .add_group(&group.name, parent, group.weight)
                    .and_then(|()| self.qos.set_group_policy(&group.name, &group.policy()))
                    .map_err(|e| {
                        let _ = self.qos.remove_group(&group.name);
                        ApiError::from_qos(e)
                    })
            },
        )?;
        self.set_config(next);
        tracing::info!(group = %group.name, parent = ?group.parent, weight = group.weight, "group added");
        self.group(&group.name)
    }

    /// `DELETE /v1/groups/{name}`: only an empty group (409 otherwise).
    pub fn remove_group(&self, name: &str) -> Result<(), ApiError> {
        self.group(name)?;
        let _changing = self.begin_config_change();
        let mut next = (*self.config()).clone();
        next.groups.retain(|g| g.name != name);
        self.check_removal(&next, name)?;
        self.commit(
            |s| s.record_removed(name),
            || {
                self.qos.remove_group(name).map_err(|e| match e {
                    crate::qos::QosError::NotEmpty { .. } => ApiError::conflict(e.to_string()),
                    other => ApiError::from_qos(other),
                })
            },
        )?;
        self.set_config(next);
        tracing::info!(group = %name, "group removed");
        Ok(())
    }

    /// `PATCH /v1/volumes/{name}` with `size`: grows the volume into the free space after
    /// its range (zeroed first) or by growing its file (an LV must have been extended
    /// already), then tells the connected frontend to read the config again.
    pub fn resize_volume(&self, name: &str, size: u64) -> Result<(), ApiError> {
        let _changing = self.begin_config_change();
        let server = self
            .volume_set
            .get(name)
            .ok_or_else(|| ApiError::not_found(format!("no volume named {name:?}")))?;
        let volume = &server.volume;
        let old = volume.capacity();
        if size < old {
            return Err(ApiError::field(
                "size",
                format!(
                    "{size} is less than the volume's {old} bytes: shrinking would cut off the \
                     guest's data, and is not supported"
                ),
            ));
        }
        if size == old {
            return Ok(());
        }
        if size % volume.block_size != 0 {
            return Err(ApiError::field(
                "size",
                format!(
                    "must be a multiple of the block size ({})",
                    volume.block_size
                ),
            ));
        }
        let mut next = (*self.config()).clone();
        let Some(cfg) = next.volumes.iter_mut().find(|v| v.name == name) else {
            return Err(ApiError::not_found(format!("no volume named {name:?}")));
        };
        cfg.size = crate::size::ByteSize(size);
        let own_file = cfg.path.is_some();
        let (device_size, block) = self.volume_set.disk_geometry();
        next.validate_layout(device_size, block).map_err(|e| {
            ApiError::conflict(format!("the space after the volume is not free: {e}"))
        })?;
        // The bytes exist (zeroed: free space, or a grown LV's new extents, may hold
        // another tenant's data) and are on disk before the new size is recorded: a crash
        // in between leaves only zeroed space or a longer file. Not under the state's
        // lock: zeroing gigabytes takes a while.
        let grown = if own_file {
            volume.disk.grow(old, size, next.device.preallocate)
        } else {
            volume.disk.zero_range(volume.host_offset + old, size - old)
        };
        grown.map_err(|e| ApiError::conflict(format!("cannot grow the volume: {e}")))?;
        self.commit(
            |s| {
                if let Some(added) = s.added_volumes.iter_mut().find(|v| v.name == name) {
                    added.size = crate::size::ByteSize(size);
                } else {
                    s.volumes.entry(name.to_owned()).or_default().size =
                        Some(crate::size::ByteSize(size));
                }
            },
            || Ok(()),
        )?;
        volume.set_capacity(size);
        self.set_config(next);
        let told = server.notify_config_change();
        tracing::info!(volume = %name, from = old, to = size, frontend_told = told, "volume grown");
        Ok(())
    }

    /// The running config without `name` must still hold together: nothing else may name
    /// it (a volume's or group's parent, a fault rule). 409 saying what does.
    fn check_removal(&self, next: &Config, name: &str) -> Result<(), ApiError> {
        next.validate().map_err(|e| {
            ApiError::conflict(format!(
                "{name:?} cannot be removed: the config would not hold without it ({e})"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with(ranges: &[(u64, u64)]) -> Config {
        let mut text = String::from("[device]\nkind = \"null\"\n[control]\nsocket = \"c.sock\"\n");
        for (i, (offset, size)) in ranges.iter().enumerate() {
            text += &format!(
                "[[volume]]\nname = \"v{i}\"\nsocket = \"v{i}.sock\"\noffset = {offset}\nsize = {size}\n"
            );
        }
        Config::parse(&text).unwrap()
    }

    #[test]
    fn first_fit_takes_the_first_aligned_gap_that_holds_the_size() {
        const M: u64 = 1 << 20;
        let empty = config_with(&[]);
        assert_eq!(first_fit(&empty, 4 * M, 8 * M, M), Some(0));
        assert_eq!(first_fit(&empty, 9 * M, 8 * M, M), None);
        // A gap of 2 MiB at 2 MiB, then free from 8 MiB + a bit (aligned up to 9 MiB).
        let c = config_with(&[(0, 2 * M), (4 * M, 4 * M + 512)]);
        assert_eq!(first_fit(&c, 2 * M, 16 * M, M), Some(2 * M));
        assert_eq!(first_fit(&c, 3 * M, 16 * M, M), Some(9 * M));
        assert_eq!(first_fit(&c, 8 * M, 16 * M, M), None);
        assert_eq!(first_fit(&c, 7 * M, 16 * M, M), Some(9 * M));
    }
}
