//! vhost-iocost: a vhost-user-blk daemon that shares one host disk between many VMs
//! with IOCost-style proportional, work-conserving QoS.
//!
//! Layout:
//! - [`backend`]: vhost-user glue, virtio-blk request parsing, io_uring engine (the data path).
//! - [`cost_model`], [`qos`], [`planner`]: the QoS core, a pure library (no I/O, injectable clock).
//! - [`emulated`]: a disk whose behaviour is known (the simulator's hardware and `kind = "emulated"`).
//! - [`sim`]: a deterministic simulator driving the QoS core in virtual time.
//! - [`config`]: the TOML configuration and its validation.
//! - [`control`]: the REST control plane, metrics, persistence and the `ctl` client.

pub mod backend;
pub mod calibration;
pub mod config;
pub mod control;
pub mod cost_model;
pub mod daemon;
pub mod emulated;
pub mod instance_lock;
pub mod loadgen;
pub mod logging;
pub mod planner;
pub mod profile;
pub mod qos;
pub mod sd_notify;
pub mod sim;
pub mod socket_path;
pub mod tune;
