//! A kill at every point of a scripted run: pops, out-of-order publications, a head the
//! guest reuses. Each step is one store, or one head of a multi-head store loop (a kill
//! inside a head's stores leaves the log as if that head's step had not started or had
//! finished; each leaves it consistent). After every prefix of the steps, recovery must
//! resubmit exactly the requests that were submitted and not seen by the guest, in pop
//! order, and resume popping right after them.

use super::*;

const SIZE: u16 = 8;

/// What the guest and the device did: used entries the guest can see, and each pop.
#[derive(Default)]
struct World {
    used: Vec<u16>,
    used_idx: u16,
    /// (head, marked), in pop order.
    pops: Vec<(u16, bool)>,
    /// Heads whose used entries are published, per pop index.
    published: Vec<usize>,
}

enum Step {
    Pop(u16),
    Publish(Vec<u16>),
}

fn script() -> Vec<Step> {
    use Step::*;
    vec![
        Pop(3),
        Pop(1),
        Pop(6),
        Pop(0),
        Publish(vec![1, 6]),
        Pop(4),
        Publish(vec![3]),
        Pop(1), // the guest reused 1 once it saw it completed
        Pop(5),
        Publish(vec![0, 1, 4]),
        Pop(2),
    ]
}

/// Runs the script on a fresh log, stopping after `budget` stores; returns the world.
fn run(log: &mut QueueLog, budget: usize) -> World {
    let mut w = World::default();
    let mut left = budget;
    let mut take = || {
        if left == 0 {
            return false;
        }
        left -= 1;
        true
    };
    for step in script() {
        match step {
            Step::Pop(head) => {
                if !take() {
                    return w;
                }
                log.mark_popped(head);
                w.pops.push((head, true));
            }
            Step::Publish(heads) => {
                let pop_of = |w: &World, h: u16| {
                    (0..w.pops.len())
                        .rev()
                        .find(|&i| w.pops[i].0 == h && !w.published.contains(&i))
                        .unwrap()
                };
                // C3, head by head.
                for (i, &h) in heads.iter().enumerate() {
                    if !take() {
                        return w;
                    }
                    log.link_batch(heads[i..=i].iter().copied());
                    let _ = h;
                }
                // C4: the guest sees the batch.
                if !take() {
                    return w;
                }
                for &h in &heads {
                    let p = pop_of(&w, h);
                    w.published.push(p);
                    w.used.push(h);
                }
                w.used_idx = w.used_idx.wrapping_add(heads.len() as u16);
                // C5 head by head, then C6.
                for &h in &heads {
                    if !take() {
                        return w;
                    }
                    log.inflight(h).store(0, Ordering::Release);
                }
                if !take() {
                    return w;
                }
                log.clear_batch(std::iter::empty(), w.used_idx);
            }
        }
    }
    w
}

fn total_steps() -> usize {
    script()
        .iter()
        .map(|s| match s {
            Step::Pop(_) => 1,
            Step::Publish(h) => 2 * h.len() + 2,
        })
        .sum()
}

/// A log over `mem` (which the caller keeps alive while the log lives).
fn log_over(mem: &mut [u64]) -> QueueLog {
    // SAFETY: `mem` is the stride's bytes, 8-aligned, and outlives the log in each test.
    unsafe { QueueLog::new(mem.as_mut_ptr().cast(), SIZE, std::sync::Arc::new(())) }
}

fn fresh_log(mem: &mut Vec<u64>) -> QueueLog {
    *mem = vec![0u64; queue_stride(SIZE) / 8];
    let mut log = log_over(mem);
    log.recover(0, SIZE, 0).unwrap();
    log
}

#[test]
fn a_kill_at_any_store_resubmits_exactly_the_unseen_requests_in_order() {
    for budget in 0..=total_steps() {
        let mut mem = Vec::new();
        let mut log = fresh_log(&mut mem);
        let w = run(&mut log, budget);
        // The next process maps the same memory.
        let mut next = log_over(&mut mem);
        let avail_now = w.pops.len() as u16 + 2; // the guest posted more since
        let r = next.recover(w.used_idx, SIZE, avail_now).unwrap();
        let expected: Vec<u16> = (0..w.pops.len())
            .filter(|i| w.pops[*i].1 && !w.published.contains(i))
            .map(|i| w.pops[i].0)
            .collect();
        assert_eq!(r.resubmit, expected, "kill after {budget} stores");
        assert_eq!(
            r.next_avail,
            w.pops.len() as u16,
            "kill after {budget} stores"
        );
        // A kill during recovery changes nothing: recovering again agrees.
        let mut again = log_over(&mut mem);
        assert_eq!(again.recover(w.used_idx, SIZE, avail_now).unwrap(), r);
        // New pops continue the order after the resubmitted ones.
        if let Some(&last) = r.resubmit.last() {
            assert_eq!(
                again.counter,
                again.counter_of(last).load(Ordering::Relaxed) + 1
            );
        }
    }
}

#[test]
fn an_inconsistent_log_is_refused() {
    let mut mem = Vec::new();
    let mut log = fresh_log(&mut mem);
    log.mark_popped(2);
    // The used index moved by more than the ring holds.
    assert!(log.recover(100, SIZE, 100).is_err());
    // The batch list names a descriptor beyond the ring.
    log.last_batch_head().store(200, Ordering::Relaxed);
    assert!(log.recover(1, SIZE, 3).is_err());
    // An unknown version.
    log.version().store(7, Ordering::Relaxed);
    assert!(log.recover(0, SIZE, 1).unwrap_err().contains("version 7"));
    // A ring larger than the log.
    assert!(log.recover(0, SIZE * 2, 0).is_err());
}

#[test]
fn more_in_flight_than_the_guest_published_is_refused() {
    let mut mem = Vec::new();
    let mut log = fresh_log(&mut mem);
    for h in 0..3 {
        log.mark_popped(h);
    }
    // The guest's avail index says only one request was ever posted.
    assert!(log.recover(0, SIZE, 1).is_err());
    assert_eq!(log.recover(0, SIZE, 3).unwrap().resubmit, vec![0, 1, 2]);
}

#[test]
fn the_stride_matches_libvhost_user() {
    // ALIGN_UP(16 · queue_size + 2, 64) in libvhost-user.
    for size in [1u16, 2, 3, 128, 256, 1024] {
        let lvu = (16 * usize::from(size) + 2).next_multiple_of(64);
        assert_eq!(queue_stride(size), lvu, "{size}");
    }
}
