//! A VM as cloud-hypervisor runs one: its guest and its device's handle, with the VMM's operations.

use super::*;

/// A cloud-hypervisor VM with one vhost-user-blk disk: the guest, CH's connection and
/// what CH keeps across connections.
pub(crate) struct Vm {
    pub(crate) guest: Guest,
    pub(super) vu: VhostUserHandle,
    pub(super) state: BlkState,
    /// What CH sends in SET_FEATURES. CH's `acked_features` starts as
    /// PROTOCOL_FEATURES (when shared) and the guest driver's ack is added to it.
    pub(super) acked_features: u64,
    /// The inflight region, once the first activation got one.
    pub(super) inflight: Option<Inflight>,
}

impl Vm {
    /// `Blk::new` on a device of `num_queues` queues, then the guest driver's DRIVER_OK
    /// with queues `0..active` set up. Returns the VM and the config space read at
    /// creation.
    pub(crate) fn boot(socket: &str, num_queues: usize, active: usize) -> (Self, Vec<u8>) {
        Self::boot_with(socket, num_queues, active, VhostUserProtocolFeatures::all())
    }

    /// [`Vm::boot`] with CH's protocol features limited to `allowed` (a frontend without
    /// inflight tracking, for instance).
    pub(crate) fn boot_with(
        socket: &str,
        num_queues: usize,
        active: usize,
        allowed: VhostUserProtocolFeatures,
    ) -> (Self, Vec<u8>) {
        let (mut vu, state, config) = VhostUserHandle::create(socket, num_queues, allowed);
        let guest = Guest::new(active);
        let acked_features = (state.avail_features
            & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits())
            | linux_driver_acks(state.avail_features);
        let mut inflight = None;
        vu.setup(&guest, acked_features, &mut inflight);
        let vm = Vm {
            guest,
            vu,
            state,
            acked_features,
            inflight,
        };
        (vm, config)
    }

    /// A guest device reset, then the driver sets its queues up again with fresh rings
    /// (queue `q` at `ring_at[q]`) and sets DRIVER_OK: E.3 again on the same socket,
    /// without SET_OWNER. Returns GET_VRING_BASE's answers.
    pub(super) fn reset_and_reactivate(&mut self, ring_at: &[u64]) -> Vec<u16> {
        let bases = self.vu.reset();
        assert_eq!(ring_at.len(), self.guest.queues.len());
        for (q, &at) in ring_at.iter().enumerate() {
            self.guest.init_queue(q, at);
        }
        self.vu
            .setup(&self.guest, self.acked_features, &mut self.inflight);
        bases
    }

    /// Closes CH's connection (if still open), then reconnects as after a HUP (E.5).
    pub(crate) fn reconnect(self, socket: &str) -> Self {
        self.reconnect_with(socket, EventfdOrder::CallFirst)
    }

    /// [`Vm::reconnect`], sending each queue's eventfds in `order`.
    pub(crate) fn reconnect_with(self, socket: &str, order: EventfdOrder) -> Self {
        let Vm {
            guest,
            vu,
            state,
            acked_features,
            mut inflight,
        } = self;
        // Closed without GET_VRING_BASE, as at CH shutdown, or after the backend went
        // away. The daemon serves one frontend at a time, so this must come first.
        drop(vu);
        let vu = VhostUserHandle::reconnect(
            socket,
            &guest,
            &state,
            acked_features,
            &mut inflight,
            order,
        );
        Vm {
            guest,
            vu,
            state,
            acked_features,
            inflight,
        }
    }

    /// Writes `data` at `sector` through `ram` on queue `q` and reads it back.
    #[track_caller]
    pub(crate) fn write_and_verify(&mut self, q: usize, ram: Ram, sector: u64, data: &[u8]) {
        assert_eq!(
            self.guest.write_sectors(q, ram, sector, data),
            S_OK as u8,
            "write at sector {sector} through {ram:?} RAM on queue {q}"
        );
        self.verify(q, ram, sector, data);
    }

    /// Reads `data.len()` bytes at `sector` into `ram` on queue `q`; they must be `data`.
    #[track_caller]
    pub(crate) fn verify(&mut self, q: usize, ram: Ram, sector: u64, data: &[u8]) {
        let (status, back) = self.guest.read_sectors(q, ram, sector, data.len());
        assert_eq!(
            status, S_OK as u8,
            "read at sector {sector} through {ram:?} RAM"
        );
        assert!(
            back == data,
            "data read back at sector {sector} through {ram:?} RAM differs"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The daemon
// ---------------------------------------------------------------------------------------
