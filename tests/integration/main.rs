//! Integration tests: the real `vhost-iocost` binary driven by real vhost-user frontends
//! (the `blkio` crate, and a raw in-process frontend for requests blkio will not send).

mod bench;
mod caps;
mod classes;
mod client;
mod cloud_hypervisor;
mod control;
mod control_runtime;
mod crash_recovery;
mod ctl_top;
mod data_path;
mod deploy;
mod dirty_log;
mod drain;
mod emulated;
mod faults;
mod guest;
mod guest_kill_anytime;
mod guest_tests;
mod handover;
mod hostile;
mod hot_plug;
mod huge_pages;
mod learned_model;
mod libvirt;
mod libvirt_hook;
mod malformed;
mod malformed_limits;
mod metrics_listener;
mod migration;
mod operations;
mod peer_credentials;
mod polling;
mod pressure;
mod privileges;
mod profile;
mod qmp;
mod qos;
mod raw_frontend;
mod resize;
mod scale;
mod seccomp;
mod virtqueue;
mod volume_files;
mod workers;

// The harness shared with tests/comparisons, under the paths the tests name it by.
use support::{daemon, devices};
