#!/usr/bin/env bash
# Prepares everything a real-guest test needs and prints where it is:
#   1. installs qemu-system-x86, busybox-static and fio with apt-get if any is missing;
#   2. downloads the Debian cloud kernel package (resolved at run time, never pinned) and
#      unpacks it with `dpkg -x` into the cache directory (nothing is installed into /boot);
#   3. builds an uncompressed initramfs: busybox-static, the host's /usr/bin/fio and the
#      shared libraries ldd lists for it, the six virtio modules, and an /init (below) that
#      runs one fio command built from the kernel command line.
#
# usage: scripts/guest/prepare.sh [CACHE_DIR]     (default: $GUEST_CACHE or target/guest-cache)
#   4. unpacks bookworm-backports' QEMU (scripts/guest/fetch-qemu.sh) for the one test that
#      needs QEMU 9.1 or later, printing `QEMU_FIXED=...`.
# Prints `KERNEL=...` and `INITRD=...` on its last two lines. Safe to run concurrently (flock).
# Exit status 2 means a prerequisite is missing and could not be installed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=$(realpath -m "${1:-${GUEST_CACHE:-$repo/target/guest-cache}}")
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock -w 600 9 || { echo "prepare.sh: timed out waiting for $cache/.lock" >&2; exit 2; }

say() { echo "prepare.sh: $*" >&2; }
die() { echo "prepare.sh: ERROR: $*" >&2; exit 2; }

# --- 1. packages --------------------------------------------------------------------------
missing=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=(qemu-system-x86)
[ -x /bin/busybox ] || missing+=(busybox-static)
[ -x /usr/bin/fio ] || missing+=(fio)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        die "missing ${missing[*]}; install them (apt-get install ${missing[*]}) as root"
    fi
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 || die "apt-get update failed"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]} failed"
fi
case " $(/bin/busybox --list 2>/dev/null | tr '\n' ' ') " in
    *" cpio "*) ;;
    *) die "/bin/busybox has no cpio applet (need busybox-static)" ;;
esac

# --- 2. kernel ----------------------------------------------------------------------------
# The package linux-image-cloud-amd64 depends on, e.g. linux-image-6.1.0-56-cloud-amd64. The
# ABI number changes with each security update and old ones leave the mirror: resolve it now.
resolve_pkg() {
    apt-cache depends linux-image-cloud-amd64 2>/dev/null \
        | awk '/Depends: linux-image-[0-9]/{print $2; exit}'
}
pkg=$(resolve_pkg || true)
if [ -z "$pkg" ] && [ "$(id -u)" = 0 ]; then
    apt-get update -qq >&2 || true
    pkg=$(resolve_pkg || true)
fi
if [ -z "$pkg" ]; then
    # No apt metadata (and no way to refresh it): fall back to a kernel unpacked earlier.
    pkg=$(ls -1 "$cache/kernel" 2>/dev/null | sort -V | tail -n1 || true)
    [ -n "$pkg" ] || die "cannot resolve linux-image-cloud-amd64 (apt-cache depends) and no cached kernel"
    say "apt-cache cannot resolve linux-image-cloud-amd64; using cached $pkg"
fi
kdir=$cache/kernel/$pkg
if ! ls "$kdir"/boot/vmlinuz-* >/dev/null 2>&1; then
    say "downloading $pkg"
    tmp=$(mktemp -d "$cache/dl.XXXXXX")
    if ! (cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1); then
        # The list may be stale (the version left the mirror): refresh once and retry.
        [ "$(id -u)" = 0 ] && apt-get update -qq >&2 || true
        (cd "$tmp" && apt-get download "$pkg" >&2) || { rm -rf "$tmp"; die "apt-get download $pkg failed"; }
    fi
    rm -rf "$kdir.partial" && mkdir -p "$kdir.partial"
    dpkg -x "$tmp"/"$pkg"_*.deb "$kdir.partial"
    rm -rf "$tmp" "$kdir" && mv "$kdir.partial" "$kdir"
fi
kernel=$(ls -1 "$kdir"/boot/vmlinuz-* | head -n1)
kver=$(ls -1 "$kdir/lib/modules" | head -n1)

# --- 3. initramfs -------------------------------------------------------------------------
# /init. Kernel command line parameters it reads (dotted names: the kernel leaves them to
# user space and does not pass them to init as arguments or environment):
#   fio.OPT=VAL / fio.OPT  -> fio --OPT=VAL / --OPT, in command line order (so
#                             `fio.name=a ... fio.name=b fio.stonewall ...` gives two jobs)
#   harness.wait=1         -> when fio has set a job up (exec_prerun, so fio's own start-up
#                             time does not count), print "HARNESS: ready" and wait for a line
#                             on the console; the host writes one to QEMU's stdin to start the
#                             I/O of several guests at the same moment. Waits before every job.
# Console protocol (the test parses it): "HARNESS: ..." status lines, the fio JSON between
# "HARNESS: BEGIN-JSON" and "HARNESS: END-JSON rc=N", and "HARNESS: done" before poweroff.
init_text=$(cat <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "HARNESS: init started, uptime $(cut -d' ' -f1 /proc/uptime), cpus $(grep -c ^processor /proc/cpuinfo)"
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk; do
    insmod /lib/modules/$m.ko || echo "HARNESS: ERROR insmod $m failed"
done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done
if [ ! -b /dev/vda ]; then
    echo "HARNESS: ERROR no /dev/vda after 15 s; block devices: $(ls /sys/block | tr '\n' ' ')"
    dmesg | tail -n 30
    echo "HARNESS: done"
    poweroff -f
fi
q=/sys/block/vda/queue
echo "HARNESS: vda sectors=$(cat /sys/block/vda/size) hw-queues=$(ls /sys/block/vda/mq | wc -l) logical-block=$(cat $q/logical_block_size) write-cache=$(cat $q/write_cache | tr ' ' '-') discard-max=$(cat $q/discard_max_bytes) ro=$(cat /sys/block/vda/ro) serial=$(cat /sys/block/vda/serial 2>/dev/null)"

set --
WAIT=0
for a in $(cat /proc/cmdline); do
    case "$a" in
        fio.*) set -- "$@" "--${a#fio.}" ;;
        harness.wait=*) WAIT=${a#*=} ;;
    esac
done
if [ "$WAIT" = 1 ]; then
    # Options before the first --name are global: every job runs this just before its I/O.
    # fio sends the command's output to a file, hence /dev/console.
    printf '#!/bin/sh\necho "HARNESS: ready" >/dev/console\nread -r _go </dev/console\n' > /bin/wait-go
    chmod +x /bin/wait-go
    set -- --exec_prerun=/bin/wait-go "$@"
fi
echo "HARNESS: fio start, uptime $(cut -d' ' -f1 /proc/uptime): fio $*"
fio --output-format=json --output=/tmp/fio.json --eta=never "$@"
rc=$?
echo "HARNESS: fio exited rc=$rc, uptime $(cut -d' ' -f1 /proc/uptime)"
# Completion interrupts per virtqueue (virtio0-req.N is hardware queue N): shows which
# queues carried requests.
echo "HARNESS: queue-irqs$(awk '/-req\.[0-9]/ {s=0; for (i=2; i<=NF; i++) { if ($i !~ /^[0-9]+$/) break; s+=$i }; n=$NF; sub(/.*-/, "", n); printf " %s=%d", n, s}' /proc/interrupts)"
# Kernel messages would break the JSON if they landed in the middle of it.
dmesg -n 1
echo "HARNESS: BEGIN-JSON"
cat /tmp/fio.json
echo "HARNESS: END-JSON rc=$rc"
dmesg | grep -iE 'vda|virtio|blk_update|I/O error|hung|timeout' | tail -n 40 | sed 's/^/HARNESS: dmesg /'
sync
echo "HARNESS: done"
poweroff -f
INIT
)
stamp=$(printf '%s\n%s\n%s\n%s\n' "$init_text" "$kver" "$(md5sum /usr/bin/fio /bin/busybox)" "v4" | md5sum | cut -c1-16)
initrd=$cache/initramfs-$stamp.cpio
if [ ! -f "$initrd" ]; then
    say "building $initrd"
    root=$(mktemp -d "$cache/root.XXXXXX")
    trap 'rm -rf "$root"' EXIT
    mkdir -p "$root"/{bin,usr/bin,proc,sys,dev,tmp,lib/modules}
    cp /bin/busybox "$root/bin/busybox"
    cp /usr/bin/fio "$root/usr/bin/fio"
    for lib in $(ldd /usr/bin/fio | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
    for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_blk; do
        ko=$(find "$kdir/lib/modules/$kver" -name "$m.ko" | head -n1)
        [ -n "$ko" ] || die "module $m.ko not found in $kdir/lib/modules/$kver"
        cp "$ko" "$root/lib/modules/"
    done
    printf '%s\n' "$init_text" > "$root/init"
    chmod +x "$root/init"
    (cd "$root" && find . | /bin/busybox cpio -o -H newc -R 0:0 2>/dev/null) > "$initrd.partial"
    mv "$initrd.partial" "$initrd"
    # Older builds are no longer referenced.
    find "$cache" -maxdepth 1 -name 'initramfs-*.cpio' ! -name "$(basename "$initrd")" -delete
fi
# A QEMU that survives a backend dying inside its reconnect handshake, for the test that
# kills the daemon at any moment; without it that test fails and says why.
"$repo/scripts/guest/fetch-qemu.sh" "$cache" || say "no QEMU 9.1 or later (scripts/guest/fetch-qemu.sh failed)"
echo "KERNEL=$kernel"
echo "INITRD=$initrd"
