//! The system calls each thread class makes: the one table to change when the daemon
//! starts making a new one. A class lists every call its threads make on any path (errors
//! and stopping included), and nothing else; `strace -f` of the test suites, by thread,
//! shows what a change added.

/// What a filter allows of one system call: any arguments, or argument `.0` equal to
/// one of `.1`.
pub type Args = Option<(u8, &'static [u64])>;

/// In an argument list, this process's id (known only when the filter is compiled).
pub const OWN_PID: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadClass {
    /// The main thread once frontends are served: waits for a signal, then stops.
    Main,
    /// Watches every volume's socket; starts a connection's threads.
    Acceptor,
    /// A frontend's vhost-user connection: its messages (memory tables, vrings, the
    /// inflight region) and its supervision; starts the vring workers.
    Connection,
    /// A vring worker: the data path (virtqueues, io_uring, guest memory).
    Worker,
    /// The REST control API and metrics (with tokio's blocking threads): hot add and
    /// remove, resize, the state file.
    Control,
    /// The QoS planner, which also keeps the learned model in the state file.
    Planner,
    /// Short-lived helpers: the handshake watchdog, the config-change notice, the CPU
    /// check.
    Helper,
}

impl ThreadClass {
    pub const ALL: [ThreadClass; 7] = [
        ThreadClass::Main,
        ThreadClass::Acceptor,
        ThreadClass::Connection,
        ThreadClass::Worker,
        ThreadClass::Control,
        ThreadClass::Planner,
        ThreadClass::Helper,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ThreadClass::Main => "main",
            ThreadClass::Acceptor => "acceptor",
            ThreadClass::Connection => "connection",
            ThreadClass::Worker => "worker",
            ThreadClass::Control => "control",
            ThreadClass::Planner => "planner",
            ThreadClass::Helper => "helper",
        }
    }

    /// The classes of the threads a thread of this class starts: their calls are in its
    /// filter too, since theirs is stacked on it.
    fn spawns(self) -> &'static [ThreadClass] {
        match self {
            ThreadClass::Acceptor => &[ThreadClass::Connection],
            ThreadClass::Connection => &[ThreadClass::Worker, ThreadClass::Helper],
            ThreadClass::Control => &[ThreadClass::Helper],
            _ => &[],
        }
    }

    fn own(self) -> &'static [(i64, Args)] {
        match self {
            ThreadClass::Main => MAIN,
            ThreadClass::Acceptor => ACCEPTOR,
            ThreadClass::Connection => CONNECTION,
            ThreadClass::Worker => WORKER,
            ThreadClass::Control => CONTROL,
            ThreadClass::Planner => PLANNER,
            ThreadClass::Helper => HELPER,
        }
    }
}

/// Every call `class`'s filter allows: its own, every thread's, and those of the classes
/// it starts; a call allowed with any arguments anywhere is allowed with any.
pub fn allowed(class: ThreadClass) -> Vec<(i64, Args)> {
    let mut calls: Vec<(i64, Args)> = Vec::new();
    collect(class, &mut calls);
    calls.sort_by_key(|&(nr, _)| nr);
    let mut merged: Vec<(i64, Args)> = Vec::new();
    for (nr, args) in calls {
        match merged.last_mut() {
            Some((last, kept)) if *last == nr => *kept = union(*kept, args),
            _ => merged.push((nr, args)),
        }
    }
    merged
}

fn collect(class: ThreadClass, into: &mut Vec<(i64, Args)>) {
    into.extend_from_slice(EVERY_THREAD);
    into.extend_from_slice(class.own());
    if !class.spawns().is_empty() {
        into.extend_from_slice(THREAD_START);
    }
    for &child in class.spawns() {
        collect(child, into);
    }
}

fn union(a: Args, b: Args) -> Args {
    match (a, b) {
        (Some((i, x)), Some((j, y))) if i == j => {
            let mut values: Vec<u64> = x.iter().chain(y).copied().collect();
            values.sort_unstable();
            values.dedup();
            Some((i, values.leak()))
        }
        _ => None,
    }
}

const fn any(nr: i64) -> (i64, Args) {
    (nr, None)
}

const fn only(nr: i64, arg: u8, values: &'static [u64]) -> (i64, Args) {
    (nr, Some((arg, values)))
}

use libc::*;

/// Memory, locks, time, signals and thread exit, which the runtime and allocator make in
/// every thread; seccomp and `PR_SET_NO_NEW_PRIVS` so that a thread started by another
/// can confine itself further; the SIGSYS handler's own calls. Signals go only to this
/// process's own threads.
const EVERY_THREAD: &[(i64, Args)] = &[
    any(SYS_futex),
    any(SYS_mmap),
    any(SYS_munmap),
    any(SYS_mprotect),
    any(SYS_madvise),
    any(SYS_brk),
    any(SYS_mremap),
    any(SYS_clock_gettime),
    any(SYS_clock_nanosleep),
    any(SYS_nanosleep),
    any(SYS_sched_yield),
    any(SYS_getrandom),
    any(SYS_rt_sigreturn),
    any(SYS_rt_sigprocmask),
    any(SYS_sigaltstack),
    any(SYS_exit),
    any(SYS_exit_group),
    any(SYS_getpid),
    any(SYS_gettid),
    only(SYS_tgkill, 0, &[OWN_PID]),
    // The SIGBUS handler's fallback to the default action, for a fault outside guest
    // memory.
    only(SYS_rt_sigaction, 0, &[SIGBUS as u64]),
    any(SYS_write),
    any(SYS_writev),
    any(SYS_close),
    only(
        SYS_prctl,
        0,
        &[
            PR_SET_NAME as u64,
            PR_GET_NAME as u64,
            PR_SET_NO_NEW_PRIVS as u64,
        ],
    ),
    only(SYS_seccomp, 0, &[SECCOMP_SET_MODE_FILTER as u64]),
];

/// Starting a thread (std's spawn and the threads it starts): what the child does before
/// it confines itself, under its parent's filter.
const THREAD_START: &[(i64, Args)] = &[
    any(SYS_clone3),
    any(SYS_clone),
    any(SYS_rseq),
    any(SYS_set_robust_list),
    any(SYS_sched_getaffinity),
];

/// The main thread once frontends are served: waits for SIGTERM, drains, removes its
/// sockets, writes the state file and tells systemd it stops.
const MAIN: &[(i64, Args)] = &[
    any(SYS_rt_sigtimedwait),
    any(SYS_epoll_ctl),
    any(SYS_io_uring_enter),
    any(SYS_getrusage),
    any(SYS_setpriority),
    any(SYS_fadvise64),
    any(SYS_shutdown),
    any(SYS_unlink),
    any(SYS_openat),
    any(SYS_read),
    any(SYS_statx),
    any(SYS_newfstatat),
    any(SYS_rename),
    any(SYS_fsync),
    any(SYS_fdatasync),
    only(SYS_socket, 0, &[AF_UNIX as u64]),
    any(SYS_connect),
    any(SYS_sendto),
];

/// Waits on every volume's listening socket and starts a connection thread per frontend.
const ACCEPTOR: &[(i64, Args)] = &[
    any(SYS_epoll_wait),
    any(SYS_epoll_ctl),
    any(SYS_accept4),
    any(SYS_read),
];

/// A frontend's connection: its vhost-user messages (on the crate's `vhost-*` thread),
/// guest memory and the inflight region (memfd), eventfds and epoll, the rings'
/// io_uring set-up, and `SO_PEERCRED`.
const CONNECTION: &[(i64, Args)] = &[
    any(SYS_accept4),
    any(SYS_recvmsg),
    any(SYS_sendmsg),
    any(SYS_shutdown),
    any(SYS_getsockopt),
    any(SYS_setsockopt),
    any(SYS_fcntl),
    only(SYS_ioctl, 1, &[FIONBIO]),
    any(SYS_epoll_create1),
    any(SYS_epoll_ctl),
    any(SYS_epoll_wait),
    any(SYS_eventfd2),
    any(SYS_timerfd_create),
    any(SYS_timerfd_settime),
    any(SYS_io_uring_setup),
    any(SYS_io_uring_register),
    any(SYS_io_uring_enter),
    any(SYS_memfd_create),
    any(SYS_ftruncate),
    any(SYS_openat),
    any(SYS_read),
    any(SYS_getdents64),
    any(SYS_newfstatat),
    any(SYS_fstat),
    any(SYS_statx),
    any(SYS_lseek),
    any(SYS_rt_sigaction),
];

/// The data path: eventfds, io_uring, the polling window's timerfd, CPU accounting,
/// pinning to `cpu_affinity`, the emulated device's crash points (`kill` of this process
/// only).
const WORKER: &[(i64, Args)] = &[
    any(SYS_epoll_wait),
    any(SYS_read),
    any(SYS_io_uring_enter),
    any(SYS_io_uring_register),
    any(SYS_timerfd_settime),
    any(SYS_getrusage),
    any(SYS_sched_setaffinity),
    only(SYS_kill, 0, &[OWN_PID]),
];

/// `_IO(0x12, 127)`, `_IO(0x12, 104)`, `_IOR(0x12, 114, u64)`: a block device's zeroing,
/// logical block size and size, for hot-added and resized volumes.
const BLOCK_DEVICE_IOCTLS: [u64; 3] = [0x127f, 0x1268, 0x8008_1272];

/// The REST API and the metrics listener (tokio and its blocking threads): sockets,
/// hot-added volumes' files and sockets (a stale one is probed with `connect`), group
/// names (NSS may ask a daemon over a socket), resize, the state file, a forced removal's
/// drain of requests in flight (io_uring); the switch to `[security] user` reaches this
/// thread too.
const CONTROL: &[(i64, Args)] = &[
    any(SYS_io_uring_enter),
    any(SYS_connect),
    any(SYS_poll),
    any(SYS_ppoll),
    any(SYS_epoll_create1),
    any(SYS_epoll_ctl),
    any(SYS_epoll_wait),
    any(SYS_eventfd2),
    any(SYS_accept4),
    any(SYS_recvfrom),
    any(SYS_sendto),
    any(SYS_recvmsg),
    any(SYS_sendmsg),
    any(SYS_read),
    any(SYS_shutdown),
    any(SYS_getsockname),
    any(SYS_getpeername),
    any(SYS_getsockopt),
    any(SYS_setsockopt),
    only(
        SYS_socket,
        0,
        &[AF_UNIX as u64, AF_INET as u64, AF_INET6 as u64],
    ),
    any(SYS_bind),
    any(SYS_listen),
    only(
        SYS_ioctl,
        1,
        &[
            FIONBIO,
            BLOCK_DEVICE_IOCTLS[0],
            BLOCK_DEVICE_IOCTLS[1],
            BLOCK_DEVICE_IOCTLS[2],
        ],
    ),
    any(SYS_fcntl),
    any(SYS_openat),
    any(SYS_newfstatat),
    any(SYS_fstat),
    any(SYS_statx),
    any(SYS_statfs),
    any(SYS_fstatfs),
    any(SYS_lseek),
    any(SYS_pread64),
    any(SYS_pwrite64),
    any(SYS_fallocate),
    any(SYS_ftruncate),
    any(SYS_fsync),
    any(SYS_fdatasync),
    any(SYS_flock),
    any(SYS_rename),
    any(SYS_unlink),
    any(SYS_mkdir),
    any(SYS_getcwd),
    any(SYS_getdents64),
    any(SYS_readlink),
    any(SYS_access),
    any(SYS_faccessat),
    any(SYS_faccessat2),
    any(SYS_chmod),
    any(SYS_fchmod),
    any(SYS_chown),
    any(SYS_fchown),
    any(SYS_fchownat),
    any(SYS_getuid),
    any(SYS_geteuid),
    any(SYS_getgid),
    any(SYS_getegid),
    any(SYS_setgroups),
    any(SYS_setresgid),
    any(SYS_setresuid),
    any(SYS_setuid),
    any(SYS_setgid),
];

/// Every period: the learned model in the state file; the switch to `[security] user`
/// reaches this thread too.
const PLANNER: &[(i64, Args)] = &[
    any(SYS_openat),
    any(SYS_read),
    any(SYS_newfstatat),
    any(SYS_statx),
    any(SYS_rename),
    any(SYS_unlink),
    any(SYS_fsync),
    any(SYS_fdatasync),
    any(SYS_ftruncate),
    any(SYS_getrusage),
    any(SYS_setgroups),
    any(SYS_setresgid),
    any(SYS_setresuid),
    any(SYS_setuid),
    any(SYS_setgid),
];

/// The handshake watchdog (shuts a silent frontend's socket), the config-change notice
/// (a vhost-user message), the CPU check.
const HELPER: &[(i64, Args)] = &[
    any(SYS_shutdown),
    any(SYS_sendmsg),
    any(SYS_recvmsg),
    any(SYS_openat),
    any(SYS_read),
    any(SYS_sched_setaffinity),
];
