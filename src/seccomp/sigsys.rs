//! The SIGSYS handler: says which thread, of which class, made which call its filter does
//! not allow, then lets the process die of SIGSYS. It runs in signal context, so it only
//! formats into a buffer on the stack and makes calls every filter allows.

use super::{names, CLASS};
use std::fmt::Write;

/// `si_code` of a SIGSYS raised by a seccomp filter (the kernel's `SYS_SECCOMP`).
const SYS_SECCOMP: libc::c_int = 1;

pub(super) fn install() -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is valid; the handler is an `extern "C"` function of the
    // signature SA_SIGINFO asks for.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as *const () as usize;
        // Reset to the default action on entry, and not blocked meanwhile: the handler's
        // own raise ends the process.
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESETHAND | libc::SA_NODEFER;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGSYS, &action, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

extern "C" fn handler(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo. For SIGSYS its union holds the call's
    // address (offset 16 on 64-bit) and then the system call's number (offset 24).
    let nr = unsafe { *(info as *const u8).add(24).cast::<libc::c_int>() };
    let mut thread = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included.
    unsafe { libc::prctl(libc::PR_GET_NAME, thread.as_mut_ptr()) };
    let end = thread.iter().position(|&b| b == 0).unwrap_or(thread.len());
    let thread = std::str::from_utf8(&thread[..end]).unwrap_or("?");
    let class = CLASS.with(|c| c.get()).map(|c| c.name());
    let (class, list) = match class {
        Some(c) => (c, c),
        None => ("no", "starting thread's"),
    };
    let mut line = StackLine::default();
    // SAFETY: as above; si_code is the first fields' third int.
    let code = unsafe { (*info).si_code };
    let _ = if code == SYS_SECCOMP {
        writeln!(
            line,
            "seccomp: thread `{thread}` ({class} class) made system call {} ({nr}), which \
             its filter does not allow: the daemon dies of SIGSYS. If the daemon needs it, \
             add it to the {list} list of src/seccomp/table.rs; [security] seccomp = \"log\" \
             finds every such call",
            names::name(i64::from(nr)).unwrap_or("?"),
        )
    } else {
        writeln!(
            line,
            "SIGSYS sent by a process, not by a seccomp filter: dying of it"
        )
    };
    // SAFETY: write, getpid, gettid and tgkill to this thread are in every filter; with
    // SA_RESETHAND the signal now takes its default action.
    unsafe {
        libc::write(2, line.buf.as_ptr().cast(), line.len);
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid(),
            libc::gettid(),
            libc::SIGSYS,
        );
    }
}

/// A line formatted without allocating; what does not fit is cut.
struct StackLine {
    buf: [u8; 512],
    len: usize,
}

impl Default for StackLine {
    fn default() -> Self {
        StackLine {
            buf: [0; 512],
            len: 0,
        }
    }
}

impl Write for StackLine {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}
