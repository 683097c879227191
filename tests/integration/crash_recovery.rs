//! A daemon killed with requests in flight, and the frontend reconnecting with its
//! inflight region (`VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD`): every request the guest
//! submitted is answered exactly once, none that was answered before the kill is redone,
//! and the data is where the guest wrote it. The frontend is cloud-hypervisor's, replayed
//! (`cloud_hypervisor.rs`): it reconnects by itself after the backend goes away and
//! restarts its rings at the avail index, which the daemon overrides from the log.

use std::collections::BTreeMap;
use std::time::Duration;

use vhost::vhost_user::message::VhostUserProtocolFeatures;

use crate::client::pattern;
use crate::cloud_hypervisor::{EventfdOrder, Ram, Vm};
use crate::daemon::{volume, DaemonProcess};
use crate::devices::stalled_read;
use crate::raw_frontend::{header, STATUS_UNSET, S_OK, T_IN, T_OUT};
use crate::virtqueue::Desc;

/// The emulated slow device, one volume "v" of 16 MiB at 8 MiB, and `extra` under
/// `[device.emulated]` (faults, a crash point).
fn config(extra: &str) -> String {
    format!(
        "[device]\npath = \"disk.img\"\ncreate_size = \"64MiB\"\n{}{extra}\n{}",
        crate::devices::SLOW_DEVICE,
        volume("v", 8, 16, "")
    )
}

/// A request on the guest's ring, and what it should find.
struct Sent {
    status: u64,
    /// A read: where its data lands and what it must be.
    read: Option<(u64, Vec<u8>)>,
}

/// Submits a 4 KiB write of `data` at `sector` (no kick); returns its head.
fn submit_write(vm: &mut Vm, sector: u64, data: &[u8], sent: &mut BTreeMap<u16, Sent>) -> u16 {
    let g = &mut vm.guest;
    let hdr = g.put(Ram::Low, &header(T_OUT, sector));
    let buf = g.put(Ram::Low, data);
    let status = g.put(Ram::Low, &[STATUS_UNSET]);
    let head = g.submit(
        0,
        &[
            Desc::r(hdr, 16),
            Desc::r(buf, data.len()),
            Desc::w(status, 1),
        ],
    );
    sent.insert(head, Sent { status, read: None });
    head
}

/// Submits a read of `expect.len()` bytes at `sector` (no kick); returns its head.
fn submit_read(vm: &mut Vm, sector: u64, expect: &[u8], sent: &mut BTreeMap<u16, Sent>) -> u16 {
    let g = &mut vm.guest;
    let hdr = g.put(Ram::Low, &header(T_IN, sector));
    let buf = g.put(Ram::Low, &vec![0xEE; expect.len()]);
    let status = g.put(Ram::Low, &[STATUS_UNSET]);
    let head = g.submit(
        0,
        &[
            Desc::r(hdr, 16),
            Desc::w(buf, expect.len()),
            Desc::w(status, 1),
        ],
    );
    sent.insert(
        head,
        Sent {
            status,
            read: Some((buf, expect.to_vec())),
        },
    );
    head
}

/// Checks a request the guest got back: status OK and, for a read, its data.
fn check_answer(vm: &Vm, head: u16, sent: &mut BTreeMap<u16, Sent>) {
    let s = sent
        .remove(&head)
        .unwrap_or_else(|| panic!("head {head} answered twice"));
    assert_eq!(
        vm.guest.read(s.status, 1)[0],
        S_OK as u8,
        "head {head}'s status"
    );
    if let Some((buf, expect)) = s.read {
        assert!(
            vm.guest.read(buf, expect.len()) == expect,
            "head {head} read other data"
        );
    }
}

/// A read stalled in the device (out of order behind a write that completes first) when
/// the daemon is killed with SIGKILL. The daemon restarts; cloud-hypervisor reconnects
/// with its inflight region and restarts its ring at the avail index. The stalled read is
/// resubmitted and answered once, with the data; the write answered before the kill is
/// not redone; the ring then serves on.
#[test]
fn a_read_in_flight_across_a_kill_is_answered_once_and_a_returned_write_is_not_redone() {
    let (d, vm, mut sent, read) = kill_with_a_read_in_flight(VhostUserProtocolFeatures::all());
    let d = DaemonProcess::start_in(d.kill(), &config(""));
    let mut vm = vm_reconnect(vm, &d);
    let used = vm.guest.wait_used(0);
    assert_eq!(used.head, read, "the read in flight is answered first");
    check_answer(&vm, used.head, &mut sent);
    assert!(
        vm.guest.no_completion_within(0, Duration::from_millis(300)),
        "nothing else is answered: the write returned before the kill is not redone"
    );
    assert_eq!(
        vm.guest.used_idx(0),
        3,
        "two writes and the read, each once"
    );
    vm.write_and_verify(0, Ram::High, 64, &pattern(64 * 512, 4096, 3));
    assert!(d.log_text().contains("resubmitting"), "{}", d.log_text());
    vm = vm_reconnect(vm, &d);
    vm.verify(0, Ram::Low, 0, &pattern(0, 4096, 1));
}

/// The negative control: the same kill with a frontend that does not keep an inflight
/// region loses the read in flight (the ring restarts past it), which is the hang inflight
/// tracking prevents.
#[test]
fn without_an_inflight_region_the_read_in_flight_is_lost() {
    let no_inflight = VhostUserProtocolFeatures::all() - VhostUserProtocolFeatures::INFLIGHT_SHMFD;
    let (d, vm, _, _) = kill_with_a_read_in_flight(no_inflight);
    let d = DaemonProcess::start_in(d.kill(), &config(""));
    let vm = vm_reconnect(vm, &d);
    assert!(vm.guest.no_completion_within(0, Duration::from_millis(500)));
}

fn vm_reconnect(vm: Vm, d: &DaemonProcess) -> Vm {
    vm.reconnect(&d.socket("v"))
}

/// A daemon whose first read stalls for a minute; a VM (with protocol features limited to
/// `allowed`) that wrote sector 0, then submitted a read of it (which stalls) and a write
/// of sector 32, which completes first. Returns the daemon, the VM, what is outstanding
/// and the read's head.
fn kill_with_a_read_in_flight(
    allowed: VhostUserProtocolFeatures,
) -> (DaemonProcess, Vm, BTreeMap<u16, Sent>, u16) {
    let d = DaemonProcess::start(&config(&stalled_read("v", "60s")));
    let (mut vm, _) = Vm::boot_with(&d.socket("v"), 1, 1, allowed);
    let a = pattern(0, 4096, 1);
    assert_eq!(vm.guest.write_sectors(0, Ram::Low, 0, &a), S_OK as u8);
    let mut sent = BTreeMap::new();
    let read = submit_read(&mut vm, 0, &a, &mut sent);
    let write = submit_write(&mut vm, 32, &pattern(32 * 512, 4096, 2), &mut sent);
    vm.guest.kick(0);
    let used = vm.guest.wait_used(0);
    assert_eq!(used.head, write, "the write overtakes the stalled read");
    check_answer(&vm, write, &mut sent);
    (d, vm, sent, read)
}

/// The daemon kills itself at each point where a crash leaves a different state: after
/// popping (requests marked, not submitted), before publishing (completed, no used
/// entry), after publishing (the guest sees them, the log not cleared), and half-way
/// through clearing a batch. Batches of eight writes and reads on one queue; after the
/// kill the daemon restarts without the crash point and the frontend reconnects. Every
/// request is answered exactly once, with the data written, and the disk holds it.
#[test]
fn a_kill_at_each_crash_point_answers_every_request_exactly_once() {
    for at in ["after-pop", "before-publish", "after-publish", "mid-clear"] {
        for nth in [1, 3] {
            crash_once(at, nth);
        }
    }
}

fn crash_once(at: &str, nth: u32) {
    let crash = format!("[device.emulated.crash]\nat = \"{at}\"\nnth = {nth}\n");
    let d = DaemonProcess::start(&config(&crash));
    let (mut vm, _) = Vm::boot(&d.socket("v"), 1, 1);
    let mut sent = BTreeMap::new();
    let mut written = Vec::new();
    let mut round = 0u64;
    // Rounds of four writes and four reads of what the previous round wrote, until the
    // daemon dies.
    let dir = loop {
        for i in 0..4 {
            let sector = (round * 4 + i) * 8;
            let data = pattern(sector * 512, 4096, (round * 4 + i) as u8);
            submit_write(&mut vm, sector, &data, &mut sent);
            written.push((sector, data));
        }
        if round > 0 {
            for (sector, data) in &written[written.len() - 8..written.len() - 4] {
                submit_read(&mut vm, *sector, data, &mut sent);
            }
        }
        vm.guest.kick(0);
        round += 1;
        if !wait_all_or_death(&mut vm, &mut sent) {
            break d.wait_killed();
        }
        assert!(round < 20, "{at} #{nth}: the crash point was never reached");
    };
    let d = DaemonProcess::start_in(dir, &config(""));
    let mut vm = vm.reconnect(&d.socket("v"));
    let outstanding = sent.len();
    while !sent.is_empty() {
        let used = vm.guest.wait_used(0);
        check_answer(&vm, used.head, &mut sent);
    }
    assert!(
        vm.guest.no_completion_within(0, Duration::from_millis(200)),
        "{at} #{nth}: an extra answer"
    );
    for (sector, data) in &written {
        vm.verify(0, Ram::High, *sector, data);
    }
    let resubmitted = d.log_text().lines().any(|l| l.contains("resubmitting"));
    eprintln!(
        "{at} #{nth}: {outstanding} requests outstanding at the kill; resubmitted: {resubmitted}"
    );
    // Killed before its used entries were stored, a batch in flight must be redone.
    if matches!(at, "after-pop" | "before-publish") {
        assert!(resubmitted, "{at} #{nth}: nothing resubmitted");
    }
}

/// A daemon killed after storing a used entry and before notifying the guest, with
/// nothing else in flight: the guest, which learns of answers only through its call
/// eventfd, is notified once the new daemon's queue starts, whichever of KICK and CALL
/// the frontend sends first (QEMU sends KICK first, so the queue starts without a call
/// fd). Without that notification the guest waits for the answer forever.
#[test]
fn an_answer_stored_but_not_notified_before_a_kill_is_notified_after_the_reconnect() {
    for order in [EventfdOrder::CallFirst, EventfdOrder::KickFirst] {
        let crash = "[device.emulated.crash]\nat = \"after-publish\"\nnth = 1\n";
        let d = DaemonProcess::start(&config(crash));
        let (mut vm, _) = Vm::boot(&d.socket("v"), 1, 1);
        // Taken: the notification the queue's start may have sent.
        vm.guest.queues[0].wait_call(Duration::ZERO);
        let mut sent = BTreeMap::new();
        let head = submit_write(&mut vm, 8, &pattern(8 * 512, 4096, 9), &mut sent);
        vm.guest.kick(0);
        let dir = d.wait_killed();
        assert_eq!(vm.guest.used_idx(0), 1, "{order:?}: the answer was stored");
        let queue = &vm.guest.queues[0];
        assert!(
            !queue.wait_call(Duration::ZERO),
            "{order:?}: the dead daemon notified the guest"
        );
        let d = DaemonProcess::start_in(dir, &config(""));
        let mut vm = vm.reconnect_with(&d.socket("v"), order);
        assert!(
            vm.guest.queues[0].wait_call(Duration::from_secs(10)),
            "{order:?}: the guest was never notified of its answered write"
        );
        let used = vm.guest.wait_used(0);
        assert_eq!(used.head, head);
        check_answer(&vm, head, &mut sent);
    }
}

/// Takes answers until every request sent is answered (true) or none comes for a while
/// because the daemon died (false).
fn wait_all_or_death(vm: &mut Vm, sent: &mut BTreeMap<u16, Sent>) -> bool {
    while !sent.is_empty() {
        let g = &mut vm.guest;
        let answered = g.queues[0].take_used(&g.mem);
        if answered.is_empty() {
            if vm.guest.no_completion_within(0, Duration::from_millis(500)) {
                return false;
            }
            continue;
        }
        for used in answered {
            check_answer(vm, used.head, sent);
        }
    }
    true
}
