//! vhost-iocost: a vhost-user-blk daemon that shares one host disk between many VMs
//! with IOCost-style proportional, work-conserving QoS. `docs/design.md` explains the
//! algorithm and the design; comments cite its sections as `design §N.M`.
//!
//! Layout:
//! - [`backend`]: the data path: vhost-user glue, virtio-blk request parsing, the
//!   admission seam, device slots, the io_uring engine and the per-volume workers.
//! - [`cost_model`]: what a request costs in device time (the linear model, presets,
//!   `[device.model]`).
//! - [`qos`]: the per-device controller and the per-volume issue path (virtual time,
//!   weights, hierarchical weights, caps, service classes and reservations,
//!   `[device.qos]`, statistics).
//! - [`planner`]: the per-period planner (latency signals, busy_level, vrate, idle
//!   volumes, usage, donation, the latency class), which owns its own state. With [`vtime`], [`cost_model`]
//!   and [`qos`] it forms the QoS core, a pure library (no I/O, injectable clock).
//! - [`emulated`]: a disk whose behaviour is known (the simulator's hardware and
//!   `kind = "emulated"`), with fault injection.
//! - [`sim`]: a deterministic simulator driving the QoS core in virtual time.
//! - [`calibration`]: the cost model measured from the device at start-up when the
//!   config gives none.
//! - [`profile`]: `vhost-iocost profile`, measuring a disk for a model and QoS targets.
//! - [`tune`]: `vhost-iocost tune`, checking a suggestion with a pinned-vrate sweep.
//! - [`loadgen`]: `vhost-iocost bench`, a multi-tenant load generator over vhost-user.
//! - [`config`]: the TOML configuration and its validation.
//! - [`control`]: the REST control plane, metrics, persistence and the `ctl` client.
//! - [`libvirt_hook`]: `vhost-iocost libvirt-hook`, QoS declared in a libvirt domain,
//!   applied while it runs (a client of the control plane).
//! - [`daemon`]: assembly of the daemon (disk, QoS tree, listeners, planner thread).
//! - [`volume_set`]: the volumes served, added and removed at run time.
//! - [`vtime`]: the QoS core's units (vtime, weights) and integer helpers.
//! - [`size`]: byte sizes as configs write them (`"64MiB"`).
//! - [`duration`]: durations as configs, the API and job files write them.
//! - [`instance_lock`]: one daemon per host disk (an exclusive `flock` on it).
//! - [`fd_limit`]: the descriptor limit raised for thousands of volumes.
//! - [`cpu_affinity`]: the CPUs a volume's worker threads are pinned to.
//! - [`logging`]: the `tracing` setup, with rate limits for log lines a guest can cause.
//! - [`rng`]: a small deterministic PRNG (simulator, load generator, profile).
//! - [`seccomp`]: the per-thread-class seccomp filters the daemon installs on itself.
//! - [`sd_notify`]: systemd's readiness notification for `Type=notify` units.
//! - [`socket_path`]: claiming a Unix socket path without removing anything but a stale
//!   socket.
//! - [`stage_trace`]: stage timestamps for the breakdown of a request's time (off unless
//!   `VHOST_IOCOST_STAGE_TRACE` is set).

pub mod backend;
pub(crate) mod calibration;
pub mod config;
pub mod control;
pub mod cost_model;
pub mod cpu_affinity;
pub mod daemon;
pub(crate) mod duration;
pub mod emulated;
pub(crate) mod fd_limit;
pub mod instance_lock;
pub mod libvirt_hook;
pub mod loadgen;
pub mod lock;
pub mod logging;
pub mod monotonic;
pub mod planner;
pub mod privileges;
pub mod profile;
pub mod qos;
pub(crate) mod rng;
pub mod sd_notify;
pub mod seccomp;
pub mod sim;
pub mod size;
pub(crate) mod socket_path;
pub mod stage_trace;
pub mod tune;
pub mod volume_set;
pub(crate) mod vtime;
