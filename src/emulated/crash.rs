//! `[device.emulated.crash]`: the daemon kills itself (SIGKILL) at a chosen point of the
//! data path, so that recovery from the inflight log can be tested at each point where a
//! crash leaves a different state behind, and from a crash inside a VMM's handshake.
//!
//! ```toml
//! [device.emulated.crash]
//! at = "after-publish"   # after-pop | before-publish | after-publish | mid-clear | mid-handshake
//! nth = 3                # the 3rd time any worker reaches that point (default 1)
//! ```
//!
//! * `after-pop`: heads popped and marked in flight, their requests not yet submitted;
//! * `before-publish`: requests completed by the device, their used entries not written;
//! * `after-publish`: the used index stored (the guest sees the batch), the batch not yet
//!   cleared from the log;
//! * `mid-clear`: half of a published batch cleared from the log;
//! * `mid-handshake`: a frontend asked for the protocol features (`GET_PROTOCOL_FEATURES`),
//!   early in its (re)connection handshake, where QEMU before 9.1 does not survive a
//!   backend's death (design §8.14).
//!
//! Like the fault rules, only an emulated device has it, so no production disk can be
//! configured to crash.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrashPoint {
    AfterPop,
    BeforePublish,
    AfterPublish,
    MidClear,
    MidHandshake,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrashConfig {
    pub at: CrashPoint,
    #[serde(default = "one")]
    pub nth: u64,
}

fn one() -> u64 {
    1
}

impl CrashConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.nth == 0 {
            return Err("device.emulated.crash.nth: must be at least 1 (got 0)".into());
        }
        Ok(())
    }
}

static ARMED: OnceLock<CrashConfig> = OnceLock::new();
static REACHED: AtomicU64 = AtomicU64::new(0);

/// Arms the crash point for the life of the process (the first call wins).
pub fn arm(crash: CrashConfig) {
    if ARMED.set(crash).is_ok() {
        tracing::warn!(at = ?crash.at, nth = crash.nth, "crash point armed: the daemon will kill itself there");
    }
}

/// The data path passed `point`: dies here if this is the armed point's nth passage.
#[inline]
pub fn reached(point: CrashPoint) {
    let Some(armed) = ARMED.get() else {
        return;
    };
    if armed.at == point && REACHED.fetch_add(1, Ordering::Relaxed) + 1 == armed.nth {
        tracing::error!(at = ?point, nth = armed.nth, "crash point reached: killing the daemon");
        // SAFETY: kill(2) of our own process.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
}
