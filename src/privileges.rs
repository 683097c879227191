//! Dropping root once everything privileged is open (`[security] user`).
//!
//! glibc's set*id calls change the credentials of every thread of the process, so the
//! control plane and planner started before the switch run as the user after it, and so
//! does every thread started after it (connection threads, workers, io_uring's kernel
//! workers). A switch from uid 0 to another uid with all three uids changed clears the
//! permitted and effective capability sets. Every thread's are checked afterwards, and
//! so is that root cannot be regained. Frontends are served only after the switch
//! (`VolumeSet::serve_frontends`).

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
    every_thread_is(id)
}

/// Checks that every thread of the process, kernel workers included, runs as `id` with
/// no capability.
fn every_thread_is(id: &Identity) -> Result<(), String> {
    let tasks =
        std::fs::read_dir("/proc/self/task").map_err(|e| format!("/proc/self/task: {e}"))?;
    let want = format!("{0}\t{0}\t{0}\t{0}", id.uid);
    for task in tasks.flatten() {
        // A thread that ended meanwhile has nothing left to check.
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
        };
        let caps_clear = ["CapEff:", "CapPrm:"]
            .iter()
            .all(|k| field(k).and_then(|v| u64::from_str_radix(v, 16).ok()) == Some(0));
        if field("Uid:") != Some(want.as_str()) || !caps_clear {
            return Err(format!(
                "thread {} ({}) kept its credentials: Uid {:?}, CapEff {:?}",
                task.file_name().to_string_lossy(),
                field("Name:").unwrap_or("?"),
                field("Uid:"),
                field("CapEff:")
            ));
        }
    }
    Ok(())
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
