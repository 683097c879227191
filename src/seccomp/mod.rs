//! Seccomp filters the daemon installs on itself, one per thread class, wherever it is
//! started (by systemd, libvirt, a container runtime, a script or by hand).
//!
//! Each thread of `vhost-iocost run` confines itself when it starts (the main thread once
//! frontends are served) to the system calls its class makes, listed in [`table`]. A
//! filter is inherited by the threads a thread starts and cannot be removed, so a class
//! that starts others allows what they need too (`table::spawns`); they then add their
//! own, narrower filter on top.
//!
//! `[security] seccomp`:
//! - `enforce` (the default): a call outside the list is not made; the SIGSYS handler
//!   logs the thread, its class and the call, and the process dies of SIGSYS, so a
//!   missing entry is found at once and never silently weakens anything;
//! - `log`: the kernel logs such a call (audit, `dmesg`) and lets it run;
//! - `off`: no filter.
//!
//! io_uring's requests are not system calls and pass no filter: each ring is restricted
//! (`IORING_REGISTER_RESTRICTIONS`) to the reads, writes, flushes, discards, timeouts and
//! no-ops the engine makes, on its registered file, before it is enabled.

mod names;
mod sigsys;
mod table;

pub use table::ThreadClass;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Enforce,
    Log,
    Off,
}

/// The mode of this process; unset (no filter) unless `run` sets it, so that the library's
/// users and its in-process tests are never confined.
static MODE: OnceLock<Mode> = OnceLock::new();

/// A class the emulated device's `seccomp_trip` names: a thread of it makes a call that
/// no list allows right after confining itself (tests of the SIGSYS path).
static TRIP: OnceLock<ThreadClass> = OnceLock::new();

thread_local! {
    /// The class this thread confined itself to, for the SIGSYS handler.
    static CLASS: Cell<Option<ThreadClass>> = const { Cell::new(None) };
}

/// Sets the process's mode; call once, before any thread is started. Installs the
/// SIGSYS handler that reports a blocked call.
pub fn set_mode(mode: Mode) -> std::io::Result<()> {
    if mode == Mode::Enforce {
        sigsys::install()?;
    }
    let _ = MODE.set(mode);
    if mode != Mode::Enforce {
        tracing::warn!(
            ?mode,
            "seccomp filters are not enforced ([security] seccomp)"
        );
    }
    Ok(())
}

/// Arms the test-only trip of the emulated device (`[device.emulated] seccomp_trip`).
pub fn arm_trip(class: ThreadClass) {
    if TRIP.set(class).is_ok() {
        tracing::warn!(
            class = class.name(),
            "seccomp trip armed: a thread of that class will make a forbidden call"
        );
    }
}

/// Confines the calling thread to `class`'s system calls (once per thread; nothing when
/// no mode is set or it is `off`). A filter that cannot be installed in `enforce` mode
/// stops the process: running unconfined would silently weaken it.
pub fn confine(class: ThreadClass) {
    let mode = match MODE.get() {
        None | Some(Mode::Off) => return,
        Some(m) => *m,
    };
    if CLASS.with(Cell::get) == Some(class) {
        return;
    }
    if let Err(e) = program(class, mode)
        .and_then(|p| seccompiler::apply_filter(p).map_err(|e| format!("cannot install it: {e}")))
    {
        tracing::error!(
            class = class.name(),
            "seccomp filter for the {} threads: {e}",
            class.name()
        );
        if mode == Mode::Enforce {
            std::process::abort();
        }
        return;
    }
    CLASS.with(|c| c.set(Some(class)));
    if TRIP.get() == Some(&class) {
        // SAFETY: getppid takes no arguments and changes nothing.
        unsafe { libc::syscall(libc::SYS_getppid) };
    }
}

/// Labels the calling thread with `class` when it runs under the filter it inherited from a
/// thread of that class and installs none of its own (tokio's blocking threads, the
/// vhost-user crate's message thread), so that a blocked call is reported under it.
pub fn inherited(class: ThreadClass) {
    if matches!(MODE.get(), Some(Mode::Enforce | Mode::Log)) {
        CLASS.with(|c| {
            if c.get().is_none() {
                c.set(Some(class));
            }
        });
    }
}

/// The compiled filter of `class` in `mode`, built once per process.
fn program(class: ThreadClass, mode: Mode) -> Result<&'static BpfProgram, String> {
    static PROGRAMS: [OnceLock<Result<BpfProgram, String>>; ThreadClass::ALL.len()] =
        [const { OnceLock::new() }; ThreadClass::ALL.len()];
    PROGRAMS[class as usize]
        .get_or_init(|| compile(class, mode))
        .as_ref()
        .map_err(Clone::clone)
}

fn compile(class: ThreadClass, mode: Mode) -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let own_pid = u64::from(std::process::id());
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, args) in table::allowed(class) {
        let conditions = match args {
            // An empty list of rules allows the call with any arguments.
            None => Vec::new(),
            Some((arg, values)) => values
                .iter()
                .map(|&v| if v == table::OWN_PID { own_pid } else { v })
                .map(|v| {
                    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, v)
                        .and_then(|c| SeccompRule::new(vec![c]))
                })
                .collect::<Result<_, _>>()
                .map_err(|e| e.to_string())?,
        };
        rules.insert(nr, conditions);
    }
    let mismatch = match mode {
        Mode::Log => SeccompAction::Log,
        _ => SeccompAction::Trap,
    };
    SeccompFilter::new(rules, mismatch, SeccompAction::Allow, arch)
        .and_then(BpfProgram::try_from)
        .map_err(|e| e.to_string())
}
