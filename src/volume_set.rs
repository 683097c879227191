//! The volumes a daemon serves, which the control plane adds to and removes from while
//! the others keep running. Each volume is a QoS leaf, a [`Volume`] and a
//! [`VolumeServer`] listening on its socket; adding makes all three (or none), removing
//! ends the connection first, then takes the leaf out of the weight tree (design §4.6).

use crate::backend::io::disk::HostDisk;
use crate::backend::vhost_user::acceptor::Acceptor;
use crate::backend::vhost_user::server::{RemoveError, VolumeServer};
use crate::backend::volume::{SharedDisk, Volume};
use crate::config::{DeviceConfig, VolumeConfig, ROOT_GROUP};
use crate::lock::{Locked, RwLocked};
use crate::qos::{QosDevice, VolumeQos};
use std::sync::{Arc, Mutex, RwLock};

/// A served volume.
pub type Server = VolumeServer<Arc<VolumeQos>>;

/// Why a volume could not be added or removed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeSetError {
    #[error("no volume named {0:?}")]
    Unknown(String),
    #[error("volume {name:?}: {source}")]
    Busy { name: String, source: RemoveError },
    /// The message names the key (`volume[3] "x".path: ...`).
    #[error("{0}")]
    Invalid(String),
    #[error("volume {name:?}: {message}")]
    Failed { name: String, message: String },
}

pub struct VolumeSet {
    pub qos: Arc<QosDevice>,
    shared: Arc<SharedDisk>,
    acceptor: Arc<Acceptor>,
    device: DeviceConfig,
    servers: RwLock<Vec<Arc<Server>>>,
    /// One addition or removal at a time: each checks names, then changes three places.
    changing: Mutex<()>,
    /// Stopping: no volume is added any more.
    stopped: std::sync::atomic::AtomicBool,
}

impl VolumeSet {
    pub fn new(
        qos: Arc<QosDevice>,
        shared: Arc<SharedDisk>,
        acceptor: Arc<Acceptor>,
        device: DeviceConfig,
    ) -> Self {
        VolumeSet {
            qos,
            shared,
            acceptor,
            device,
            servers: RwLock::new(Vec::new()),
            changing: Mutex::new(()),
            stopped: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Every volume, in the order they were added.
    pub fn list(&self) -> Vec<Arc<Server>> {
        self.servers.read_locked().clone()
    }

    /// The volume named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Server>> {
        self.list().into_iter().find(|s| s.volume.name == name)
    }

    /// The shared disk's size and logical block size (what ranges are checked against).
    pub fn disk_geometry(&self) -> (u64, u64) {
        (self.shared.disk.size, self.shared.disk.block_size)
    }

    /// Makes `len` bytes of the device at `offset` read as zeroes, durably: a range the
    /// daemon allocates may hold a removed volume's data.
    pub fn zero_device_range(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.shared.disk.zero_range(offset, len)
    }

    /// Opens the volume's own file if it has one, makes its QoS leaf and starts listening
    /// on its socket; on failure nothing of it is left (a file it created is removed).
    /// `index` names it in errors (`volume[index]`). The config is validated by the
    /// caller.
    pub fn add(&self, v: &VolumeConfig, index: usize) -> Result<Arc<Server>, VolumeSetError> {
        let _one = self.changing.locked();
        if self.stopped.load(std::sync::atomic::Ordering::Acquire) {
            return Err(VolumeSetError::Failed {
                name: v.name.clone(),
                message: "the daemon is stopping".into(),
            });
        }
        let socket_gid = v
            .socket_gid(index)
            .map_err(|e| VolumeSetError::Invalid(e.to_string()))?;
        let created = v.path.as_ref().filter(|p| !p.exists()).cloned();
        let result = self.add_opened(v, index, socket_gid);
        if let (Err(_), Some(created)) = (&result, created) {
            let _ = std::fs::remove_file(created);
        }
        result
    }

    fn add_opened(
        &self,
        v: &VolumeConfig,
        index: usize,
        socket_gid: Option<u32>,
    ) -> Result<Arc<Server>, VolumeSetError> {
        let key = v.key(index, "path");
        let own_disk = v
            .path
            .as_deref()
            .map(|path| HostDisk::open_volume(&key, path, v.size.0, &self.device))
            .transpose()
            .map_err(|e| VolumeSetError::Invalid(e.to_string()))?;
        if let Some(disk) = &own_disk {
            self.check_not_shared(disk, &key)?;
        }
        let failed = |message: String| VolumeSetError::Failed {
            name: v.name.clone(),
            message,
        };

        let handle = add_to_qos(&self.qos, v).map_err(|e| failed(e.to_string()))?;
        let mut volume = Volume::new(v, self.shared.clone(), own_disk, handle);
        volume.socket_gid = socket_gid;
        let started =
            VolumeServer::start(Arc::new(volume), &self.acceptor).map_err(|e| e.to_string());
        match started {
            Ok(server) => {
                self.servers.write_locked().push(server.clone());
                Ok(server)
            }
            Err(message) => {
                let _ = self.qos.remove_volume(&v.name);
                Err(failed(message))
            }
        }
    }

    /// Removes a volume: refused while a frontend is connected unless `force`, which
    /// completes its in-flight requests and closes the connections first. Its socket
    /// files are removed; its own file (`path`) or its range of the device is left as it
    /// is.
    pub fn remove(&self, name: &str, force: bool) -> Result<(), VolumeSetError> {
        let _one = self.changing.locked();
        let server = self
            .get(name)
            .ok_or_else(|| VolumeSetError::Unknown(name.to_owned()))?;
        server
            .remove(force)
            .map_err(|source| VolumeSetError::Busy {
                name: name.to_owned(),
                source,
            })?;
        self.servers
            .write_locked()
            .retain(|s| !Arc::ptr_eq(s, &server));
        self.qos
            .remove_volume(name)
            .map_err(|e| VolumeSetError::Failed {
                name: name.to_owned(),
                message: e.to_string(),
            })?;
        tracing::info!(volume = %name, force, "volume removed");
        Ok(())
    }

    /// A volume's own file must be neither the device nor another volume's file, whatever
    /// path names it (a symlink, `/dev/disk/by-id/...`).
    fn check_not_shared(&self, disk: &HostDisk, key: &str) -> Result<(), VolumeSetError> {
        let Some(id) = disk.identity() else {
            return Ok(());
        };
        let used = |other: &HostDisk| other.identity() == Some(id);
        let by = if used(&self.shared.disk) {
            Some("the device".to_owned())
        } else {
            self.list()
                .iter()
                .find(|s| used(&s.volume.disk))
                .map(|s| format!("volume {:?}", s.volume.name))
        };
        match by {
            Some(by) => Err(VolumeSetError::Invalid(format!(
                "{key} {}: is the file or device of {by}",
                disk.path
                    .as_deref()
                    .unwrap_or(std::path::Path::new("?"))
                    .display()
            ))),
            None => Ok(()),
        }
    }

    /// Starts serving frontends: until then they wait in the sockets' backlogs, so that a
    /// daemon that drops its privileges handles none of their messages before.
    pub fn serve_frontends(&self) {
        self.acceptor.open();
    }

    /// Completes in-flight I/O of every connected frontend, closes the connections and
    /// removes the sockets; no volume is added after.
    pub fn stop(&self) {
        let _one = self.changing.locked();
        self.stopped
            .store(true, std::sync::atomic::Ordering::Release);
        for s in self.list() {
            s.stop();
        }
        self.acceptor.stop();
    }
}

/// Adds volume `v` to the QoS tree under its group, with its weight and its policy (caps,
/// class, reservation); on a refused policy nothing is left behind. `run` adds every
/// volume this way, and `check` too, so that both refuse the same configurations.
pub fn add_to_qos(
    qos: &QosDevice,
    v: &VolumeConfig,
) -> Result<Arc<VolumeQos>, crate::qos::QosError> {
    let group = v.group.as_deref().filter(|g| *g != ROOT_GROUP);
    let handle = qos.add_volume(&v.name, group, v.weight)?;
    if let Err(e) = qos.set_volume_policy(&v.name, &v.policy()) {
        let _ = qos.remove_volume(&v.name);
        return Err(e);
    }
    Ok(handle)
}
