//! cloud-hypervisor's vhost-user-blk frontend, replayed message for message against the
//! daemon.
//!
//! The replay follows cloud-hypervisor at commit ae44c29 (vhost 0.17; the wire format is
//! the same as vhost 0.18's `Frontend`, used here):
//! - `virtio-devices/src/vhost_user/blk.rs`: `Blk::new`, the creation handshake.
//! - `virtio-devices/src/vhost_user/vu_common_ctrl.rs`: `connect_vhost_user`,
//!   `negotiate_features_vhost_user`, `setup_vhost_user`, `reset_vhost_user`,
//!   `pause/resume_vhost_user`, `reinitialize_vhost_user`, `add_memory_region`.
//! - `virtio-devices/src/vhost_user/mod.rs`: `DEFAULT_VIRTIO_FEATURES`, the reconnect on
//!   HUP, memory hotplug.
//!
//! Four ways this differs from `RawFrontend::connect` (the QEMU-like handshake):
//! - NEED_REPLY is set only after SET_PROTOCOL_FEATURES.
//! - GET_CONFIG (offset 0, 60 bytes, flags WRITABLE = 0x1) comes before any SET_FEATURES.
//! - Activation (the guest's DRIVER_OK) is separate from negotiation. It sends
//!   SET_FEATURES, SET_MEM_TABLE with every region, SET_VRING_NUM for each queue, then per
//!   queue ADDR, BASE (the avail index read from guest memory), CALL and KICK, and last
//!   SET_VRING_ENABLE for each queue.
//! - Only the queues the guest driver set up take part.
//!
//! Guest RAM is laid out as CH lays it out on x86_64: one memfd per range at file offset
//! 0, one range at GPA 0 and one at 4 GiB. The ranges are small, sparse memfds. A third
//! memfd is the memory that gets hot-plugged.
//!
//! Inflight tracking (INFLIGHT_SHMFD) as CH does it: at activation, after the
//! SET_VRING_NUMs, GET_INFLIGHT_FD once per device and SET_INFLIGHT_FD with the reply,
//! and on every later activation and reconnect SET_INFLIGHT_FD with the same region.
//!
//! A reconnect can send each queue's CALL and KICK in QEMU's order instead
//! ([`EventfdOrder`]).
//!
//! Left out: migration and DEVICE_STATE (not offered, so CH skips it).
//!
//! Completions are awaited on the call eventfd with `poll(2)` and a timeout, never by
//! sleeping.

use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use std::os::fd::AsRawFd;

use vhost::vhost_user::message::{
    VhostUserConfigFlags, VhostUserHeaderFlag, VhostUserInflight, VhostUserProtocolFeatures,
    VhostUserVirtioFeatures,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo};
use vm_memory::GuestMemoryMmap;

use crate::client::pattern;
use crate::daemon::{config, volume, DaemonProcess};
use crate::raw_frontend::{header, STATUS_UNSET, S_OK, T_IN, T_OUT};
use crate::virtqueue::{self, Arena, Desc, Used, Vq};

// ---------------------------------------------------------------------------------------
// What cloud-hypervisor asks for (E.1)
// ---------------------------------------------------------------------------------------

/// Virtio feature bits by number, named as CH names them.
mod bit {
    pub const SIZE_MAX: u32 = 1;
    pub const SEG_MAX: u32 = 2;
    pub const GEOMETRY: u32 = 4;
    pub const RO: u32 = 5;
    pub const BLK_SIZE: u32 = 6;
    pub const FLUSH: u32 = 9;
    pub const TOPOLOGY: u32 = 10;
    pub const CONFIG_WCE: u32 = 11;
    pub const MQ: u32 = 12;
    pub const DISCARD: u32 = 13;
    pub const WRITE_ZEROES: u32 = 14;
    /// `VhostUserVirtioFeatures::LOG_ALL`.
    pub const LOG_ALL: u32 = 26;
    pub const INDIRECT_DESC: u32 = 28;
    pub const EVENT_IDX: u32 = 29;
    /// `VhostUserVirtioFeatures::PROTOCOL_FEATURES`.
    pub const PROTOCOL_FEATURES: u32 = 30;
    pub const VERSION_1: u32 = 32;
    pub const IN_ORDER: u32 = 35;
    pub const ORDER_PLATFORM: u32 = 36;
    pub const NOTIFICATION_DATA: u32 = 38;
}

pub(super) fn bits(list: &[u32]) -> u64 {
    list.iter().fold(0u64, |acc, b| acc | (1u64 << b))
}

/// The virtio features CH is willing to negotiate. These are the device bits of
/// `blk.rs:99-113` plus `DEFAULT_VIRTIO_FEATURES` (`mod.rs:257-264`); MQ is included
/// only with more than one queue.
pub(super) fn ch_avail_features(num_queues: usize) -> u64 {
    use self::bit::*;
    let mut f = bits(&[
        SIZE_MAX,
        SEG_MAX,
        GEOMETRY,
        RO,
        BLK_SIZE,
        FLUSH,
        TOPOLOGY,
        CONFIG_WCE,
        DISCARD,
        WRITE_ZEROES,
        INDIRECT_DESC,
        EVENT_IDX,
        VERSION_1,
        IN_ORDER,
        ORDER_PLATFORM,
        NOTIFICATION_DATA,
        PROTOCOL_FEATURES,
        LOG_ALL,
    ]);
    if num_queues > 1 {
        f |= 1u64 << MQ;
    }
    f
}

/// CH's protocol features (`blk.rs:115-121`): 0x8920B. Never BACKEND_REQ.
pub(super) fn ch_protocol_features() -> VhostUserProtocolFeatures {
    VhostUserProtocolFeatures::CONFIG
        | VhostUserProtocolFeatures::MQ
        | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
        | VhostUserProtocolFeatures::REPLY_ACK
        | VhostUserProtocolFeatures::INFLIGHT_SHMFD
        | VhostUserProtocolFeatures::LOG_SHMFD
        | VhostUserProtocolFeatures::DEVICE_STATE
}

/// What CH and today's daemon share on a writable volume: LOG_ALL included (CH's
/// migration logs dirty pages). The daemon offers none of SIZE_MAX, GEOMETRY, TOPOLOGY,
/// CONFIG_WCE, IN_ORDER, ORDER_PLATFORM or NOTIFICATION_DATA. If the daemon starts
/// offering one of them, update this set (and check what CH then does differently:
/// IN_ORDER changes the reconnect base).
pub(super) fn expected_shared_features(num_queues: usize) -> u64 {
    use self::bit::*;
    let mut f = bits(&[
        SEG_MAX,
        BLK_SIZE,
        FLUSH,
        DISCARD,
        WRITE_ZEROES,
        INDIRECT_DESC,
        EVENT_IDX,
        PROTOCOL_FEATURES,
        VERSION_1,
        LOG_ALL,
    ]);
    if num_queues > 1 {
        f |= 1u64 << MQ;
    }
    f
}

/// CH's protocol features intersected with the daemon's offer: MQ | REPLY_ACK | CONFIG |
/// CONFIGURE_MEM_SLOTS | LOG_SHMFD | INFLIGHT_SHMFD. (CH never asks for BACKEND_REQ.)
pub(super) const EXPECTED_PROTOCOL_FEATURES: u64 = 0x920B;

/// Which of the features offered to the guest the Linux virtio-blk driver acks. It acks
/// every offered bit it knows, which here means all of them except PROTOCOL_FEATURES (a
/// vhost-user bit CH adds back itself) and LOG_ALL.
pub(super) fn linux_driver_acks(offered_to_guest: u64) -> u64 {
    offered_to_guest & !bits(&[bit::PROTOCOL_FEATURES, bit::LOG_ALL])
}

/// `size_of::<VirtioBlockConfig>()` (`block/src/lib.rs:214-234`).
pub(super) const CONFIG_LEN: u32 = 60;
/// CH's default queue size (`vmm/src/vm_config.rs`). The volumes here allow 256.
pub(super) const QUEUE_SIZE: u16 = 128;

// ---------------------------------------------------------------------------------------
// Guest RAM and the guest driver's virtqueues
// ---------------------------------------------------------------------------------------

/// Low RAM: CH maps it from GPA 0 (up to 3 GiB; kept small here).
pub(super) const LOW_GPA: u64 = 0;
pub(super) const LOW_SIZE: u64 = 16 << 20;
/// High RAM: CH puts the rest of RAM at 4 GiB (`arch/src/x86_64/mod.rs`).
pub(super) const HIGH_GPA: u64 = 0x1_0000_0000;
pub(super) const HIGH_SIZE: u64 = 16 << 20;
/// Hot-plugged RAM, after the end of the boot RAM.
pub(super) const HOTPLUG_GPA: u64 = HIGH_GPA + HIGH_SIZE;
pub(super) const HOTPLUG_SIZE: u64 = 8 << 20;
/// The driver's rings sit in low RAM from 1 MiB, one 64 KiB area per queue (16 areas).
pub(super) const RINGS_GPA: u64 = 1 << 20;
pub(super) const RING_AREA: u64 = 64 << 10;
/// Buffers in low RAM start after the ring areas.
pub(super) const LOW_BUFFERS: u64 = RINGS_GPA + 16 * RING_AREA;
/// How long a request published while its ring is disabled must stay unanswered.
pub(super) const PAUSE_PROBE: Duration = Duration::from_millis(300);

mod guest_ram;
mod handle;
mod tests;
mod vm;

pub(crate) use guest_ram::*;
pub(crate) use handle::EventfdOrder;
use handle::*;
pub(crate) use vm::*;
