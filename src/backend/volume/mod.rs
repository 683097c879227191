//! A volume: one guest disk, a byte range of the shared host disk or a file (or block
//! device) of its own, and the state that outlives any one vhost-user connection (its QoS
//! handle and its counters).
//!
//! [`lease`]: which of a volume's two connections (its socket and its hand-over socket)
//! may use the rings; [`peer`]: whose connections a volume serves.

pub(crate) mod lease;
pub mod peer;

use crate::backend::admission::Admission;
use crate::backend::io::disk::HostDisk;
use crate::backend::io::slots::DeviceSlots;
use crate::backend::virtio::blk_config::{MAX_DISCARD_SECTORS, MAX_WRITE_ZEROES_SECTORS};
use crate::backend::virtio::request::Limits;
use crate::config::VolumeConfig;
use crate::lock::Locked;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// The host disk as the volumes share it: its data and the device whose time and slots
/// they share (volumes with files of their own too).
pub struct SharedDisk {
    pub disk: std::sync::Arc<HostDisk>,
    pub slots: DeviceSlots,
    /// `kind = "emulated"`: when each request completes.
    pub emulated: Option<std::sync::Arc<std::sync::Mutex<crate::emulated::EmulatedDisk>>>,
    /// `[[device.emulated.faults]]`: device errors on demand (empty otherwise).
    pub faults: crate::emulated::FaultPlan,
    /// `device.poll_max` in ns: how long a worker may poll for work (design §8.10).
    pub poll_max_ns: u64,
}

/// Request counters, readable while the data path runs (control plane, tests).
#[derive(Default, Debug)]
pub struct VolumeCounters {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub flushes: AtomicU64,
    pub discards: AtomicU64,
    pub write_zeroes: AtomicU64,
    /// Requests answered IOERR (invalid or failed on the device).
    pub errors: AtomicU64,
    /// Requests answered UNSUPP.
    pub unsupported: AtomicU64,
    /// Requests that went through the O_DIRECT bounce buffer.
    pub bounced: AtomicU64,
    pub connections: AtomicU64,
    /// Frontends connected now: through the socket, the hand-over socket, or both.
    pub frontends: std::sync::atomic::AtomicU32,
}

impl VolumeCounters {
    /// Whether any frontend is connected now.
    pub fn connected(&self) -> bool {
        self.frontends.load(Ordering::Acquire) > 0
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

pub struct Volume<A: Admission> {
    pub name: String,
    pub socket: PathBuf,
    /// Permission bits and group given to the socket once bound (`socket_mode`,
    /// `socket_group`; `None` leaves what the umask and the daemon's group give).
    pub socket_mode: Option<u32>,
    pub socket_gid: Option<u32>,
    /// Whose connections are served (`allowed_uids`, `allowed_gids`).
    pub peers: crate::backend::volume::peer::PeerFilter,
    /// Where the volume's bytes are: the shared host disk, or its own file.
    pub disk: std::sync::Arc<HostDisk>,
    /// First byte of this volume on `disk`.
    pub host_offset: u64,
    /// What requests are checked against; its capacity is the one at start-up, the
    /// current one is [`Volume::capacity`].
    pub limits: Limits,
    /// Bytes the guest may use now: grows when the volume is resized.
    capacity: AtomicU64,
    pub block_size: u64,
    pub num_queues: u16,
    pub queue_size: u16,
    pub serial: Vec<u8>,
    pub shared: std::sync::Arc<SharedDisk>,
    pub admission: A,
    pub counters: VolumeCounters,
    /// Which connection may use the rings: the socket's or the hand-over socket's.
    pub lease: std::sync::Arc<crate::backend::volume::lease::DataPlaneLease>,
    /// Worker threads per connection (`workers`), each serving every `workers`-th queue.
    pub workers: u16,
    /// The CPU each worker thread is pinned to, worker `t` to the `t % len`-th (empty:
    /// the scheduler places them).
    pub cpu_affinity: Vec<u16>,
    /// Taken by a worker around its calls into admission control: the QoS core admits
    /// one volume's requests from one thread at a time (design §8.11).
    admission_turn: std::sync::Mutex<()>,
}

impl<A: Admission> Volume<A> {
    /// A volume on `own_disk` (its `path`) if it has one, else on the shared disk.
    pub fn new(
        cfg: &VolumeConfig,
        shared: std::sync::Arc<SharedDisk>,
        own_disk: Option<HostDisk>,
        admission: A,
    ) -> Self {
        let disk = own_disk.map_or_else(|| shared.disk.clone(), std::sync::Arc::new);
        let block_size = disk.block_size.max(512);
        Volume {
            name: cfg.name.clone(),
            socket: cfg.socket.clone(),
            socket_mode: cfg.socket_mode.map(|m| m.0),
            socket_gid: None,
            peers: crate::backend::volume::peer::PeerFilter {
                uids: cfg.allowed_uids.clone().unwrap_or_default(),
                gids: cfg.allowed_gids.clone().unwrap_or_default(),
            },
            disk,
            host_offset: cfg.offset.0,
            limits: Limits {
                capacity: cfg.size.0,
                read_only: cfg.read_only,
                // Like QEMU: a request may use every descriptor but header and status.
                seg_max: u32::from(cfg.queue_size).saturating_sub(2).max(1),
                max_discard_sectors: MAX_DISCARD_SECTORS,
                max_write_zeroes_sectors: MAX_WRITE_ZEROES_SECTORS,
            },
            capacity: AtomicU64::new(cfg.size.0),
            block_size,
            num_queues: cfg.num_queues,
            queue_size: cfg.queue_size,
            serial: cfg.serial_bytes(),
            shared,
            admission,
            counters: VolumeCounters::default(),
            lease: Default::default(),
            workers: cfg.workers,
            cpu_affinity: cfg.cpu_affinity.clone().unwrap_or_default(),
            admission_turn: Default::default(),
        }
    }

    /// Takes the volume's admission turn (see `admission_turn`).
    pub fn admission_turn(&self) -> std::sync::MutexGuard<'_, ()> {
        self.admission_turn.locked()
    }

    /// The capacity the guest may use now, bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Acquire)
    }

    /// The limits requests are checked against now.
    pub fn current_limits(&self) -> Limits {
        Limits {
            capacity: self.capacity(),
            ..self.limits
        }
    }

    /// Grows (or shrinks) what the guest may use; the caller has made the bytes exist.
    pub fn set_capacity(&self, bytes: u64) {
        self.capacity.store(bytes, Ordering::Release);
    }
}
