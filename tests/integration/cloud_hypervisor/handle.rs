//! cloud-hypervisor's vhost-user handle: its messages, in its order.

use super::*;

/// What `Blk::new` keeps for the device's lifetime (blk.rs `State`).
#[derive(Clone, Copy, Debug)]
pub(super) struct BlkState {
    /// The features offered to the guest: CH's ∩ the backend's (`avail_features`).
    pub(super) avail_features: u64,
    /// CH's protocol features ∩ the backend's, saved for reconnects.
    pub(super) acked_protocol_features: u64,
    /// GET_PROTOCOL_FEATURES' answer (for assertions only).
    pub(super) backend_protocol_features: u64,
    /// GET_QUEUE_NUM's answer (1 without MQ).
    pub(super) backend_num_queues: u64,
}

/// CH's `Inflight`: the inflight region the backend gave at the first activation, kept
/// for the device's lifetime (`VhostUserCommon::inflight`).
pub(super) struct Inflight {
    pub(super) reply: VhostUserInflight,
    pub(super) file: std::fs::File,
}

/// The order a frontend sends each queue's eventfds in when it sets the queue up.
#[derive(Clone, Copy, Debug)]
pub(crate) enum EventfdOrder {
    /// cloud-hypervisor's: CALL, then KICK (which starts the queue).
    CallFirst,
    /// QEMU's (`vhost_virtqueue_start`, then unmasking the notifier): KICK, then CALL,
    /// so the queue starts without a call fd.
    KickFirst,
}

/// CH's `VhostUserHandle`: one connection to the backend.
pub(super) struct VhostUserHandle {
    pub(super) vu: Frontend,
    /// The protocol features acked on this connection.
    pub(super) acked_protocol: u64,
    /// GET_FEATURES' answer on this connection.
    pub(super) backend_features: u64,
    /// The queues the last activation set up (`queue_indexes`).
    pub(super) queue_indexes: Vec<usize>,
    /// How `setup` sends each queue's eventfds: CH's order unless a test asks for QEMU's.
    pub(super) eventfd_order: EventfdOrder,
}

/// Unwraps a vhost-user call, naming the message if it failed.
#[track_caller]
pub(super) fn ok<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

impl VhostUserHandle {
    /// `connect_vhost_user` (client mode). Every connection starts with SET_OWNER and
    /// GET_FEATURES. CH retries the connect every 100 ms for 60 s; here the daemon's
    /// socket is already listening.
    pub(super) fn connect(socket: &str, max_queue_num: usize) -> Self {
        let vu = ok("connect", Frontend::connect(socket, max_queue_num as u64));
        ok("SET_OWNER", vu.set_owner());
        let backend_features = ok("GET_FEATURES", vu.get_features());
        VhostUserHandle {
            vu,
            acked_protocol: 0,
            backend_features,
            queue_indexes: Vec::new(),
            eventfd_order: EventfdOrder::CallFirst,
        }
    }

    /// `Blk::new` (E.2): connect, negotiate, GET_QUEUE_NUM, GET_CONFIG. Returns the
    /// connection, what CH keeps, and the config space as read.
    pub(super) fn create(
        socket: &str,
        num_queues: usize,
        allowed: VhostUserProtocolFeatures,
    ) -> (Self, BlkState, Vec<u8>) {
        let mut h = Self::connect(socket, num_queues);

        // negotiate_features_vhost_user: GET/SET_PROTOCOL_FEATURES without NEED_REPLY,
        // then NEED_REPLY on every later message if REPLY_ACK was acked.
        let avail_features = ch_avail_features(num_queues) & h.backend_features;
        let mut backend_protocol_features = 0;
        let acked_protocol =
            if avail_features & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits() != 0 {
                let offered = ok("GET_PROTOCOL_FEATURES", h.vu.get_protocol_features());
                backend_protocol_features = offered.bits();
                let acked = ch_protocol_features() & offered & allowed;
                ok("SET_PROTOCOL_FEATURES", h.vu.set_protocol_features(acked));
                acked
            } else {
                VhostUserProtocolFeatures::empty()
            };
        h.acked_protocol = acked_protocol.bits();
        if acked_protocol.contains(VhostUserProtocolFeatures::REPLY_ACK) {
            h.vu.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
        }

        // GET_QUEUE_NUM whenever MQ is acked, even for one queue.
        let backend_num_queues = if acked_protocol.contains(VhostUserProtocolFeatures::MQ) {
            ok("GET_QUEUE_NUM", h.vu.get_queue_num())
        } else {
            1
        };
        assert!(
            num_queues as u64 <= backend_num_queues,
            "CH would fail with BadQueueNum: it wants {num_queues}, the backend has \
             {backend_num_queues}"
        );

        // GET_CONFIG at offset 0 with flags WRITABLE, before any SET_FEATURES. CH caches
        // it and never reads it again.
        let (_, config) = ok(
            "GET_CONFIG",
            h.vu.get_config(
                0,
                CONFIG_LEN,
                VhostUserConfigFlags::WRITABLE,
                &[0u8; CONFIG_LEN as usize],
            ),
        );
        let state = BlkState {
            avail_features,
            acked_protocol_features: acked_protocol.bits(),
            backend_protocol_features,
            backend_num_queues,
        };
        (h, state, config)
    }

    /// `setup_vhost_user` (E.3), at the guest's DRIVER_OK. `acked_features` is what the
    /// guest acked plus PROTOCOL_FEATURES. SET_VRING_BASE is the avail index in guest
    /// memory. With INFLIGHT_SHMFD acked, GET_INFLIGHT_FD when `inflight` holds no region
    /// yet (queue 0's size, the active queues), then SET_INFLIGHT_FD with it. No
    /// SET_BACKEND_REQ_FD.
    pub(super) fn setup(
        &mut self,
        guest: &Guest,
        acked_features: u64,
        inflight: &mut Option<Inflight>,
    ) {
        self.queue_indexes.clear();
        // Frontend-only features are masked out.
        ok(
            "SET_FEATURES",
            self.vu.set_features(acked_features & self.backend_features),
        );
        // The whole table, even with CONFIGURE_MEM_SLOTS acked.
        ok("SET_MEM_TABLE", self.vu.set_mem_table(&guest.regions()));
        for q in 0..guest.queues.len() {
            ok("SET_VRING_NUM", self.vu.set_vring_num(q, QUEUE_SIZE));
        }
        if self.acked_protocol & VhostUserProtocolFeatures::INFLIGHT_SHMFD.bits() != 0 {
            let region = inflight.get_or_insert_with(|| {
                let ask = VhostUserInflight {
                    num_queues: guest.queues.len() as u16,
                    queue_size: QUEUE_SIZE,
                    ..Default::default()
                };
                let (reply, file) = ok("GET_INFLIGHT_FD", self.vu.get_inflight_fd(&ask));
                Inflight { reply, file }
            });
            ok(
                "SET_INFLIGHT_FD",
                self.vu
                    .set_inflight_fd(&region.reply, region.file.as_raw_fd()),
            );
        }
        for q in 0..guest.queues.len() {
            let vq = &guest.queues[q];
            ok(
                "SET_VRING_ADDR",
                self.vu.set_vring_addr(q, &vq.vring_config(&guest.mem)),
            );
            ok(
                "SET_VRING_BASE",
                self.vu.set_vring_base(q, guest.avail_idx_in_memory(q)),
            );
            let call = || ok("SET_VRING_CALL", self.vu.set_vring_call(q, &vq.call));
            let kick = || ok("SET_VRING_KICK", self.vu.set_vring_kick(q, &vq.kick));
            match self.eventfd_order {
                EventfdOrder::CallFirst => (call(), kick()),
                EventfdOrder::KickFirst => (kick(), call()),
            };
            self.queue_indexes.push(q);
        }
        self.set_vrings_enabled(true);
    }

    /// SET_VRING_ENABLE for each queue of the last activation. Pause is `false` and
    /// resume is `true` (`pause_vhost_user`/`resume_vhost_user`); the end of activation
    /// is `true`.
    pub(super) fn set_vrings_enabled(&mut self, enable: bool) {
        for q in self.queue_indexes.clone() {
            ok("SET_VRING_ENABLE", self.vu.set_vring_enable(q, enable));
        }
    }

    /// `reset_vhost_user` (guest device reset): SET_VRING_ENABLE 0 and GET_VRING_BASE per
    /// queue. CH drops the bases; they are returned here for assertions.
    pub(super) fn reset(&mut self) -> Vec<u16> {
        let mut bases = Vec::new();
        for q in std::mem::take(&mut self.queue_indexes) {
            ok("SET_VRING_ENABLE", self.vu.set_vring_enable(q, false));
            bases.push(ok("GET_VRING_BASE", self.vu.get_vring_base(q)) as u16);
        }
        bases
    }

    /// Memory hotplug with CONFIGURE_MEM_SLOTS acked: ADD_MEM_REG for the new range.
    pub(super) fn add_memory_region(&mut self, region: &VhostUserMemoryRegionInfo) {
        ok("ADD_MEM_REG", self.vu.add_mem_region(region));
    }

    /// `reinitialize_vhost_user` on a new connection (E.5). The sequence is SET_OWNER,
    /// GET_FEATURES, SET_PROTOCOL_FEATURES(saved), NEED_REPLY, then E.3. There is no
    /// GET_PROTOCOL_FEATURES, GET_QUEUE_NUM or GET_CONFIG. CH connects with as many
    /// queues as are active.
    pub(super) fn reconnect(
        socket: &str,
        guest: &Guest,
        state: &BlkState,
        acked_features: u64,
        inflight: &mut Option<Inflight>,
        eventfd_order: EventfdOrder,
    ) -> Self {
        let mut h = Self::connect(socket, guest.queues.len());
        h.eventfd_order = eventfd_order;
        if acked_features & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits() != 0 {
            let saved = VhostUserProtocolFeatures::from_bits(state.acked_protocol_features)
                .expect("saved protocol features are known bits");
            ok("SET_PROTOCOL_FEATURES", h.vu.set_protocol_features(saved));
            h.acked_protocol = saved.bits();
            if saved.contains(VhostUserProtocolFeatures::REPLY_ACK) {
                h.vu.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
            }
        }
        // With IN_ORDER (and no inflight) CH would restart at the used index and kick;
        // the daemon does not offer IN_ORDER, so the base is the avail index.
        assert_eq!(acked_features & (1u64 << bit::IN_ORDER), 0);
        h.setup(guest, acked_features, inflight);
        h
    }
}
