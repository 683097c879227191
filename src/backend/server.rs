//! A volume's connections. Its socket is watched by the [`Acceptor`] (no thread while
//! idle); each frontend gets a thread, a fresh backend and a `VhostUserDaemon` (the
//! crate's workers live for one connection); when it disconnects, the socket is armed
//! for the next one while the other volumes keep running.

use super::acceptor::{Acceptable, Acceptor, Token};
use super::admission::Admission;
use super::handshake::HANDSHAKE_TIMEOUT;
use super::vhost::VolumeBackend;
use super::volume::{Volume, VolumeCounters};
use super::worker::Mem;
use std::io;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
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
    listener: Mutex<Listener>,
    acceptor: Arc<Acceptor>,
    token: OnceLock<Token>,
    /// A connection's thread could not be ended and was left behind: take no more
    /// frontends, or every retry would leave another.
    gave_up: AtomicBool,
    /// The thread serving the current (or last) frontend, joined by [`Self::remove`].
    connection_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Why a volume was not removed.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    #[error("a frontend is connected (disconnect it first, or force)")]
    Connected,
}

impl<A: Admission> VolumeServer<A> {
    /// Binds the volume's socket (replacing a stale one, refusing anything else:
    /// [`crate::socket_path::claim`]) and has `acceptor` watch it.
    pub fn start(volume: Arc<Volume<A>>, acceptor: &Arc<Acceptor>) -> io::Result<Arc<Self>> {
        crate::socket_path::claim(&volume.socket, &format!("volume {}: socket", volume.name))?;
        let cannot_listen = |e: &dyn std::fmt::Display| {
            io::Error::other(format!(
                "volume {}: cannot listen on {}: {e}",
                volume.name,
                volume.socket.display()
            ))
        };
        let listener = Listener::new(&volume.socket, false).map_err(|e| cannot_listen(&e))?;
        // `turn_away` accepts only if a frontend is waiting. (The crate's accept loops
        // while none is, so a connection is only accepted once the acceptor saw one.)
        listener
            .set_nonblocking(true)
            .map_err(|e| cannot_listen(&e))?;
        crate::socket_path::set_access(&volume.socket, volume.socket_mode, volume.socket_gid)
            .map_err(|e| {
                io::Error::other(format!(
                    "volume {}: socket {}: cannot set its mode or group: {e}",
                    volume.name,
                    volume.socket.display()
                ))
            })?;
        let fd = listener.as_raw_fd();
        let server = Arc::new(VolumeServer {
            bound: crate::socket_path::id(&volume.socket),
            volume,
            current: Mutex::new(None),
            stopping: AtomicBool::new(false),
            listener: Mutex::new(listener),
            acceptor: Arc::clone(acceptor),
            token: OnceLock::new(),
            gave_up: AtomicBool::new(false),
            connection_thread: Mutex::new(None),
        });
        let token = acceptor.add(fd, server.clone())?;
        let _ = server.token.set(token);
        if let Err(e) = acceptor.arm(token, fd) {
            acceptor.remove(token, fd);
            crate::socket_path::remove_if_ours(&server.volume.socket, server.bound);
            return Err(e);
        }
        tracing::debug!(volume = %server.volume.name, socket = %server.volume.socket.display(), "listening");
        Ok(server)
    }

    /// A frontend's connection, on its own thread; then the socket is armed again.
    fn serve_connection(&self) {
        let name = &self.volume.name;
        let mut accepted = false;
        if let Err(e) = self.serve_one(&mut accepted) {
            tracing::error!(volume = %name, "connection failed: {e}");
            if !accepted {
                // A frontend that could not be taken is not left waiting, and something
                // persistent (e.g. io_uring limits) does not make this spin.
                self.turn_away();
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        self.arm();
    }

    /// Watch the socket for the next frontend (not once stopping).
    fn arm(&self) {
        if self.stopping.load(Ordering::Acquire) {
            return;
        }
        if self.gave_up.load(Ordering::Acquire) {
            tracing::error!(volume = %self.volume.name, "takes no more frontends until the daemon restarts (see the error above)");
            return;
        }
        let fd = self.lock_listener().as_raw_fd();
        if let Some(&token) = self.token.get() {
            // Stopping meanwhile removed the socket: nothing to arm.
            if let Err(e) = self.acceptor.arm(token, fd) {
                if !self.stopping.load(Ordering::Acquire) {
                    tracing::error!(volume = %self.volume.name, "cannot wait for the next frontend: {e}");
                }
            }
        }
    }

    fn lock_listener(&self) -> std::sync::MutexGuard<'_, Listener> {
        self.listener.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Accepts the waiting frontend and closes it at once: it cannot be served now.
    fn turn_away(&self) {
        if let Ok(Some(stream)) = self.lock_listener().accept() {
            drop(stream);
        }
    }

    /// One frontend's connection, from making its backend to its end; `accepted` is set
    /// once the frontend is taken off the socket.
    fn serve_one(&self, accepted: &mut bool) -> io::Result<()> {
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
        // The vring worker thread runs already and ends only through the exit event: if
        // that cannot be registered, dropping the daemon would wait for it for ever.
        if let Err(e) = handler.register_listener(
            backend.exit_evt.as_raw_fd(),
            EventSet::IN,
            tokens.exit.into(),
        ) {
            tracing::error!(volume = %name, "cannot register the connection's exit event ({e}): its thread is left behind");
            std::mem::forget(daemon);
            self.gave_up.store(true, Ordering::Release);
            return Err(e);
        }
        // Dropped before the daemon on an early return (declared after it).
        let _ends_worker = EndsWorker(backend.clone());
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
        daemon
            .start(&mut self.lock_listener())
            .map_err(daemon_error)?;
        *accepted = true;
        VolumeCounters::add(&self.volume.counters.connections, 1);
        tracing::info!(volume = %name, "frontend connected");
        let shutdown = daemon
            .shutdown_handle()
            .ok_or_else(|| io::Error::other("connected daemon has no shutdown handle"))?;
        *self.lock() = Some(Connection {
            backend: backend.clone(),
            shutdown: shutdown.clone(),
        });
        self.volume
            .counters
            .connected
            .store(true, Ordering::Release);
        if self.stopping.load(Ordering::Acquire) {
            shutdown.shutdown();
        }
        let watchdog = self.watch_handshake(&backend, &shutdown)?;
        let result = daemon.wait();
        backend.handshake.ended();
        let _ = watchdog.join();
        self.lock().take();
        self.volume
            .counters
            .connected
            .store(false, Ordering::Release);
        // Dropping the daemon joins its worker thread, once told to end; dropping the
        // backend then waits for any I/O still in the kernel.
        backend.end_worker_thread();
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
        if self.stopping.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(&token) = self.token.get() {
            self.acceptor
                .remove(token, self.lock_listener().as_raw_fd());
        }
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

impl<A: Admission> VolumeServer<A> {
    /// Tells the connected frontend that the config space changed; false when none is
    /// connected or it set up no channel for it (it sees the change when it next reads
    /// the config, at the latest when it reconnects).
    pub fn notify_config_change(&self) -> bool {
        self.lock()
            .as_ref()
            .is_some_and(|c| c.backend.notify_config_change())
    }

    /// Stops serving for good, for the volume's removal: refused while a frontend is
    /// connected unless `force`, which completes its in-flight requests and closes the
    /// connection first. Returns once the connection's thread has ended, so nothing of
    /// the volume is in flight or waiting any more; the socket file is gone.
    pub fn remove(&self, force: bool) -> Result<(), RemoveError> {
        if !force && self.volume.counters.connected.load(Ordering::Acquire) {
            return Err(RemoveError::Connected);
        }
        // A frontend accepted between the check and here is closed like a forced one.
        self.stop();
        let thread = self
            .connection_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        Ok(())
    }
}

impl<A: Admission> Acceptable for VolumeServer<A> {
    fn accept_ready(self: Arc<Self>) {
        if self.stopping.load(Ordering::Acquire) {
            return;
        }
        let s = Arc::clone(&self);
        // Held across the spawn: `remove` takes the handle only once it is stored.
        let mut thread = self
            .connection_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // `remove` may have stopped the server since the check above: no thread then.
        if self.stopping.load(Ordering::Acquire) {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name(format!("vol-{}", self.volume.name))
            .spawn(move || s.serve_connection());
        match spawned {
            // The previous connection's thread has ended: the socket is armed only then.
            Ok(handle) => *thread = Some(handle),
            Err(e) => {
                drop(thread);
                tracing::error!(volume = %self.volume.name, "cannot start a thread for a frontend ({e}): turned away");
                self.turn_away();
                self.arm();
            }
        }
    }
}

/// Ends a connection's vring worker thread when dropped.
struct EndsWorker<A: Admission>(Arc<VolumeBackend<A>>);

impl<A: Admission> Drop for EndsWorker<A> {
    fn drop(&mut self) {
        self.0.end_worker_thread();
    }
}

fn daemon_error(e: vhost_user_backend::Error) -> io::Error {
    io::Error::other(e.to_string())
}
