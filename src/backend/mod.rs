//! The data path: vhost-user glue, virtio-blk request parsing, and the io_uring engine.

pub mod request;
