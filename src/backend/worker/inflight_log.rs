//! The worker's side of inflight tracking ([`crate::backend::virtio::inflight_log`]): a queue's
//! pops are marked in its log before their requests are submitted, in pop order; a batch
//! of used entries is linked before the used index is stored and cleared after; the
//! requests a previous run left in flight are parsed again before anything new is popped.

use crate::backend::virtio::inflight_log::QueueLog;
use crate::emulated::crash::{self, CrashPoint};

/// The logs of a worker's queues (by its own queue numbers), and what each has to
/// resubmit.
#[derive(Debug, Default)]
pub(super) struct QueueLogs {
    queues: Vec<Tracked>,
}

#[derive(Debug, Default)]
struct Tracked {
    log: Option<QueueLog>,
    resubmit: Vec<u16>,
}

impl QueueLogs {
    /// Queue `local` starts with `log` (None: untracked) and `resubmit` to parse first.
    pub(super) fn start(&mut self, local: u16, log: Option<QueueLog>, resubmit: Vec<u16>) {
        let i = usize::from(local);
        if self.queues.len() <= i {
            self.queues.resize_with(i + 1, Tracked::default);
        }
        self.queues[i] = Tracked { log, resubmit };
    }

    /// Queue `local` was stopped with everything it popped returned: its log is
    /// forgotten, so that the queue may restart on new rings.
    pub(super) fn stopped(&mut self, local: u16) {
        if let Some(log) = self.log(local) {
            log.forget();
        }
    }

    fn log(&mut self, local: u16) -> Option<&mut QueueLog> {
        self.queues
            .get_mut(usize::from(local))
            .and_then(|q| q.log.as_mut())
    }

    /// Marks a head popped from queue `local`.
    #[inline]
    pub(super) fn popped(&mut self, local: u16, head: u16) {
        if let Some(log) = self.log(local) {
            log.mark_popped(head);
        }
    }

    /// Takes the heads queue `local` has to resubmit (already marked), oldest first.
    pub(super) fn take_resubmit(&mut self, local: u16) -> Vec<u16> {
        self.queues
            .get_mut(usize::from(local))
            .map(|q| std::mem::take(&mut q.resubmit))
            .unwrap_or_default()
    }

    /// Before queue `local`'s used index is stored: the batch's heads are linked.
    pub(super) fn publishing(&mut self, local: u16, heads: &[u16]) {
        if let Some(log) = self.log(local) {
            log.link_batch(heads.iter().copied());
        }
    }

    /// After queue `local`'s used index was stored as `used_idx`: the batch is cleared.
    pub(super) fn published(&mut self, local: u16, heads: &[u16], used_idx: u16) {
        if let Some(log) = self.log(local) {
            let (first, rest) = heads.split_at(heads.len() / 2);
            log.clear_heads(first.iter().copied());
            crash::reached(CrashPoint::MidClear);
            log.clear_batch(rest.iter().copied(), used_idx);
        }
    }
}
