//! A VM started by libvirt (`virsh create`, TCG) with the daemon's volume as a
//! `<disk type='vhostuser'>`, running fio with verify: what most hosts do instead of
//! starting QEMU by hand. The domain is the one README shows (memfd shared memory, the
//! socket in group `kvm` with mode 0660 for libvirt's `libvirt-qemu` user), booting the
//! guest tests' kernel and initramfs (tests/integration/guest.rs).
//!
//! Needs libvirt's daemon and `virsh` (`.ci/run` installs `libvirt-daemon-system` and
//! `libvirt-clients`); a libvirtd that is not running is started here (as root, as on a
//! machine without systemd). On this CI machine `virsh create` takes about a minute:
//! libvirt probes QEMU's capabilities again for every domain (its cache does not hold
//! where /dev/kvm exists but cannot run guests); the guest itself runs in 5 s. Missing prerequisites fail the test with the reason, as the
//! guest tests do; `VHOST_IOCOST_GUEST_TESTS=0` skips it.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::daemon::{volume_stats, DaemonProcess};
use crate::guest::{console_text, fio, image, lock, Ctx, GuestRun, GUEST_TIMEOUT};

const URI: &str = "qemu:///system";

/// `virsh` on the system URI, given at most 2 minutes (a wedged libvirtd fails the test
/// instead of hanging the suite).
fn virsh(args: &[&str]) -> Output {
    Command::new("timeout")
        .args(["120", "virsh", "-c", URI])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("virsh {args:?}: {e} (apt-get install libvirt-clients)"))
}

/// Destroys the domain when dropped, so a failing test leaves no VM running.
struct Domain(String);

impl Drop for Domain {
    fn drop(&mut self) {
        let _ = virsh(&["destroy", &self.0]);
    }
}

/// libvirtd answers, started here if need be.
fn libvirt_ready() {
    if virsh(&["version"]).status.success() {
        return;
    }
    // virtlogd may run already (it then refuses to start again): libvirtd answering is
    // what counts.
    let _ = Command::new("virtlogd").arg("-d").status();
    let started = Command::new("libvirtd").arg("-d").status();
    assert!(
        started.as_ref().is_ok_and(|s| s.success()),
        "cannot start libvirtd (apt-get install libvirt-daemon-system): {started:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !virsh(&["version"]).status.success() {
        assert!(
            Instant::now() < deadline,
            "libvirtd does not answer on {URI}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The domain: `name`, booting `kernel`/`initrd` with `cmdline`, the vhost-user disk on
/// `socket`, the serial console into `console`.
fn domain_xml(
    name: &str,
    kernel: &Path,
    initrd: &Path,
    cmdline: &str,
    socket: &Path,
    console: &Path,
) -> String {
    format!(
        r#"<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>512</memory>
  <vcpu>1</vcpu>
  <memoryBacking>
    <source type='memfd'/>
    <access mode='shared'/>
  </memoryBacking>
  <os>
    <type arch='x86_64' machine='q35'>hvm</type>
    <kernel>{kernel}</kernel>
    <initrd>{initrd}</initrd>
    <cmdline>{cmdline}</cmdline>
  </os>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='vhostuser' device='disk'>
      <driver name='qemu' type='raw' queues='2'/>
      <source type='unix' path='{socket}'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <serial type='file'>
      <source path='{console}'/>
      <target port='0'/>
    </serial>
    <memballoon model='none'/>
  </devices>
</domain>
"#,
        kernel = kernel.display(),
        initrd = initrd.display(),
        socket = socket.display(),
        console = console.display(),
    )
}

/// libvirt starts a TCG VM whose disk is a volume of the daemon; fio in it writes, reads
/// back and verifies every block, and the daemon counted the guest's I/O.
#[test]
fn guest_started_by_libvirt() {
    let Some(image) = image() else { return };
    let _l = lock();
    libvirt_ready();
    let mut ctx = Ctx::new("libvirt");
    let d = DaemonProcess::start(
        "[device]\npath = \"disk.img\"\ncreate_size = \"256MiB\"\n\
         [control]\nsocket = \"control.sock\"\n\
         [[volume]]\nname = \"vm\"\nsocket = \"vm.sock\"\nsize = \"128MiB\"\nnum_queues = 2\n\
         socket_mode = \"0660\"\nsocket_group = \"kvm\"\n",
    );
    ctx.watch(&d);
    // libvirt-qemu must reach the socket and the boot files through the test directory.
    let dir = d.dir.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    let (kernel, initrd) = (dir.join("kernel"), dir.join("initrd"));
    std::fs::copy(&image.kernel, &kernel).unwrap();
    std::fs::copy(&image.initrd, &initrd).unwrap();
    let console = dir.join("console.log");
    let jobs = fio(&[&[
        "name=libvirt-verify",
        "rw=randrw",
        "bs=4k",
        "iodepth=8",
        "size=16M",
        "verify=crc32c",
        "verify_fatal=1",
    ]]);
    let cmdline = std::iter::once("console=ttyS0 quiet panic=-1".to_owned())
        .chain(jobs.iter().map(|o| format!("fio.{o}")))
        .collect::<Vec<_>>()
        .join(" ");
    let name = format!("vhost-iocost-test-{}", std::process::id());
    let xml = dir.join("domain.xml");
    std::fs::write(
        &xml,
        domain_xml(
            &name,
            &kernel,
            &initrd,
            &cmdline,
            &d.path("vm.sock"),
            &console,
        ),
    )
    .unwrap();

    let created = virsh(&["create", xml.to_str().unwrap()]);
    assert!(
        created.status.success(),
        "virsh create: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    let _domain = Domain(name.clone());
    // A transient domain is gone once the guest powers off.
    let deadline = Instant::now() + GUEST_TIMEOUT;
    loop {
        let state = virsh(&["domstate", &name]);
        let stderr = String::from_utf8_lossy(&state.stderr);
        if !state.status.success() {
            // By name ("failed to get domain"), or by the id it had a moment before.
            assert!(
                stderr.contains("failed to get domain") || stderr.contains("Domain not found"),
                "virsh domstate: {stderr}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the domain did not power off within {GUEST_TIMEOUT:?}; console:\n{}",
            console_text(&console)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let kept = ctx.console_path("vm");
    let _ = std::fs::copy(&console, &kept);
    let run = GuestRun {
        status: std::process::ExitStatus::from_raw(0),
        console: console_text(&console),
        log: kept,
    };
    let json = run.fio_ok();
    let field = |k| run.harness_field("vda", k).unwrap_or_default();
    assert_eq!(
        field("sectors"),
        (128u64 << 20 >> 9).to_string(),
        "capacity"
    );
    let ios = crate::guest::sum(&json, "read", "total_ios")
        + crate::guest::sum(&json, "write", "total_ios");
    let vm = volume_stats(&d, "vm");
    eprintln!("libvirt guest: fio did {ios} I/Os; the daemon counted {vm}");
    assert_eq!(vm["connections"], 1);
    assert!(vm["reads"].as_u64().unwrap() + vm["writes"].as_u64().unwrap() >= ios as u64);
}
