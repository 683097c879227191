//! A volume with several worker threads (`workers`): each serves its own queues, and the
//! data written through one queue reads back through the other; `cpu_affinity` pins them.

use crate::client::{pattern, Client, Op};
use crate::daemon::{config, volume, DaemonProcess};
use crate::raw_frontend::*;
use std::collections::HashMap;

/// A disk whose reads take 25 ms each, one at a time: requests stay in flight while a
/// test stops their ring.
const SLOW_DISK: &str = r#"
kind = "emulated"
direct = false
[device.emulated]
rbps = 1000000000
rseqiops = 40
rrandiops = 40
wbps = 1000000000
wseqiops = 40
wrandiops = 40
channels = 1
[device.qos]
enable = false
"#;

/// How long each of the daemon's vring worker threads has run, ns, by thread id.
fn worker_run_ns(pid: u32) -> HashMap<u32, u64> {
    let mut run = HashMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim() != "vring_worker" {
            continue;
        }
        let schedstat = std::fs::read_to_string(path.join("schedstat")).unwrap_or_default();
        let ns = schedstat
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok());
        let tid = task.file_name().to_string_lossy().parse().unwrap();
        run.insert(tid, ns.unwrap_or(0));
    }
    run
}

/// Reads 4 KiB 4,000 times on `queue`, 16 at a time, and returns the worker thread that
/// ran the most meanwhile, with its share of all the workers' run time.
fn busiest_worker(d: &DaemonProcess, client: &mut Client, queue: usize) -> (u32, f64) {
    let before = worker_run_ns(d.pid());
    for batch in 0..250u64 {
        for k in 0..16u64 {
            let off = (batch * 16 + k) % 2048 * 4096;
            let buf = k as usize * 4096;
            client.submit(
                queue,
                Op::Read {
                    off,
                    len: 4096,
                    buf,
                },
                k as usize,
            );
        }
        let done = client.wait(queue, 16);
        assert!(
            done.iter().all(|&(_, ret)| ret == 0),
            "reads on queue {queue}: {done:?}"
        );
    }
    let after = worker_run_ns(d.pid());
    let ran: Vec<(u32, u64)> = after
        .iter()
        .map(|(tid, ns)| (*tid, ns - before.get(tid).copied().unwrap_or(0)))
        .collect();
    let total: u64 = ran.iter().map(|(_, ns)| ns).sum();
    let (tid, most) = ran.into_iter().max_by_key(|(_, ns)| *ns).unwrap();
    (tid, most as f64 / total.max(1) as f64)
}

#[test]
fn two_workers_serve_a_two_queue_volume_and_one_worker_serves_both_queues_alone() {
    let d = DaemonProcess::start(&config(
        "",
        &(volume("two", 0, 8, "num_queues = 2\nworkers = 2")
            + &volume("one", 8, 8, "num_queues = 2")),
    ));
    let mut two = Client::connect(&d.socket("two"), 2, 1 << 20);
    // Written through queue 0, read back through queue 1, and the other way round.
    for (write_q, read_q, seed) in [(0, 1, 1u8), (1, 0, 2)] {
        let off = u64::from(seed) << 20;
        let data = pattern(off, 64 << 10, seed);
        two.buf()[..data.len()].copy_from_slice(&data);
        let len = data.len();
        two.submit(write_q, Op::Write { off, len, buf: 0 }, 0);
        assert_eq!(two.wait(write_q, 1)[0].1, 0);
        two.submit(read_q, Op::Read { off, len, buf: len }, 0);
        assert_eq!(two.wait(read_q, 1)[0].1, 0);
        assert!(
            two.buf()[len..2 * len] == data[..],
            "queue {read_q} reads what queue {write_q} wrote"
        );
    }
    let (q0, share0) = busiest_worker(&d, &mut two, 0);
    let (q1, share1) = busiest_worker(&d, &mut two, 1);
    assert_ne!(q0, q1, "queues 0 and 1 are served by different threads");
    assert!(
        share0 > 0.8 && share1 > 0.8,
        "each queue's thread did the work: {share0:.2}, {share1:.2}"
    );

    let mut one = Client::connect(&d.socket("one"), 2, 1 << 20);
    let (q0, _) = busiest_worker(&d, &mut one, 0);
    let (q1, _) = busiest_worker(&d, &mut one, 1);
    assert_eq!(q0, q1, "with one worker, one thread serves both queues");
}

/// The CPUs thread `tid` of process `pid` may run on, as /proc lists them (`0-1`).
fn cpus_allowed(pid: u32, tid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn cpu_affinity_pins_each_worker_to_its_cpu_and_leaves_other_volumes_alone() {
    let allowed = vhost_iocost::cpu_affinity::allowed().unwrap();
    if allowed.len() < 2 {
        eprintln!("skipped: one CPU cannot tell a pinned worker from a free one");
        return;
    }
    // Worker 0 on the last CPU this test may use, worker 1 on the first.
    let (cpu0, cpu1) = (*allowed.last().unwrap(), allowed[0]);
    let d = DaemonProcess::start(&config(
        "",
        &(volume(
            "pinned",
            0,
            8,
            &format!("num_queues = 2\nworkers = 2\ncpu_affinity = [{cpu0}, {cpu1}]"),
        ) + &volume("free", 8, 8, "")),
    ));
    let mut pinned = Client::connect(&d.socket("pinned"), 2, 1 << 20);
    let (q0, _) = busiest_worker(&d, &mut pinned, 0);
    let (q1, _) = busiest_worker(&d, &mut pinned, 1);
    assert_eq!(
        cpus_allowed(d.pid(), q0),
        cpu0.to_string(),
        "queue 0's worker"
    );
    assert_eq!(
        cpus_allowed(d.pid(), q1),
        cpu1.to_string(),
        "queue 1's worker"
    );

    let mut free = Client::connect(&d.socket("free"), 1, 1 << 20);
    let (q, _) = busiest_worker(&d, &mut free, 0);
    assert_eq!(
        cpus_allowed(d.pid(), q),
        vhost_iocost::cpu_affinity::list(&allowed),
        "a volume without cpu_affinity keeps the daemon's CPUs"
    );
}

#[test]
fn a_volume_pinned_to_a_cpu_the_machine_lacks_starts_unpinned_and_says_so() {
    let d = DaemonProcess::start(&config(
        "",
        &(volume("gone", 0, 8, "cpu_affinity = [1023]") + &volume("other", 8, 8, "")),
    ));
    assert!(
        d.log_text()
            .contains("cpu_affinity: CPU 1023 is not one the daemon may run on"),
        "{}",
        d.log_text()
    );
    let mut gone = Client::connect(&d.socket("gone"), 1, 1 << 20);
    let (worker, _) = busiest_worker(&d, &mut gone, 0);
    assert_eq!(
        cpus_allowed(d.pid(), worker),
        vhost_iocost::cpu_affinity::list(&vhost_iocost::cpu_affinity::allowed().unwrap()),
        "its worker runs where the scheduler puts it"
    );
    assert!(
        d.log_text().contains("cannot pin the worker"),
        "{}",
        d.log_text()
    );
    let mut other = Client::connect(&d.socket("other"), 1, 1 << 20);
    busiest_worker(&d, &mut other, 0);
}

#[test]
fn stopping_the_second_workers_queue_answers_its_requests_first_and_frees_the_rings() {
    let d = DaemonProcess::start(&config(
        SLOW_DISK,
        &volume("v", 0, 8, "num_queues = 2\nworkers = 2"),
    ));
    let opts = Options {
        num_queues: 2,
        event_idx: true,
        ..Options::default()
    };
    let mut f = RawFrontend::connect(&d.socket("v"), opts);
    let mut statuses = [Vec::new(), Vec::new()];
    for (q, status) in statuses.iter_mut().enumerate() {
        for k in 0..4u64 {
            let (chain, _) = f.rw_chain(T_IN, (q as u64 * 4 + k) * 8, 4096);
            status.push(chain[2].addr);
            f.submit(q, &chain);
        }
        f.kick(q);
    }
    assert!(
        f.wait_consumed(1, 4),
        "the second worker popped queue 1's chains"
    );
    assert!(
        f.used_idx(1) < 4,
        "some of queue 1's reads are still in flight"
    );
    // GET_VRING_BASE(1) goes to the worker serving queue 1, as its first vring.
    assert_eq!(f.get_vring_base(1), 4);
    assert_eq!(
        f.used_idx(1),
        4,
        "queue 1's reads were answered before the reply"
    );
    assert_eq!(f.get_vring_base(0), 4);
    assert_eq!(f.used_idx(0), 4, "queue 0's too");
    for (q, status) in statuses.iter().enumerate() {
        for (k, addr) in status.iter().enumerate() {
            assert_eq!(f.read(*addr, 1), [S_OK as u8], "queue {q} read {k}");
        }
    }
    // Both rings stopped: the connection gave the lease back, and a frontend on the
    // hand-over socket is served on either queue without waiting.
    let mut g = RawFrontend::connect(&(d.socket("v") + ".handover"), opts);
    for q in 0..2 {
        let (status, _) = g.read_sectors(q, 0, 4096);
        assert_eq!(status, S_OK as u8, "queue {q} through the hand-over socket");
    }
    assert!(!d.log_text().contains("this one waits"), "{}", d.log_text());
}
