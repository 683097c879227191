//! Drives tenants against volume sockets with the `blkio` crate (a real vhost-user-blk
//! frontend, no VM) and measures what each one gets.

use super::lane::{drive, Lane};
use super::progress::{self, Live, ProgressMode};
use super::result::{sum_lanes, TenantResult};
use super::spec::TenantSpec;
use blkio::{Blkio, Blkioq, MemoryRegion};
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc, Barrier};
use std::time::Instant;

/// Runs every tenant at once (each in its own thread, started together) and returns their
/// results in order.
pub fn run(tenants: &[TenantSpec]) -> Result<Vec<TenantResult>, String> {
    run_with(tenants, ProgressMode::Off)
}

/// Sends on drop, so the progress reporter learns that a tenant thread ended even if it
/// failed or panicked.
struct DoneGuard(mpsc::Sender<()>);

impl Drop for DoneGuard {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// Like [`run`], with a progress line on stderr while the tenants run.
pub fn run_with(
    tenants: &[TenantSpec],
    progress: ProgressMode,
) -> Result<Vec<TenantResult>, String> {
    // The calling thread joins the barrier too: the run's clock starts when every tenant
    // is connected.
    let barrier = Arc::new(Barrier::new(tenants.len() + 1));
    let live = Arc::new(Live::new(tenants.len()));
    let (done_tx, done_rx) = mpsc::channel();
    let handles: Vec<_> = tenants
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, t)| {
            let barrier = barrier.clone();
            let live = live.clone();
            let done = DoneGuard(done_tx.clone());
            std::thread::spawn(move || {
                let _done = done;
                run_tenant(&t, i, &barrier, &live)
            })
        })
        .collect();
    drop(done_tx);
    barrier.wait();
    progress::report(progress, tenants, &live, &done_rx);
    handles
        .into_iter()
        .map(|h| h.join().map_err(|_| "tenant thread panicked".to_string())?)
        .collect()
}

/// A connected and started client with its I/O buffers.
struct Conn {
    // Dropped before `blkio` (fields drop in order).
    queues: Vec<Blkioq>,
    blkio: Blkio,
    region: MemoryRegion,
    blocks: u64,
}

impl Conn {
    fn open(t: &TenantSpec) -> Result<Conn, String> {
        let what = |e: blkio::Error| format!("tenant {} ({}): {e}", t.name, t.socket);
        let mut b = Blkio::new("virtio-blk-vhost-user").map_err(what)?;
        b.set_str("path", &t.socket).map_err(what)?;
        b.connect().map_err(what)?;
        let capacity = b.get_u64("capacity").map_err(what)?;
        // Polled queues take no notifications: the client spins on their used rings.
        let (notified, polled) = if t.poll { (0, t.queues) } else { (t.queues, 0) };
        b.set_i32("num-queues", notified as i32).map_err(what)?;
        b.set_i32("num-poll-queues", polled as i32).map_err(what)?;
        let started = b.start().map_err(what)?;
        let align = b.get_u64("mem-region-alignment").map_err(what)? as usize;
        let len = (t.iodepth * t.bs as usize).div_ceil(align) * align;
        let region = b.alloc_mem_region(len).map_err(what)?;
        if let Err(e) = b.map_mem_region(&region) {
            b.free_mem_region(&region);
            return Err(what(e));
        }
        let conn = Conn {
            queues: if t.poll {
                started.poll_queues
            } else {
                started.queues
            },
            blkio: b,
            region,
            blocks: capacity / t.bs,
        };
        if conn.blocks == 0 {
            return Err(format!(
                "tenant {}: bs {} exceeds the volume capacity {capacity}",
                t.name, t.bs
            ));
        }
        Ok(conn)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.blkio.unmap_mem_region(&self.region);
        self.blkio.free_mem_region(&self.region);
    }
}

fn run_tenant(
    t: &TenantSpec,
    index: usize,
    start: &Barrier,
    live: &Live,
) -> Result<TenantResult, String> {
    // Reach the barrier whatever happens, or the other tenants would wait forever.
    let conn = Conn::open(t);
    start.wait();
    let run_start = Instant::now();
    let mut conn = conn?;
    std::thread::sleep(t.delay);
    live.set_state(index, progress::RUNNING);
    let result = if t.queue_threads && conn.queues.len() > 1 {
        drive_per_queue(t, &mut conn, run_start, &live.ios[index])
    } else {
        let lane = Lane {
            queues: &mut conn.queues,
            base: conn.region.addr,
            blocks: conn.blocks,
            seed: 0,
        };
        drive(t, lane, run_start, &live.ios[index]).map(|(result, _)| result)
    };
    live.set_state(index, progress::DONE);
    result
}

/// `queue_threads`: one thread per queue, each driving `iodepth / queues` requests (and
/// its share of `rate_iops`) on its queue; their results are summed.
fn drive_per_queue(
    t: &TenantSpec,
    conn: &mut Conn,
    run_start: Instant,
    live_ios: &AtomicU64,
) -> Result<TenantResult, String> {
    let nq = conn.queues.len();
    let lane_depth = t.iodepth / nq;
    let shares: Vec<TenantSpec> = (0..nq)
        .map(|lane| TenantSpec {
            iodepth: lane_depth,
            queues: 1,
            rate_iops: t.rate_iops.map(|r| lane_rate(r, nq, lane)),
            ..t.clone()
        })
        .collect();
    let (base, blocks) = (conn.region.addr, conn.blocks);
    let slot_bytes = lane_depth * t.bs as usize;
    let parts = std::thread::scope(|scope| {
        let threads: Vec<_> = conn
            .queues
            .iter_mut()
            .zip(&shares)
            .enumerate()
            .map(|(i, (queue, share))| {
                let lane = Lane {
                    queues: std::slice::from_mut(queue),
                    base: base + i * slot_bytes,
                    blocks,
                    seed: i as u64 + 1,
                };
                scope.spawn(move || drive(share, lane, run_start, live_ios))
            })
            .collect();
        threads
            .into_iter()
            .map(|h| h.join().map_err(|_| "queue thread panicked".to_string())?)
            .collect::<Result<Vec<_>, String>>()
    })?;
    Ok(sum_lanes(parts))
}

/// Lane `lane`'s part of `rate` requests/s over `lanes` lanes: the parts add up to `rate`
/// (the first `rate % lanes` lanes take one more), and none is zero, which would mean
/// unpaced.
fn lane_rate(rate: u32, lanes: usize, lane: usize) -> u32 {
    let lanes = lanes as u32;
    let extra = u32::from((lane as u32) < rate % lanes);
    (rate / lanes + extra).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_rates_add_up_to_the_tenants_rate() {
        for (rate, lanes) in [(40_000, 2), (1001, 2), (10, 3), (7, 4), (1, 2)] {
            let parts: Vec<u32> = (0..lanes).map(|l| lane_rate(rate, lanes, l)).collect();
            assert!(parts.iter().all(|&p| p >= 1), "{rate}/{lanes}: {parts:?}");
            assert!(parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1);
            // Only a rate below the lane count is rounded up (a lane paced at zero would
            // run unpaced).
            let expected = rate.max(lanes as u32);
            assert_eq!(
                parts.iter().sum::<u32>(),
                expected,
                "{rate}/{lanes}: {parts:?}"
            );
        }
    }
}
