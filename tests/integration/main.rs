//! Integration tests: the real `vhost-iocost` binary driven by real vhost-user frontends
//! (the `blkio` crate, and a raw in-process frontend for requests blkio will not send).

mod bench;
mod caps;
mod classes;
mod client;
mod cloud_hypervisor;
mod control;
mod crash_recovery;
mod daemon;
mod data_path;
mod devices;
mod dirty_log;
mod drain;
mod emulated;
mod faults;
mod guest;
mod handover;
mod hostile;
mod hot_plug;
mod huge_pages;
mod learned_model;
mod libvirt;
mod malformed;
mod metrics_listener;
mod migration;
mod operations;
mod polling;
mod profile;
mod qmp;
mod qos;
mod raw_frontend;
mod resize;
mod scale;
mod virtqueue;
mod volume_files;
mod workers;
