//! One thread waits for frontends on every volume's socket, so an idle volume holds its
//! listening socket and nothing else: the thread, io_uring, eventfds and timer that
//! serve a connection are made when a frontend connects and go when it leaves.
//!
//! Each socket is armed for one readiness at a time (`EPOLLONESHOT`). The acceptor hands
//! a ready socket to its volume's server, which accepts the frontend on a thread of its
//! own and arms the socket again when that connection ends: a socket serves one frontend
//! at a time, and the next one waits in its backlog.
//!
//! Frontends wait in the backlogs until [`Acceptor::open`]: a daemon that drops its
//! privileges (`[security] user`) handles no frontend's message before it has.

use crate::lock::Locked;
use std::io;
use std::os::unix::io::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

/// A socket's owner, told when a frontend is waiting.
pub trait Acceptable: Send + Sync {
    /// A frontend is waiting on the socket (called on the acceptor thread: must not
    /// block). The socket stays disarmed until [`Acceptor::arm`].
    fn accept_ready(self: Arc<Self>);
}

/// Identifies a socket registered with the [`Acceptor`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token(u64);

/// The token of the acceptor's own stop event.
const STOP: u64 = u64::MAX;

pub struct Acceptor {
    epoll: Epoll,
    stop_evt: EventFd,
    stopping: AtomicBool,
    /// Indexed by token; None: removed.
    owners: Mutex<Vec<Option<Arc<dyn Acceptable>>>>,
    /// Whether frontends are served yet ([`Acceptor::open`]).
    opened: (Mutex<bool>, Condvar),
}

impl Acceptor {
    /// Creates the acceptor and its thread, which serves no frontend before
    /// [`Acceptor::open`].
    pub fn start() -> io::Result<Arc<Self>> {
        let acceptor = Arc::new(Acceptor {
            epoll: Epoll::new()?,
            stop_evt: EventFd::new(libc::EFD_NONBLOCK)?,
            stopping: AtomicBool::new(false),
            owners: Mutex::new(Vec::new()),
            opened: (Mutex::new(false), Condvar::new()),
        });
        acceptor.epoll.ctl(
            ControlOperation::Add,
            acceptor.stop_evt.as_raw_fd(),
            EpollEvent::new(EventSet::IN, STOP),
        )?;
        let a = Arc::clone(&acceptor);
        std::thread::Builder::new()
            .name("acceptor".into())
            .spawn(move || a.run())?;
        Ok(acceptor)
    }

    fn run(&self) {
        {
            let (opened, changed) = &self.opened;
            let mut open = opened.locked();
            while !*open {
                open = changed.wait(open).unwrap_or_else(|e| e.into_inner());
            }
        }
        // After the switch of user: this class needs no call that changes credentials.
        crate::seccomp::confine(crate::seccomp::ThreadClass::Acceptor);
        let mut events = vec![EpollEvent::default(); 64];
        loop {
            let n = match self.epoll.wait(-1, &mut events) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::error!("acceptor: cannot wait for frontends: {e}");
                    return;
                }
            };
            for event in &events[..n] {
                if event.data() == STOP {
                    if self.stopping.load(Ordering::Acquire) {
                        return;
                    }
                    continue;
                }
                let owner = self
                    .lock()
                    .get(event.data() as usize)
                    .and_then(Option::clone);
                if let Some(owner) = owner {
                    owner.accept_ready();
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Arc<dyn Acceptable>>>> {
        self.owners.locked()
    }

    /// Registers a listening socket and its owner, disarmed: [`Acceptor::arm`] it once the
    /// owner knows its token.
    pub fn add(&self, fd: RawFd, owner: Arc<dyn Acceptable>) -> io::Result<Token> {
        // A slot is never reused: an event of a removed socket, already returned by
        // epoll_wait, must not reach the owner of a socket added after.
        let token = {
            let mut owners = self.lock();
            owners.push(Some(owner));
            Token(owners.len() as u64 - 1)
        };
        let event = EpollEvent::new(EventSet::ONE_SHOT, token.0);
        if let Err(e) = self.epoll.ctl(ControlOperation::Add, fd, event) {
            self.lock()[token.0 as usize] = None;
            return Err(e);
        }
        Ok(token)
    }

    /// Arms the socket for its next frontend.
    pub fn arm(&self, token: Token, fd: RawFd) -> io::Result<()> {
        let event = EpollEvent::new(EventSet::IN | EventSet::ONE_SHOT, token.0);
        self.epoll.ctl(ControlOperation::Modify, fd, event)
    }

    /// Unregisters the socket: its owner is not told of frontends any more.
    pub fn remove(&self, token: Token, fd: RawFd) {
        let _ = self
            .epoll
            .ctl(ControlOperation::Delete, fd, EpollEvent::default());
        if let Some(slot) = self.lock().get_mut(token.0 as usize) {
            *slot = None;
        }
    }

    /// Starts serving the frontends waiting and to come.
    pub fn open(&self) {
        *self.opened.0.locked() = true;
        self.opened.1.notify_all();
    }

    /// Ends the acceptor thread.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        let _ = self.stop_evt.write(1);
        self.open();
    }
}
