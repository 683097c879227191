//! The data path's clock: CLOCK_MONOTONIC in ns, read directly (the io_uring deadlines of
//! [`crate::backend::io::engine::Engine::push_until`] are on it, and so are the stage traces).

/// CLOCK_MONOTONIC now, ns. Inlined: the data path reads it per batch from other modules.
#[inline]
pub fn monotonic_now_ns() -> u64 {
    // SAFETY: timespec is plain data; clock_gettime writes it through a valid pointer.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
