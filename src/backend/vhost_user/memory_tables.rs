//! The guest memory tables of one connection: accepted or refused as they arrive,
//! guarded against SIGBUS while anything can still use them (a frontend may shrink the
//! file under a mapped region), and carrying the migration log over to the next table.

use crate::lock::Locked;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryRegion};

use crate::backend::guest_memory::{CurrentMemory, Mem};
use crate::logging::LogLimiter;

/// A memory table's regions registered with the SIGBUS handler, until the next table
/// finds that nothing can use it any more (`MemoryTables::guard`).
struct GuardedTable {
    table: std::sync::Weak<Mem>,
    registration: crate::backend::guest_memory::sigbus::Registration,
}

/// The memory tables one connection was given.
pub(super) struct MemoryTables {
    /// Refused memory tables are logged at most once a second.
    refused: Mutex<LogLimiter>,
    /// The memory tables whose regions are guarded against SIGBUS ([`crate::backend::guest_memory::sigbus`]):
    /// the accepted one, and older ones still held by requests in flight.
    guarded: Mutex<Vec<GuardedTable>>,
    /// The last memory table accepted: its regions hold the migration log, if one was
    /// set, for the next table's regions ([`crate::backend::guest_memory::dirty_log::carry_over`]).
    seen_mem: Mutex<Option<Arc<Mem>>>,
}

impl Default for MemoryTables {
    fn default() -> Self {
        MemoryTables {
            refused: Mutex::new(LogLimiter::new(std::time::Duration::from_secs(1))),
            guarded: Mutex::default(),
            seen_mem: Mutex::default(),
        }
    }
}

impl MemoryTables {
    /// A new memory table (SET_MEM_TABLE, ADD_MEM_REG, REM_MEM_REG), already mapped by
    /// the vhost-user-backend crate. One the frontend may not use
    /// ([`crate::backend::guest_memory::check`]) is unmapped at once and the request fails; the
    /// volume's queues then see no memory until a valid table arrives.
    /// `current`: what the volume's workers load; `volume`: its name for the log.
    pub(super) fn accept(
        &self,
        mem: GuestMemoryAtomic<Mem>,
        current: &CurrentMemory,
        volume: &str,
    ) -> io::Result<()> {
        // The crate has published the table already, so a worker may be using it even if
        // it is refused below: guard it first.
        let table = mem.memory().into_inner();
        self.guard(&table);
        if let Err(e) = crate::backend::guest_memory::check(&table) {
            mem.lock()
                .unwrap_or_else(|e| e.into_inner())
                .replace(Mem::new());
            let log = self.refused.locked().check();
            if let Some(suppressed) = log {
                tracing::warn!(volume, suppressed, "frontend memory table refused: {e}");
            }
            current.replace(mem);
            return Err(io::Error::other(e));
        }
        {
            // The table this replaces: the crate has swapped it out of `mem` already.
            let new = mem.memory().into_inner();
            let mut seen = self.seen_mem.locked();
            if let Some(old) = seen.as_ref() {
                let (old, new): (Vec<_>, Vec<_>) = (old.iter().collect(), new.iter().collect());
                if let Err(e) = crate::backend::guest_memory::dirty_log::carry_over(&old, &new) {
                    tracing::warn!(volume, "the migration log does not cover the new memory table ({e}): its writes there are not logged until the next SET_LOG_BASE");
                }
            }
            *seen = Some(new);
        }
        // The table this replaced may be held by nothing now: its regions may be unmapped
        // and their addresses reused.
        drop(self.prune_guarded());
        current.replace(mem);
        Ok(())
    }

    /// Some guest region or migration log faulted (its file shrank under the mapping):
    /// say so if it was volume `volume`'s.
    pub(super) fn report_fault(&self, volume: &str) {
        let memory = self
            .guarded
            .locked()
            .iter()
            .fold(false, |any, t| t.registration.faulted() | any);
        let log = self.seen_mem.locked().as_ref().is_some_and(|m| {
            m.iter()
                .fold(false, |any, r| (**r).bitmap().faulted() | any)
        });
        let what = match (memory, log) {
            (true, false) => "its guest memory file under a mapped region",
            (false, true) => "its migration log under the mapping",
            (true, true) => "its guest memory file under a mapped region, and its migration log",
            (false, false) => return,
        };
        if self.refused.locked().check().is_some() {
            tracing::warn!(
                volume,
                "the frontend shrank {what}: what lies past the file's end now reads as \
                 zeroes for this daemon; the VMM is broken or hostile"
            );
        }
    }

    /// Registers `table`'s regions with the SIGBUS handler, and unregisters the tables
    /// nothing can use any more. A request popped with an older table writes its status
    /// byte (and a bounced read) through it, though the frontend may have removed and
    /// shrunk its regions since: a table stays guarded while anything but `seen_mem`
    /// holds it (once the crate has published a newer one, nothing can load it again).
    fn guard(&self, table: &Arc<Mem>) {
        let mut guarded = self.prune_guarded();
        let ranges = table
            .iter()
            .map(|r| (r.as_ptr() as usize, r.len() as usize));
        guarded.push(GuardedTable {
            table: Arc::downgrade(table),
            registration: crate::backend::guest_memory::sigbus::Registration::new(ranges),
        });
    }

    /// Unregisters the tables nothing can use any more ([`MemoryTables::guard`]).
    fn prune_guarded(&self) -> MutexGuard<'_, Vec<GuardedTable>> {
        let last_accepted = self.seen_mem.locked().as_ref().map(Arc::as_ptr);
        let mut guarded = self.guarded.locked();
        guarded.retain(|t| {
            let ours = usize::from(Some(t.table.as_ptr()) == last_accepted);
            t.table.strong_count() > ours
        });
        guarded
    }
}
