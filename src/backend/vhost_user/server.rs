//! A volume's connections. Its socket and its hand-over socket (`<socket>.handover`,
//! design §8.9) are watched by the [`Acceptor`] (no thread while idle); each frontend gets
//! a thread, a fresh backend and a `VhostUserDaemon` (the crate's workers live for one
//! connection); when it disconnects, its socket is armed for the next one while the
//! other volumes keep running. Each socket takes one frontend at a time, so a volume has
//! at most two, and the volume's data-plane lease lets only one of them use the rings.

use crate::backend::admission::Admission;
use crate::backend::guest_memory::Mem;
use crate::backend::vhost_user::acceptor::{Acceptable, Acceptor, Token};
use crate::backend::vhost_user::connection::VolumeBackend;
use crate::backend::vhost_user::handshake::HANDSHAKE_TIMEOUT;
use crate::backend::volume::peer::peer_cred;
use crate::backend::volume::{Volume, VolumeCounters};
use crate::lock::Locked;
use crate::logging::LogLimiter;
use std::io;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
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

/// One of a volume's sockets and the frontend that came through it.
struct Port<A: Admission> {
    path: PathBuf,
    /// The socket file this server bound, removed on stop only if still there.
    bound: Option<crate::socket_path::SocketId>,
    listener: Mutex<Listener>,
    token: OnceLock<Token>,
    current: Mutex<Option<Connection<A>>>,
    /// The thread serving the current (or last) frontend, joined by
    /// [`VolumeServer::remove`].
    connection_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// The volume's socket and its hand-over socket, in that order.
const PORTS: usize = 2;

pub struct VolumeServer<A: Admission> {
    pub volume: Arc<Volume<A>>,
    ports: [Port<A>; PORTS],
    stopping: AtomicBool,
    acceptor: Arc<Acceptor>,
    /// A connection's thread could not be ended and was left behind: take no more
    /// frontends, or every retry would leave another.
    gave_up: AtomicBool,
    /// Log lines for frontends refused by their credentials: a process retrying in a
    /// loop must not flood the log.
    refusals: Mutex<LogLimiter>,
}

/// What the acceptor tells when a frontend waits on one of the volume's sockets.
struct PortOf<A: Admission> {
    server: Arc<VolumeServer<A>>,
    index: usize,
}

/// Why a volume was not removed.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    #[error("a frontend is connected (disconnect it first, or force)")]
    Connected,
}

impl<A: Admission> VolumeServer<A> {
    /// Binds the volume's socket and its hand-over socket (replacing stale ones, refusing
    /// anything else: [`crate::socket_path::claim`]) and has `acceptor` watch them.
    pub fn start(volume: Arc<Volume<A>>, acceptor: &Arc<Acceptor>) -> io::Result<Arc<Self>> {
        let first = Port::bind(&volume, volume.socket.clone())?;
        let second = match Port::bind(&volume, crate::socket_path::handover(&volume.socket)) {
            Ok(port) => port,
            Err(e) => {
                crate::socket_path::remove_if_ours(&first.path, first.bound);
                return Err(e);
            }
        };
        let server = Arc::new(VolumeServer {
            volume,
            ports: [first, second],
            stopping: AtomicBool::new(false),
            acceptor: Arc::clone(acceptor),
            gave_up: AtomicBool::new(false),
            refusals: Mutex::new(LogLimiter::new(Duration::from_secs(1))),
        });
        // Both sockets are registered before either is armed: a frontend already waiting
        // is taken only once the volume is wholly set up.
        for index in 0..PORTS {
            if let Err(e) = server.watch(index) {
                server.stop();
                return Err(e);
            }
        }
        for index in 0..PORTS {
            if let Err(e) = server.arm_port(index) {
                // A frontend may have been taken on a socket armed already: end its
                // connection and wait for its thread before the volume goes.
                let _ = server.remove(true);
                return Err(e);
            }
        }
        tracing::debug!(volume = %server.volume.name, socket = %server.volume.socket.display(), "listening");
        Ok(server)
    }

    /// Registers port `index` with the acceptor, not armed yet.
    fn watch(self: &Arc<Self>, index: usize) -> io::Result<()> {
        let port = &self.ports[index];
        let fd = port.lock_listener().as_raw_fd();
        let owner = Arc::new(PortOf {
            server: Arc::clone(self),
            index,
        });
        let token = self.acceptor.add(fd, owner)?;
        let _ = port.token.set(token);
        Ok(())
    }

    /// A frontend's connection on port `index`, on its own thread; then that socket is
    /// armed again.
    fn serve_connection(&self, index: usize) {
        crate::seccomp::confine(crate::seccomp::ThreadClass::Connection);
        let name = &self.volume.name;
        let mut accepted = false;
        if let Err(e) = self.serve_one(index, &mut accepted) {
            tracing::error!(volume = %name, "connection failed: {e}");
            if !accepted {
                // A frontend that could not be taken is not left waiting, and something
                // persistent (e.g. io_uring limits) does not make this spin.
                self.ports[index].turn_away();
                std::thread::sleep(Duration::from_millis(500));
            }
        }
        self.arm(index);
    }

    /// Watch port `index` for the next frontend (not once stopping).
    fn arm(&self, index: usize) {
        if self.stopping.load(Ordering::Acquire) {
            return;
        }
        if self.gave_up.load(Ordering::Acquire) {
            tracing::error!(volume = %self.volume.name, "takes no more frontends until the daemon restarts (see the error above)");
            return;
        }
        // Stopping meanwhile removed the socket: nothing to arm.
        if let Err(e) = self.arm_port(index) {
            if !self.stopping.load(Ordering::Acquire) {
                tracing::error!(volume = %self.volume.name, "cannot wait for the next frontend: {e}");
            }
        }
    }

    /// Takes the frontend waiting on port `index` off the socket, if its credentials are
    /// among the volume's allowed ones; one that is not is closed before anything is
    /// read from it, and the refusal logged (None, as when nobody was waiting).
    fn admit_peer(&self, index: usize) -> io::Result<Option<UnixStream>> {
        let Some(stream) = self.ports[index]
            .lock_listener()
            .accept()
            .map_err(|e| io::Error::other(e.to_string()))?
        else {
            return Ok(None);
        };
        let peers = &self.volume.peers;
        if peers.is_open() {
            return Ok(Some(stream));
        }
        match peer_cred(&stream) {
            Ok(peer) if peers.admits(&peer) => Ok(Some(stream)),
            Ok(peer) => {
                if let Some(suppressed) = self.refusals.locked().check() {
                    tracing::warn!(
                        volume = %self.volume.name, pid = peer.pid, uid = peer.uid, gid = peer.gid,
                        allowed_uids = ?peers.uids, allowed_gids = ?peers.gids, suppressed,
                        "frontend refused: its user and group are not allowed"
                    );
                }
                Ok(None)
            }
            Err(e) => {
                tracing::warn!(volume = %self.volume.name, "frontend refused: its credentials cannot be read ({e})");
                Ok(None)
            }
        }
    }

    /// Has the acceptor tell of port `index`'s next frontend.
    fn arm_port(&self, index: usize) -> io::Result<()> {
        let port = &self.ports[index];
        let fd = port.lock_listener().as_raw_fd();
        match port.token.get() {
            Some(&token) => self.acceptor.arm(token, fd),
            None => Ok(()),
        }
    }

    /// One frontend's connection on port `index`, from making its backend to its end;
    /// `accepted` is set once the frontend is taken off the socket.
    fn serve_one(&self, index: usize, accepted: &mut bool) -> io::Result<()> {
        let name = &self.volume.name;
        let port = &self.ports[index];
        let Some(stream) = self.admit_peer(index)? else {
            return Ok(());
        };
        let backend = Arc::new(VolumeBackend::new(self.volume.clone())?);
        let mut daemon = VhostUserDaemon::new(
            format!("vhost-{name}"),
            backend.clone(),
            GuestMemoryAtomic::new(Mem::new()),
        )
        .map_err(daemon_error)?;
        let handlers = daemon.get_epoll_handlers();
        let tokens = backend.tokens();
        // The vring worker threads run already and end only through the exit event: if
        // that cannot be registered, dropping the daemon would wait for them for ever.
        for handler in &handlers {
            if let Err(e) = handler.register_listener(
                backend.exit_evt.as_raw_fd(),
                EventSet::IN,
                tokens.exit.into(),
            ) {
                tracing::error!(volume = %name, "cannot register the connection's exit event ({e}): its threads are left behind");
                std::mem::forget(daemon);
                self.gave_up.store(true, Ordering::Release);
                return Err(e);
            }
        }
        // Dropped before the daemon on an early return (declared after it).
        let _ends_worker = EndsWorker(backend.clone());
        for (thread, handler) in handlers.iter().enumerate() {
            let worker = backend.worker(thread);
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
        daemon.start_stream(stream).map_err(daemon_error)?;
        *accepted = true;
        let counters = &self.volume.counters;
        VolumeCounters::add(&counters.connections, 1);
        let socket = port.path.display();
        tracing::info!(volume = %name, %socket, "frontend connected");
        let shutdown = daemon
            .shutdown_handle()
            .ok_or_else(|| io::Error::other("connected daemon has no shutdown handle"))?;
        // Before the connection is recorded: a failure here leaves nothing counted.
        let watchdog = self.watch_handshake(&backend, &shutdown)?;
        *port.lock() = Some(Connection {
            backend: backend.clone(),
            shutdown: shutdown.clone(),
        });
        counters.frontends.fetch_add(1, Ordering::AcqRel);
        if self.stopping.load(Ordering::Acquire) {
            shutdown.shutdown();
        }
        let result = daemon.wait();
        backend.handshake.ended();
        let _ = watchdog.join();
        port.lock().take();
        counters.frontends.fetch_sub(1, Ordering::AcqRel);
        // Dropping the daemon joins its worker thread, once told to end; dropping the
        // backend then waits for any I/O still in the kernel.
        backend.end_worker_thread();
        drop(daemon);
        let in_flight = backend.in_flight();
        tracing::info!(volume = %name, %socket, in_flight, "frontend disconnected");
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
                crate::seccomp::confine(crate::seccomp::ThreadClass::Helper);
                if !handshake.wait(HANDSHAKE_TIMEOUT) {
                    tracing::warn!(
                        volume = %name,
                        "frontend sent no GET_FEATURES within {HANDSHAKE_TIMEOUT:?} of connecting: disconnected"
                    );
                    shutdown.shutdown();
                }
            })
    }

    /// The backends of the frontends connected now, with their shutdown handles.
    fn connections(&self) -> Vec<(Arc<VolumeBackend<A>>, ShutdownHandle)> {
        self.ports
            .iter()
            .filter_map(|p| {
                p.lock()
                    .as_ref()
                    .map(|c| (c.backend.clone(), c.shutdown.clone()))
            })
            .collect()
    }

    /// Lets the connected workers offer their parked requests again.
    pub fn wake(&self) {
        for port in &self.ports {
            if let Some(c) = port.lock().as_ref() {
                c.backend.wake();
            }
        }
    }

    /// Graceful stop: no new connections; the current frontends' requests are completed
    /// and answered, then their connections are closed.
    pub fn stop(&self) {
        if self.stopping.swap(true, Ordering::AcqRel) {
            return;
        }
        for port in &self.ports {
            if let Some(&token) = port.token.get() {
                self.acceptor
                    .remove(token, port.lock_listener().as_raw_fd());
            }
        }
        for (backend, shutdown) in self.connections() {
            if let Err(e) = backend.drain_all() {
                tracing::warn!(volume = %self.volume.name, "drain failed: {e}");
            }
            shutdown.shutdown();
        }
        for port in &self.ports {
            crate::socket_path::remove_if_ours(&port.path, port.bound);
        }
    }
}

impl<A: Admission> VolumeServer<A> {
    /// Tells the connected frontend that the config space changed; false when none is
    /// connected or it set up no channel for it (it sees the change when it next reads
    /// the config, at the latest when it reconnects).
    pub fn notify_config_change(&self) -> bool {
        let mut told = false;
        for (backend, _) in self.connections() {
            told |= backend.notify_config_change();
        }
        told
    }

    /// Stops serving for good, for the volume's removal: refused while a frontend is
    /// connected unless `force`, which completes its in-flight requests and closes the
    /// connections first. Returns once the connections' threads have ended, so nothing
    /// of the volume is in flight or waiting any more; the socket files are gone.
    pub fn remove(&self, force: bool) -> Result<(), RemoveError> {
        if !force && self.volume.counters.connected() {
            return Err(RemoveError::Connected);
        }
        // A frontend accepted between the check and here is closed like a forced one.
        self.stop();
        for port in &self.ports {
            let thread = port.connection_thread.locked().take();
            if let Some(thread) = thread {
                let _ = thread.join();
            }
        }
        Ok(())
    }
}

impl<A: Admission> Port<A> {
    /// Binds a listening socket at `path` for `volume`, with the volume's access rights.
    fn bind(volume: &Volume<A>, path: PathBuf) -> io::Result<Self> {
        crate::socket_path::claim(&path, &format!("volume {}: socket", volume.name))?;
        let cannot_listen = |path: &std::path::Path, e: &dyn std::fmt::Display| {
            io::Error::other(format!(
                "volume {}: cannot listen on {}: {e}",
                volume.name,
                path.display()
            ))
        };
        let listener = Listener::new(&path, false).map_err(|e| cannot_listen(&path, &e))?;
        let bound = crate::socket_path::id(&path);
        let port = Port {
            path,
            bound,
            listener: Mutex::new(listener),
            token: OnceLock::new(),
            current: Mutex::new(None),
            connection_thread: Mutex::new(None),
        };
        // `turn_away` accepts only if a frontend is waiting. (The crate's accept loops
        // while none is, so a connection is only accepted once the acceptor saw one.)
        let configured = port
            .lock_listener()
            .set_nonblocking(true)
            .map_err(|e| cannot_listen(&port.path, &e))
            .and_then(|()| {
                crate::socket_path::set_access(&port.path, volume.socket_mode, volume.socket_gid)
                    .map_err(|e| {
                        io::Error::other(format!(
                            "volume {}: socket {}: cannot set its mode or group: {e}",
                            volume.name,
                            port.path.display()
                        ))
                    })
            });
        if let Err(e) = configured {
            crate::socket_path::remove_if_ours(&port.path, port.bound);
            return Err(e);
        }
        Ok(port)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Connection<A>>> {
        self.current.locked()
    }

    fn lock_listener(&self) -> std::sync::MutexGuard<'_, Listener> {
        self.listener.locked()
    }

    /// Accepts the waiting frontend and closes it at once: it cannot be served now.
    fn turn_away(&self) {
        if let Ok(Some(stream)) = self.lock_listener().accept() {
            drop(stream);
        }
    }
}

impl<A: Admission> Acceptable for PortOf<A> {
    fn accept_ready(self: Arc<Self>) {
        let server = &self.server;
        let port = &server.ports[self.index];
        if server.stopping.load(Ordering::Acquire) {
            return;
        }
        let (s, index) = (Arc::clone(server), self.index);
        // Held across the spawn: `remove` takes the handle only once it is stored.
        let mut thread = port.connection_thread.locked();
        // `remove` may have stopped the server since the check above: no thread then.
        if server.stopping.load(Ordering::Acquire) {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name(format!("vol-{}", server.volume.name))
            .spawn(move || s.serve_connection(index));
        match spawned {
            // The previous connection's thread has ended: the socket is armed only then.
            Ok(handle) => *thread = Some(handle),
            Err(e) => {
                drop(thread);
                tracing::error!(volume = %server.volume.name, "cannot start a thread for a frontend ({e}): turned away");
                port.turn_away();
                server.arm(self.index);
            }
        }
    }
}

/// Ends a connection's vring worker threads when dropped.
struct EndsWorker<A: Admission>(Arc<VolumeBackend<A>>);

impl<A: Admission> Drop for EndsWorker<A> {
    fn drop(&mut self) {
        self.0.end_worker_thread();
    }
}

fn daemon_error(e: vhost_user_backend::Error) -> io::Error {
    io::Error::other(e.to_string())
}
