//! One listener thread per volume. Each accepted frontend gets a fresh backend and
//! `VhostUserDaemon` (the crate's workers live for one connection); when it disconnects,
//! the same socket accepts the next one while the other volumes keep running.

use super::admission::Admission;
use super::handshake::HANDSHAKE_TIMEOUT;
use super::vhost::VolumeBackend;
use super::volume::{Volume, VolumeCounters};
use super::worker::Mem;
use std::io;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vhost::vhost_user::Listener;
use vhost_user_backend::{ShutdownHandle, VhostUserDaemon};
use vm_memory::GuestMemoryAtomic;
use vmm_sys_util::epoll::EventSet;

struct Connection<A: Admission> {
    backend: Arc<VolumeBackend<A>>,
    shutdown: ShutdownHandle,
}

pub struct VolumeServer<A: Admission> {
    pub volume: Arc<Volume<A>>,
    current: Mutex<Option<Connection<A>>>,
    stopping: AtomicBool,
    /// The socket file this server bound, removed on stop only if still there.
    bound: Option<crate::socket_path::SocketId>,
}

impl<A: Admission> VolumeServer<A> {
    /// Binds the volume's socket (replacing a stale one, refusing anything else:
    /// [`crate::socket_path::claim`]) and starts its listener thread.
    pub fn start(volume: Arc<Volume<A>>) -> io::Result<Arc<Self>> {
        crate::socket_path::claim(&volume.socket, &format!("volume {}: socket", volume.name))?;
        let listener = Listener::new(&volume.socket, false).map_err(|e| {
            io::Error::other(format!(
                "volume {}: cannot listen on {}: {e}",
                volume.name,
                volume.socket.display()
            ))
        })?;
        crate::socket_path::set_access(&volume.socket, volume.socket_mode, volume.socket_gid)
            .map_err(|e| {
                io::Error::other(format!(
                    "volume {}: socket {}: cannot set its mode or group: {e}",
                    volume.name,
                    volume.socket.display()
                ))
            })?;
        let server = Arc::new(VolumeServer {
            bound: crate::socket_path::id(&volume.socket),
            volume,
            current: Mutex::new(None),
            stopping: AtomicBool::new(false),
        });
        let s = server.clone();
        std::thread::Builder::new()
            .name(format!("vol-{}", server.volume.name))
            .spawn(move || s.serve_forever(listener))?;
        Ok(server)
    }

    fn serve_forever(&self, mut listener: Listener) {
        let name = &self.volume.name;
        tracing::info!(volume = %name, socket = %self.volume.socket.display(), "listening");
        while !self.stopping.load(Ordering::Acquire) {
            if let Err(e) = self.serve_one(&mut listener) {
                tracing::error!(volume = %name, "connection failed: {e}");
                // Do not spin if something persistent is wrong (e.g. io_uring limits).
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }

    fn serve_one(&self, listener: &mut Listener) -> io::Result<()> {
        let name = &self.volume.name;
        let backend = Arc::new(VolumeBackend::new(self.volume.clone())?);
        let mut daemon = VhostUserDaemon::new(
            format!("vhost-{name}"),
            backend.clone(),
            GuestMemoryAtomic::new(Mem::new()),
        )
        .map_err(daemon_error)?;
        let handler = daemon.get_epoll_handlers().remove(0);
        let tokens = backend.tokens();
        {
            let worker = backend.worker();
            handler.register_listener(
                worker.completion_fd(),
                EventSet::IN,
                tokens.completion.into(),
            )?;
            handler.register_listener(
                worker.timer.as_raw_fd(),
                EventSet::IN,
                tokens.timer.into(),
            )?;
            handler.register_listener(
                worker.wake_evt.as_raw_fd(),
                EventSet::IN,
                tokens.wake.into(),
            )?;
        }
        daemon.start(listener).map_err(daemon_error)?;
        VolumeCounters::add(&self.volume.counters.connections, 1);
        tracing::info!(volume = %name, "frontend connected");
        let shutdown = daemon
            .shutdown_handle()
            .ok_or_else(|| io::Error::other("connected daemon has no shutdown handle"))?;
        *self.lock() = Some(Connection {
            backend: backend.clone(),
            shutdown: shutdown.clone(),
        });
        if self.stopping.load(Ordering::Acquire) {
            shutdown.shutdown();
        }
        let watchdog = self.watch_handshake(&backend, &shutdown)?;
        let result = daemon.wait();
        backend.handshake.ended();
        let _ = watchdog.join();
        self.lock().take();
        // Dropping the daemon stops and joins its worker threads; dropping the backend then
        // waits for any I/O still in the kernel.
        drop(daemon);
        let in_flight = backend.worker().in_flight();
        tracing::info!(volume = %name, in_flight, "frontend disconnected");
        match result {
            // A frontend going away is the normal end of a connection.
            Err(vhost_user_backend::Error::HandleRequest(
                vhost::vhost_user::Error::Disconnected | vhost::vhost_user::Error::PartialMessage,
            )) => Ok(()),
            other => other.map_err(daemon_error),
        }
    }

    /// Cuts the connection off if the frontend does not start the handshake in time.
    fn watch_handshake(
        &self,
        backend: &VolumeBackend<A>,
        shutdown: &ShutdownHandle,
    ) -> io::Result<std::thread::JoinHandle<()>> {
        let (handshake, shutdown) = (backend.handshake.clone(), shutdown.clone());
        let name = self.volume.name.clone();
        std::thread::Builder::new()
            .name(format!("vol-{name}-hs"))
            .spawn(move || {
                if !handshake.wait(HANDSHAKE_TIMEOUT) {
                    tracing::warn!(
                        volume = %name,
                        "frontend sent no GET_FEATURES within {HANDSHAKE_TIMEOUT:?} of connecting: disconnected"
                    );
                    shutdown.shutdown();
                }
            })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Connection<A>>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets the connected worker (if any) offer its parked requests again.
    pub fn wake(&self) {
        if let Some(c) = self.lock().as_ref() {
            c.backend.wake();
        }
    }

    /// Graceful stop: no new connections; the current frontend's requests are completed
    /// and answered, then its connection is closed.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        let conn = self
            .lock()
            .as_ref()
            .map(|c| (c.backend.clone(), c.shutdown.clone()));
        if let Some((backend, shutdown)) = conn {
            if let Err(e) = backend.drain_all() {
                tracing::warn!(volume = %self.volume.name, "drain failed: {e}");
            }
            shutdown.shutdown();
        }
        crate::socket_path::remove_if_ours(&self.volume.socket, self.bound);
    }
}

fn daemon_error(e: vhost_user_backend::Error) -> io::Error {
    io::Error::other(e.to_string())
}
