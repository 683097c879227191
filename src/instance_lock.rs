//! One daemon per host disk.
//!
//! `run` takes an exclusive `flock(2)` on the backing device or file before it touches
//! anything else (state file, calibration, sockets), and holds it until it exits. A
//! second `run` of the same configuration, or of another one naming the same disk, fails
//! at once with the holder's PID and name, and leaves the first instance's sockets and
//! state alone. The lock is advisory: it keeps vhost-iocost instances apart, not other
//! programs (QEMU's image locks are byte-range `fcntl` locks and do not see it).

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use crate::config::DeviceConfig;

/// The held lock; released when dropped (or when the process exits).
#[derive(Debug)]
pub struct InstanceLock {
    _file: File,
}

impl InstanceLock {
    /// Lock the configured device, creating it first if it is missing and
    /// `create_size` is given (so the first instance holds the lock from the start).
    /// The null device has nothing to lock.
    pub fn acquire(cfg: &DeviceConfig) -> Result<Option<InstanceLock>, String> {
        if !cfg.kind.has_file() {
            return Ok(None);
        }
        let Some(path) = cfg.path.as_deref() else {
            return Ok(None);
        };
        crate::backend::io::disk::create_if_missing(cfg).map_err(|e| e.to_string())?;
        match File::open(path) {
            Ok(file) => lock(path, file).map(Some),
            Err(e) => Err(format!("device.path {}: cannot open: {e}", path.display())),
        }
    }
}

fn lock(path: &Path, file: File) -> Result<InstanceLock, String> {
    // SAFETY: flock on a descriptor we own; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(InstanceLock { _file: file });
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
        return Err(format!(
            "device.path {}: cannot lock: {err}",
            path.display()
        ));
    }
    let holder = file
        .metadata()
        .ok()
        .and_then(|m| std::fs::read_to_string("/proc/locks").ok().map(|l| (m, l)))
        .and_then(|(m, locks)| flock_holder(&locks, m.dev(), m.ino()))
        .map_or_else(
            || "another process".to_string(),
            |pid| {
                // Unreadable under the unit's ProtectProc=invisible: the PID alone then.
                match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
                    Ok(comm) => format!("process {pid} ({})", comm.trim()),
                    Err(_) => format!("process {pid}"),
                }
            },
        );
    Err(format!(
        "device.path {}: in use by {holder}, which holds its lock: one vhost-iocost serves a disk; \
         stop the other instance first (nothing was changed)",
        path.display()
    ))
}

/// The PID holding a `flock` on the file with device `dev` and inode `ino`, from the
/// text of `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF`, with the
/// device's major and minor numbers in hex).
fn flock_holder(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let id = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    locks.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // "->" marks a waiter, which shifts the fields by one.
        let f = if f.get(1) == Some(&"->") {
            &f[1..]
        } else {
            &f[..]
        };
        (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&id.as_str()))
            .then(|| f.get(4)?.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_found_by_device_and_inode() {
        let locks = "1: POSIX  ADVISORY  WRITE 77 fd:01:42 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4321 fd:01:42 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 99 fd:01:43 0 EOF\n";
        let dev = libc::makedev(0xfd, 0x01);
        assert_eq!(flock_holder(locks, dev, 42), Some(4321));
        assert_eq!(flock_holder(locks, dev, 43), Some(99));
        assert_eq!(flock_holder(locks, dev, 44), None);
    }

    #[test]
    fn a_second_lock_on_the_same_file_fails_naming_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk.img");
        std::fs::write(&path, b"data").unwrap();
        let cfg: DeviceConfig = toml::from_str(&format!("path = {:?}", path)).unwrap();
        let first = InstanceLock::acquire(&cfg).unwrap();
        assert!(first.is_some());
        let e = InstanceLock::acquire(&cfg).unwrap_err();
        let me = format!("process {} (", std::process::id());
        assert!(e.contains(&me) && e.contains("in use"), "{e}");
        drop(first);
        assert!(InstanceLock::acquire(&cfg).unwrap().is_some());
    }
}
