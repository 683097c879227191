//! What a frontend may map: the checks on its memory table.
//!
//! The vhost-user-backend crate maps every region a frontend declares (SET_MEM_TABLE,
//! ADD_MEM_REG) and only then hands the table to the backend. A hostile frontend could
//! declare a region larger than the file behind it, so that the first access past the
//! file's end kills the whole daemon with SIGBUS; or add regions without end, until the
//! process runs out of descriptors and address space and another volume's frontend
//! cannot connect. [`check`] refuses such a table; the backend then unmaps it at once
//! and the frontend's request fails, on its connection only.
//!
//! A frontend that shrinks its memory file *after* the check (ftruncate) makes a later
//! access fault; [`crate::backend::guest_memory::sigbus`] confines that to its own regions.
//!
//! [`dirty_log`]: the migration log over guest memory; [`sigbus`]: surviving a mapping
//! whose file a frontend shrinks.

pub(crate) mod dirty_log;
pub(crate) mod sigbus;

use crate::lock::RwLocked;
use std::sync::{Arc, RwLock};

use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryRegion};

/// Guest memory, with the migration log's dirty bitmap per region (design §8.8).
pub type Mem = vm_memory::GuestMemoryMmap<crate::backend::guest_memory::dirty_log::DirtyLog>;

/// Regions per connection: the slots the vhost-user-backend crate advertises
/// (GET_MAX_MEM_SLOTS).
pub const MAX_REGIONS: usize = 509;
/// Guest memory mapped per connection, all regions together: 1 TiB.
pub const MAX_MAPPED_BYTES: u64 = 1 << 40;

/// Whether the frontend's memory table may be used, or why not.
pub fn check(mem: &Mem) -> Result<(), String> {
    if mem.num_regions() > MAX_REGIONS {
        return Err(format!(
            "{} memory regions; at most {MAX_REGIONS} are allowed",
            mem.num_regions()
        ));
    }
    let mut total = 0u64;
    for region in mem.iter() {
        let (gpa, len) = (region.start_addr().0, region.len());
        total = total.saturating_add(len);
        if total > MAX_MAPPED_BYTES {
            return Err(format!(
                "more than {MAX_MAPPED_BYTES} bytes of guest memory (region at {gpa:#x})"
            ));
        }
        let Some(fo) = region.file_offset() else {
            continue;
        };
        let file_len = fo
            .file()
            .metadata()
            .map_err(|e| format!("region at {gpa:#x}: cannot stat its file: {e}"))?
            .len();
        let end = fo.start().saturating_add(len);
        if end > file_len {
            return Err(format!(
                "region at {gpa:#x}: {len} bytes at offset {} of a {file_len}-byte file \
                 (access past its end would fault)",
                fo.start()
            ));
        }
    }
    Ok(())
}

/// The memory table a connection's frontend gave last, shared by its backend (which
/// replaces it) and its workers (which read it for every batch they pop or complete).
#[derive(Clone)]
pub struct CurrentMemory(Arc<RwLock<GuestMemoryAtomic<Mem>>>);

impl Default for CurrentMemory {
    /// No memory: nothing is popped until the frontend sends a table.
    fn default() -> Self {
        CurrentMemory(Arc::new(RwLock::new(GuestMemoryAtomic::new(Mem::new()))))
    }
}

impl CurrentMemory {
    pub fn load(&self) -> Arc<Mem> {
        let atomic = self.0.read_locked();
        atomic.memory().into_inner()
    }

    pub fn replace(&self, table: GuestMemoryAtomic<Mem>) {
        *self.0.write_locked() = table;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::io::FromRawFd;
    use vm_memory::{FileOffset, GuestAddress};

    fn memfd(len: u64) -> std::fs::File {
        // SAFETY: memfd_create with a NUL-terminated name; the fd is owned by the File.
        let fd = unsafe { libc::memfd_create(c"guest-memory-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: a fresh descriptor nothing else owns.
        let f = unsafe { std::fs::File::from_raw_fd(fd) };
        f.set_len(len).unwrap();
        f
    }

    fn table(regions: &[(u64, usize, u64)]) -> Mem {
        let ranges: Vec<_> = regions
            .iter()
            .map(|&(gpa, len, file_len)| {
                (
                    GuestAddress(gpa),
                    len,
                    Some(FileOffset::new(memfd(file_len), 0)),
                )
            })
            .collect();
        Mem::from_ranges_with_files(&ranges).unwrap()
    }

    #[test]
    fn a_region_inside_its_file_passes_and_one_past_its_end_does_not() {
        check(&table(&[(0, 1 << 20, 1 << 20), (1 << 30, 4096, 8192)])).unwrap();
        let e = check(&table(&[
            (0, 1 << 20, 1 << 20),
            (1 << 30, 2 << 20, 1 << 20),
        ]))
        .unwrap_err();
        assert!(
            e.contains("region at 0x40000000") && e.contains("1048576-byte file"),
            "{e}"
        );
    }

    #[test]
    fn too_many_regions_are_refused() {
        let regions: Vec<_> = (0..MAX_REGIONS as u64 + 1)
            .map(|i| (i << 20, 4096, 4096))
            .collect();
        let e = check(&table(&regions)).unwrap_err();
        assert!(e.contains("510 memory regions"), "{e}");
        check(&table(&regions[..MAX_REGIONS])).unwrap();
    }
}
