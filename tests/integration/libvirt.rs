//! A VM started by libvirt (`virsh create`, TCG) with the daemon's volume as a
//! `<disk type='vhostuser'>`, running fio with verify: what most hosts do instead of
//! starting QEMU by hand. The domain is the one README shows (memfd shared memory, the
//! socket in group `kvm` with mode 0660 for libvirt's `libvirt-qemu` user), booting the
//! guest tests' kernel and initramfs (tests/integration/guest.rs). With the daemon's
//! `libvirt-hook` installed as libvirt's qemu hook, a domain's declared QoS holds while it
//! runs and is undone when it stops.
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

use crate::daemon::{control_get, volume_stats, DaemonProcess};
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
/// `socket` (with `disk_extra` inside its `<disk>`), `metadata` inside `<metadata>`, the
/// serial console into `console`.
struct DomainSpec<'a> {
    name: &'a str,
    kernel: &'a Path,
    initrd: &'a Path,
    cmdline: &'a str,
    socket: &'a Path,
    console: &'a Path,
    metadata: &'a str,
    disk_extra: &'a str,
}

fn domain_xml(s: &DomainSpec) -> String {
    format!(
        r#"<domain type='qemu'>
  <name>{name}</name>
  <metadata>{metadata}</metadata>
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
      <target dev='vda' bus='virtio'/>{disk_extra}
    </disk>
    <serial type='file'>
      <source path='{console}'/>
      <target port='0'/>
    </serial>
    <memballoon model='none'/>
  </devices>
</domain>
"#,
        name = s.name,
        metadata = s.metadata,
        kernel = s.kernel.display(),
        initrd = s.initrd.display(),
        cmdline = s.cmdline,
        socket = s.socket.display(),
        console = s.console.display(),
        disk_extra = s.disk_extra,
    )
}

/// The daemon serving one volume `vm` (`extra` in its table) to libvirt's QEMU: the
/// socket in group `kvm`, the test directory reachable for `libvirt-qemu`.
fn daemon_for_libvirt(ctx: &mut Ctx, extra: &str) -> DaemonProcess {
    let d = DaemonProcess::start(&format!(
        "[device]\npath = \"disk.img\"\ncreate_size = \"256MiB\"\n\
         [control]\nsocket = \"control.sock\"\n\
         [[volume]]\nname = \"vm\"\nsocket = \"vm.sock\"\nsize = \"128MiB\"\nnum_queues = 2\n\
         socket_mode = \"0660\"\nsocket_group = \"kvm\"\n{extra}\n"
    ));
    ctx.watch(&d);
    // libvirt-qemu must reach the socket and the boot files through the test directory.
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    d
}

/// Creates a transient domain running `jobs` in fio on the daemon's volume `vm`, with
/// `metadata` and `disk_extra` (see [`DomainSpec`]); `running` is called once `virsh
/// create` returned. Returns the guest's run once the domain powered off.
fn run_domain(
    ctx: &Ctx,
    d: &DaemonProcess,
    jobs: &[&[&str]],
    metadata: &str,
    disk_extra: &str,
    running: impl FnOnce(&str),
) -> GuestRun {
    let image = image().expect("the guest image");
    let dir = d.dir.path();
    let (kernel, initrd) = (dir.join("kernel"), dir.join("initrd"));
    std::fs::copy(&image.kernel, &kernel).unwrap();
    std::fs::copy(&image.initrd, &initrd).unwrap();
    let console = dir.join("console.log");
    let cmdline = std::iter::once("console=ttyS0 quiet panic=-1".to_owned())
        .chain(fio(jobs).iter().map(|o| format!("fio.{o}")))
        .collect::<Vec<_>>()
        .join(" ");
    let name = format!("vhost-iocost-test-{}", std::process::id());
    let xml = dir.join("domain.xml");
    let spec = DomainSpec {
        name: &name,
        kernel: &kernel,
        initrd: &initrd,
        cmdline: &cmdline,
        socket: &d.path("vm.sock"),
        console: &console,
        metadata,
        disk_extra,
    };
    std::fs::write(&xml, domain_xml(&spec)).unwrap();

    let created = virsh(&["create", xml.to_str().unwrap()]);
    assert!(
        created.status.success(),
        "virsh create: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    let _domain = Domain(name.clone());
    running(&name);
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
    GuestRun {
        status: std::process::ExitStatus::from_raw(0),
        console: console_text(&console),
        log: kept,
    }
}

/// libvirt starts a TCG VM whose disk is a volume of the daemon; fio in it writes, reads
/// back and verifies every block, and the daemon counted the guest's I/O.
#[test]
fn guest_started_by_libvirt() {
    if image().is_none() {
        return;
    }
    let _l = lock();
    libvirt_ready();
    let mut ctx = Ctx::new("libvirt");
    let d = daemon_for_libvirt(&mut ctx, "");
    let jobs: &[&[&str]] = &[&[
        "name=libvirt-verify",
        "rw=randrw",
        "bs=4k",
        "iodepth=8",
        "size=16M",
        "verify=crc32c",
        "verify_fatal=1",
    ]];
    let run = run_domain(&ctx, &d, jobs, "", "", |_| {});
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

/// Where the test's hook script finds the daemon: a link to the running test daemon's
/// control socket (the script is written once; libvirtd looks for hooks when it starts).
const HOOK_CONTROL: &str = "/run/vhost-iocost-test/control.sock";
const HOOK_SCRIPT: &str = "/etc/libvirt/hooks/qemu.d/vhost-iocost-test";

/// The daemon's `libvirt-hook` installed as libvirt's qemu hook (libvirtd restarted if it
/// was running without it), pointed at `d`.
fn install_hook(d: &DaemonProcess) {
    let script = format!(
        "#!/bin/sh\nexec {} libvirt-hook --control {HOOK_CONTROL} \"$@\"\n",
        env!("CARGO_BIN_EXE_vhost-iocost")
    );
    if std::fs::read_to_string(HOOK_SCRIPT).ok().as_deref() != Some(script.as_str()) {
        std::fs::create_dir_all(Path::new(HOOK_SCRIPT).parent().unwrap()).unwrap();
        std::fs::write(HOOK_SCRIPT, &script).unwrap();
        std::fs::set_permissions(HOOK_SCRIPT, std::fs::Permissions::from_mode(0o755)).unwrap();
        stop_libvirtd();
    }
    let link = Path::new(HOOK_CONTROL);
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(link);
    std::os::unix::fs::symlink(d.path("control.sock"), link).unwrap();
    libvirt_ready();
}

/// Stops a running libvirtd (its domains keep running) and waits until it is gone.
fn stop_libvirtd() {
    let _ = Command::new("pkill").args(["-x", "libvirtd"]).status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Command::new("pgrep")
        .args(["-x", "libvirtd"])
        .status()
        .is_ok_and(|s| s.success())
    {
        assert!(Instant::now() < deadline, "libvirtd does not stop");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// libvirt with the hook installed starts a domain that declares its disk's QoS in
/// `<metadata>` (weight, class and an `<iotune>` IOPS cap): while it runs the
/// volume's settings over REST are the declared ones and fio in the guest gets the cap;
/// once it stops they are the configured ones again.
#[test]
fn a_domains_declared_qos_holds_while_it_runs() {
    if image().is_none() {
        return;
    }
    let _l = lock();
    let mut ctx = Ctx::new("libvirt-hook");
    let d = daemon_for_libvirt(&mut ctx, "weight = 100");
    install_hook(&d);
    let configured = crate::libvirt_hook::settings(&d, "vm");
    const CAP: f64 = 200.0;
    // libvirt 9.0 refuses <iotune> on a vhostuser disk, so it goes in the metadata.
    let metadata = r#"<iocost:qos xmlns:iocost="urn:vhost-iocost:qos:1">
      <iocost:disk target="vda" weight="300" class="latency" latency_target="p99 50ms">
        <iocost:iotune><iocost:total_iops_sec>200</iocost:total_iops_sec></iocost:iotune>
      </iocost:disk>
    </iocost:qos>"#;
    let jobs: &[&[&str]] = &[&[
        "name=capped",
        "rw=randread",
        "bs=4k",
        "iodepth=8",
        "size=16M",
        "time_based=1",
        "runtime=6",
    ]];
    let run = run_domain(&ctx, &d, jobs, metadata, "", |_| {
        let v = control_get(&d, "/v1/volumes/vm");
        assert_eq!(v["weight"]["value"], 300, "{v}");
        assert_eq!(v["class"]["value"], "latency", "{v}");
        assert_eq!(v["caps"]["value"], serde_json::json!({"iops": 200}), "{v}");
    });
    let json = run.fio_ok();
    let iops = crate::guest::sum(&json, "read", "iops");
    eprintln!("libvirt guest behind <iotune> total_iops_sec {CAP}: fio read {iops:.0} IOPS");
    assert!(
        (0.6 * CAP..=1.15 * CAP).contains(&iops),
        "fio read {iops:.0} IOPS behind a cap of {CAP}"
    );
    // libvirt runs the release hook once the domain is gone.
    let deadline = Instant::now() + Duration::from_secs(30);
    while crate::libvirt_hook::settings(&d, "vm") != configured {
        assert!(
            Instant::now() < deadline,
            "the volume did not return to its configured settings: {}",
            crate::libvirt_hook::settings(&d, "vm")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
