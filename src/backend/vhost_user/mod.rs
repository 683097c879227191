//! The vhost-user connection layer: frontends connect, negotiate and hand over their
//! memory and rings; everything here runs on connection threads, never per request.
//!
//! - [`acceptor`]: one thread waiting for frontends on every volume's socket.
//! - [`server`]: a volume's connections (a thread each), reconnects and graceful shutdown.
//! - [`handshake`]: the deadline for a new frontend's first message.
//! - [`connection`]: the `VhostUserBackend` implementation for one connection, which
//!   starts the volume's workers; [`memory_tables`]: its frontend's memory tables;
//!   [`inflight`]: the inflight log's messages (GET/SET_INFLIGHT_FD).

pub(crate) mod acceptor;
pub(crate) mod connection;
pub(crate) mod handshake;
pub(crate) mod inflight;
pub(crate) mod memory_tables;
pub(crate) mod server;
