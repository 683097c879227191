//! The virtio-blk feature bits and config space a volume advertises.

use crate::backend::virtio::request::SECTOR_SHIFT;
use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_F_BLK_SIZE, VIRTIO_BLK_F_DISCARD, VIRTIO_BLK_F_FLUSH, VIRTIO_BLK_F_MQ,
    VIRTIO_BLK_F_RO, VIRTIO_BLK_F_SEG_MAX, VIRTIO_BLK_F_WRITE_ZEROES,
};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

/// Largest discard and write-zeroes we accept in one request, in 512-byte sectors. Linux
/// splits larger ones itself. Write-zeroes is smaller because it may fall back to writing a
/// zero buffer of that size.
pub const MAX_DISCARD_SECTORS: u32 = (1 << 30) >> 9;
pub const MAX_WRITE_ZEROES_SECTORS: u32 = (32 << 20) >> 9;

/// Virtio feature bits for a volume.
pub fn features(read_only: bool) -> u64 {
    let mut bits = [
        VIRTIO_F_VERSION_1,
        VIRTIO_RING_F_EVENT_IDX,
        VIRTIO_RING_F_INDIRECT_DESC,
        VIRTIO_BLK_F_SEG_MAX,
        VIRTIO_BLK_F_BLK_SIZE,
        VIRTIO_BLK_F_FLUSH,
        VIRTIO_BLK_F_DISCARD,
        VIRTIO_BLK_F_WRITE_ZEROES,
        VIRTIO_BLK_F_MQ,
    ]
    .iter()
    .fold(0u64, |acc, bit| acc | (1u64 << bit));
    if read_only {
        bits |= 1 << VIRTIO_BLK_F_RO;
    }
    // LOG_ALL: a migrating frontend has every guest page the daemon writes logged.
    bits | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
        | VhostUserVirtioFeatures::LOG_ALL.bits()
}

/// vhost-user protocol features. QEMU needs CONFIG; libblkio needs REPLY_ACK, CONFIG and
/// CONFIGURE_MEM_SLOTS; MQ for more than one queue. QEMU and cloud-hypervisor keep an
/// inflight region when INFLIGHT_SHMFD is offered, so a killed daemon loses nothing.
pub fn protocol_features() -> VhostUserProtocolFeatures {
    VhostUserProtocolFeatures::MQ
        | VhostUserProtocolFeatures::REPLY_ACK
        | VhostUserProtocolFeatures::CONFIG
        | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
        // The channel on which a grown volume tells the frontend to read its config again.
        | VhostUserProtocolFeatures::BACKEND_REQ
        // The dirty log of a migration, shared as a file (SET_LOG_BASE).
        | VhostUserProtocolFeatures::LOG_SHMFD
        // A log of the requests in flight that the frontend keeps across a restart of the
        // daemon (crate::backend::virtio::inflight_log).
        | VhostUserProtocolFeatures::INFLIGHT_SHMFD
}

/// The fields of `struct virtio_blk_config` we fill.
pub struct BlkConfig {
    pub capacity_bytes: u64,
    pub seg_max: u32,
    pub blk_size: u32,
    pub num_queues: u16,
}

impl BlkConfig {
    /// Encodes the config space (little-endian, virtio 1.x layout) up to and including the
    /// write-zeroes fields: 60 bytes, what cloud-hypervisor and Firecracker read.
    pub fn encode(&self) -> [u8; 60] {
        let mut b = [0u8; 60];
        let put = |b: &mut [u8; 60], at: usize, bytes: &[u8]| {
            b[at..at + bytes.len()].copy_from_slice(bytes)
        };
        put(
            &mut b,
            0,
            &(self.capacity_bytes >> SECTOR_SHIFT).to_le_bytes(),
        ); // capacity
        put(&mut b, 12, &self.seg_max.to_le_bytes()); // seg_max (size_max at 8 unused)
        put(&mut b, 20, &self.blk_size.to_le_bytes()); // blk_size
        put(&mut b, 34, &self.num_queues.to_le_bytes()); // num_queues
        put(&mut b, 36, &MAX_DISCARD_SECTORS.to_le_bytes()); // max_discard_sectors
        put(&mut b, 40, &1u32.to_le_bytes()); // max_discard_seg
        let alignment = self.blk_size >> SECTOR_SHIFT;
        put(&mut b, 44, &alignment.to_le_bytes()); // discard_sector_alignment
        put(&mut b, 48, &MAX_WRITE_ZEROES_SECTORS.to_le_bytes()); // max_write_zeroes_sectors
        put(&mut b, 52, &1u32.to_le_bytes()); // max_write_zeroes_seg
        b[56] = 1; // write_zeroes_may_unmap
        b
    }

    /// The `size` bytes at `offset`, zero-padded: the vhost crate refuses replies whose
    /// length differs from the request, and frontends ask for different lengths.
    pub fn read(&self, offset: u32, size: u32) -> Vec<u8> {
        let full = self.encode();
        let mut out = vec![0u8; size as usize];
        let start = (offset as usize).min(full.len());
        let end = (offset as usize)
            .saturating_add(size as usize)
            .min(full.len());
        out[..end - start].copy_from_slice(&full[start..end]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_space_layout_matches_virtio_blk_config() {
        let c = BlkConfig {
            capacity_bytes: 1 << 30,
            seg_max: 254,
            blk_size: 4096,
            num_queues: 2,
        };
        let b = c.encode();
        assert_eq!(u64::from_le_bytes(b[0..8].try_into().unwrap()), 2 << 20);
        assert_eq!(u32::from_le_bytes(b[12..16].try_into().unwrap()), 254);
        assert_eq!(u32::from_le_bytes(b[20..24].try_into().unwrap()), 4096);
        assert_eq!(u16::from_le_bytes(b[34..36].try_into().unwrap()), 2);
        assert_eq!(u32::from_le_bytes(b[44..48].try_into().unwrap()), 8);
        // Any requested window comes back at exactly the requested length.
        assert_eq!(c.read(0, 8), b[0..8].to_vec());
        assert_eq!(c.read(56, 16).len(), 16);
        assert_eq!(c.read(1000, 4), vec![0; 4]);
    }

    #[test]
    fn read_only_volumes_advertise_ro() {
        assert_ne!(features(true) & (1 << VIRTIO_BLK_F_RO), 0);
        assert_eq!(features(false) & (1 << VIRTIO_BLK_F_RO), 0);
        assert_ne!(features(false) & (1 << VIRTIO_F_VERSION_1), 0);
    }
}
