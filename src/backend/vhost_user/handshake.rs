//! The handshake deadline. Each volume socket serves one frontend at a time, so a client that
//! connects and then says nothing (or half a message) would keep the VM's real frontend
//! out for good. Every frontend asks for the device features first (QEMU and
//! cloud-hypervisor within milliseconds of connecting); one that has not done so within
//! [`HANDSHAKE_TIMEOUT`] is disconnected and the volume takes the next one.
//!
//! Only the start is bounded: after it, a frontend may legitimately stay quiet for as long
//! as its VM sits in firmware or paused.

use crate::lock::Locked;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Waiting,
    Greeted,
    Ended,
}

/// Where one connection's handshake stands.
pub struct Handshake {
    stage: Mutex<Stage>,
    changed: Condvar,
}

impl Default for Handshake {
    fn default() -> Self {
        Handshake {
            stage: Mutex::new(Stage::Waiting),
            changed: Condvar::new(),
        }
    }
}

impl Handshake {
    /// The frontend asked for the features: the handshake is under way.
    pub fn greeted(&self) {
        self.advance(Stage::Greeted);
    }

    /// The connection is over, whatever its stage.
    pub fn ended(&self) {
        self.advance(Stage::Ended);
    }

    fn advance(&self, to: Stage) {
        let mut stage = self.stage.locked();
        if *stage == Stage::Waiting {
            *stage = to;
            self.changed.notify_all();
        }
    }

    /// Waits up to `timeout` for the greeting or the end of the connection; false if
    /// neither came (the frontend must be cut off).
    pub fn wait(&self, timeout: Duration) -> bool {
        let stage = self.stage.locked();
        let (stage, _) = self
            .changed
            .wait_timeout_while(stage, timeout, |s| *s == Stage::Waiting)
            .unwrap_or_else(|e| e.into_inner());
        *stage != Stage::Waiting
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_greeting_or_the_end_releases_the_wait_and_silence_does_not() {
        let silent = Handshake::default();
        assert!(!silent.wait(Duration::from_millis(1)));

        for end in [Handshake::greeted, Handshake::ended] {
            let h = Arc::new(Handshake::default());
            let waiter = {
                let h = h.clone();
                std::thread::spawn(move || h.wait(Duration::from_secs(60)))
            };
            end(&h);
            assert!(waiter.join().unwrap());
        }
        // Ending after the greeting changes nothing.
        let h = Handshake::default();
        h.greeted();
        h.ended();
        assert!(h.wait(Duration::ZERO));
    }
}
