#!/usr/bin/env bash
# Boots one QEMU guest (TCG) whose only disk is a vhost-user-blk device on SOCKET, and waits
# for it to power off. The guest's /init (see prepare.sh) runs fio as told by the `fio.*`
# kernel arguments and prints the JSON result between markers on the serial console, which
# is kept in LOG.
#
# usage: scripts/guest/run-guest.sh --socket SOCK --log LOG [options] [--] [KERNEL_ARG...]
#   --smp N          vCPUs (default 1; 2 gives the guest two hardware queues)
#   --mem SIZE       guest RAM, a shared memfd (default 512M)
#   --queues N       num-queues of vhost-user-blk-pci (default 2)
#   --timeout SECS   hard limit for the whole guest run (default 240); exit 124 when hit
#   --reconnect      add reconnect=1 to the chardev (QEMU reconnects when the daemon restarts)
#   --kernel K --initrd I   boot these (default: whatever prepare.sh prints)
#   --qemu PATH      this qemu-system-x86_64, with its firmware and modules from beside it
#                    (PATH/../share/qemu, PATH/../lib/x86_64-linux-gnu/qemu)
#   --qmp PATH       a QMP control socket at PATH (for a test driving a migration)
#   --incoming URI   start as a migration's destination, waiting for it on URI (for
#                    example tcp:127.0.0.1:4444); the console then shows the migrated
#                    guest from where it was
#   KERNEL_ARG       e.g. fio.name=j fio.rw=randread fio.runtime=5 harness.wait=1
# Standard input is passed to the serial console (not when it is a terminal), so a test can
# release guests booted with harness.wait=1 by writing a line.
# Exit status: QEMU's (0 when the guest powered off), 124 on timeout, 2 on bad usage or
# missing prerequisites. Stopped with SIGTERM/SIGINT, it stops QEMU (by PID) first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sock= log= smp=1 mem=512M queues=2 limit=240 reconnect= kernel= initrd= qemu=qemu-system-x86_64
extra=()
usage() { sed -n '2,26p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --socket) sock=$2; shift 2 ;;
        --log) log=$2; shift 2 ;;
        --smp) smp=$2; shift 2 ;;
        --mem) mem=$2; shift 2 ;;
        --queues) queues=$2; shift 2 ;;
        --timeout) limit=$2; shift 2 ;;
        --reconnect) reconnect=,reconnect=1; shift ;;
        --kernel) kernel=$2; shift 2 ;;
        --initrd) initrd=$2; shift 2 ;;
        --qemu) qemu=$2; extra+=(-L "$(dirname "$2")/../share/qemu")
                # Its own build's modules: QEMU refuses those of the installed one, and
                # the audio ones it would probe for are not unpacked (QEMU 7.2 has no
                # `-audio none`, so only here).
                export QEMU_MODULE_DIR; QEMU_MODULE_DIR=$(dirname "$2")/../lib/x86_64-linux-gnu/qemu
                extra+=(-audio none)
                shift 2 ;;
        --qmp) extra+=(-qmp "unix:$2,server=on,wait=off"); shift 2 ;;
        --incoming) extra+=(-incoming "$2"); shift 2 ;;
        --) shift; break ;;
        -h|--help) usage ;;
        -*) echo "run-guest.sh: unknown option $1" >&2; usage ;;
        *) break ;;
    esac
done
[ -n "$sock" ] && [ -n "$log" ] || usage
die() { echo "run-guest.sh: ERROR: $*" >&2; exit 2; }

command -v "$qemu" >/dev/null 2>&1 \
    || die "$qemu not found (apt-get install qemu-system-x86, or run scripts/guest/prepare.sh as root)"
if [ -z "$kernel" ] || [ -z "$initrd" ]; then
    out=$("$here/prepare.sh") || die "prepare.sh failed"
    kernel=$(printf '%s\n' "$out" | sed -n 's/^KERNEL=//p')
    initrd=$(printf '%s\n' "$out" | sed -n 's/^INITRD=//p')
fi
[ -r "$kernel" ] || die "kernel $kernel not readable (run scripts/guest/prepare.sh)"
[ -r "$initrd" ] || die "initramfs $initrd not readable (run scripts/guest/prepare.sh)"
# Without reconnect QEMU fails at once on a missing socket; say so more plainly.
[ -n "$reconnect" ] || [ -S "$sock" ] || die "no vhost-user socket at $sock (is the daemon running?)"

mkdir -p "$(dirname "$log")"
: > "$log"
exec 3<&0
[ -t 0 ] && exec 3</dev/null

start=$(date +%s.%N)
# The whole run has a hard limit; `timeout` forwards our SIGTERM and KILLs 5 s later.
timeout -k 5 "$limit" "$qemu" -accel tcg -smp "$smp" \
    -machine q35,memory-backend=mem -object "memory-backend-memfd,id=mem,size=$mem,share=on" -m "$mem" \
    -kernel "$kernel" -initrd "$initrd" \
    -append "console=ttyS0 quiet panic=-1 $*" \
    -nographic -no-reboot -nic none \
    -chardev "socket,id=disk0,path=$sock$reconnect" \
    -device "vhost-user-blk-pci,chardev=disk0,num-queues=$queues" \
    "${extra[@]}" \
    <&3 >>"$log" 2>&1 &
pid=$!
exec 3<&-
stop() { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
trap 'stop; exit 143' TERM
trap 'stop; exit 130' INT
trap 'kill -TERM "$pid" 2>/dev/null || true' EXIT
set +e
wait "$pid"
rc=$?
set -e
trap - EXIT
secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}')

if [ "$rc" = 0 ] && grep -aq 'HARNESS: done' "$log"; then
    echo "run-guest.sh: guest powered off after ${secs}s; console log $log" >&2
    exit 0
fi
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "run-guest.sh: ERROR: guest killed by the ${limit}s timeout; console log $log" >&2
elif ! grep -aq 'HARNESS: init started' "$log"; then
    echo "run-guest.sh: ERROR: QEMU could not start the guest (exit $rc after ${secs}s); console log $log" >&2
else
    echo "run-guest.sh: ERROR: guest ended without 'HARNESS: done' (exit $rc after ${secs}s); console log $log" >&2
fi
grep -a 'qemu-system-x86_64:' "$log" | head -n 8 | sed 's/^/    /' >&2 || true
if grep -aqE 'Failed to set msg fds|ring restore failed' "$log"; then
    echo "    hint: the backend refused the memory table or went away: guest RAM must be a shared memfd" \
        "(memory-backend-memfd,share=on), and without --reconnect a daemon restart or crash leaves the guest hanging" >&2
fi
if grep -aqE 'memfd|share=on' "$log" && ! grep -aq 'HARNESS: init started' "$log"; then
    echo "    hint: QEMU could not create the shared memfd guest RAM (memfd_create, share=on)" >&2
fi
if grep -aqE 'Failed to connect|Connection refused|No such file' "$log"; then
    echo "    hint: nothing listens on $sock (is the daemon running?)" >&2
fi
if grep -aqE 'Failed to read msg header|vhost_backend_init failed|Protocol error' "$log"; then
    echo "    hint: whatever listens on $sock does not answer as a vhost-user backend (see the daemon log)" >&2
fi
if grep -aqE 'ERROR no /dev/vda' "$log"; then
    echo "    hint: the guest driver did not bring up the disk: feature negotiation or config space (see the dmesg lines)" >&2
fi
echo "--- last console lines:" >&2
tail -n 25 "$log" | tr -d '\r' | sed 's/^/    /' >&2
[ "$rc" = 0 ] && rc=1
exit "$rc"
