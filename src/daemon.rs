//! Assembles the daemon from a validated config: opens the host disk, builds the volumes,
//! starts one listener per volume, and stops gracefully on SIGINT/SIGTERM.

use crate::backend::admission::Unlimited;
use crate::backend::disk::{DiskError, HostDisk};
use crate::backend::server::VolumeServer;
use crate::backend::slots::DeviceSlots;
use crate::backend::volume::{SharedDisk, Volume};
use crate::config::{Config, ConfigError};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Disk(#[from] DiskError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

pub struct Daemon {
    pub servers: Vec<Arc<VolumeServer<Unlimited>>>,
}

impl Daemon {
    /// Opens the device and starts serving every volume.
    pub fn start(config: &Config) -> Result<Self, DaemonError> {
        let disk = HostDisk::open(&config.device)?;
        config.validate_layout(disk.size, disk.block_size)?;
        tracing::info!(
            path = ?disk.path, size = disk.size, block_size = disk.block_size,
            direct = disk.direct, "host disk ready"
        );
        let shared = Arc::new(SharedDisk {
            disk,
            slots: DeviceSlots::new(config.device.queue_depth),
        });
        let mut servers = Vec::new();
        for v in &config.volumes {
            let volume = Arc::new(Volume::new(v, shared.clone(), Unlimited));
            servers.push(VolumeServer::start(volume)?);
        }
        Ok(Daemon { servers })
    }

    /// Completes in-flight I/O of every connected frontend, closes the connections and
    /// removes the sockets.
    pub fn stop(&self) {
        for s in &self.servers {
            s.stop();
        }
    }
}

/// Blocks SIGINT and SIGTERM in this thread (and every thread it spawns afterwards) so that
/// [`wait_for_signal`] can take them synchronously.
pub fn block_termination_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local, zero-initialised set; pthread_sigmask on the
    // calling thread with valid pointers.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits for one of the blocked signals and returns its number.
pub fn wait_for_signal(set: &libc::sigset_t) -> i32 {
    let mut sig: libc::c_int = 0;
    // SAFETY: set is an initialised sigset and sig a valid out-pointer.
    while unsafe { libc::sigwait(set, &mut sig) } != 0 {}
    sig
}
