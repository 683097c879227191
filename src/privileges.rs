//! Dropping root once everything privileged is open (`[security] user`).
//!
//! glibc's set*id calls change the credentials of every thread of the process, so the
//! workers, connection threads, control plane and planner started before the switch run
//! as the user after it. A switch from uid 0 to another uid with all three uids changed
//! clears the permitted and effective capability sets; both are checked afterwards, and
//! so is that root cannot be regained. io_uring's kernel workers act on descriptors whose
//! access was checked when the daemon opened them.

use crate::config::Identity;
use std::io;
use std::path::Path;

/// Switches the whole process to `id`'s uid and gid, with `id.gid` as its only group, and
/// checks that no capability and no way back to root is left.
pub fn drop_to(id: &Identity) -> Result<(), String> {
    let fail = |what: &str| format!("{what}: {}", io::Error::last_os_error());
    // SAFETY: plain system calls on integers and a one-element array that outlives them.
    unsafe {
        if libc::setgroups(1, &id.gid) != 0 {
            return Err(fail("setgroups"));
        }
        if libc::setresgid(id.gid, id.gid, id.gid) != 0 {
            return Err(fail("setresgid"));
        }
        if libc::setresuid(id.uid, id.uid, id.uid) != 0 {
            return Err(fail("setresuid"));
        }
        if libc::setuid(0) == 0 {
            return Err("root could be regained after the switch".into());
        }
    }
    let (effective, permitted) = capabilities()?;
    if effective != 0 || permitted != 0 {
        return Err(format!(
            "capabilities left after the switch: effective {effective:#x}, permitted {permitted:#x}"
        ));
    }
    Ok(())
}

/// This thread's effective and permitted capability sets (`/proc/thread-self/status`).
pub fn capabilities() -> Result<(u64, u64), String> {
    let status = std::fs::read_to_string("/proc/thread-self/status")
        .map_err(|e| format!("/proc/thread-self/status: {e}"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .ok_or_else(|| format!("/proc/thread-self/status has no {name}"))
    };
    Ok((field("CapEff:")?, field("CapPrm:")?))
}

/// Whether this process may create files in `dir` (the state file is rewritten there by
/// a rename), tried with a file of its own that it removes again.
pub fn can_write_in(dir: &Path) -> io::Result<()> {
    let probe = dir.join(format!(".vhost-iocost-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}
