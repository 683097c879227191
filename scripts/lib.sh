# Shared helpers for the benchmark scripts: a temporary work directory and a daemon
# started from a config text and stopped by PID. Source it after `set -euo pipefail`.

# The cost model measured with fio on the benchmark machine's disk, and the QoS targets of
# the noisy-neighbour runs (BENCHMARKS.md, "Load generator pictures"). MODEL and QOS override them.
model=${MODEL:-"rbps = 1500000000
rseqiops = 110000
rrandiops = 110000
wbps = 2000000000
wseqiops = 100000
wrandiops = 100000"}
qos=${QOS:-"rpct = 90.0
rlat = \"300us\"
wpct = 95.0
wlat = \"20ms\"
min = 5.0"}

# A [device.model] far faster than the daemon can go: budgets never bind, so a run with
# it measures the cost of pricing and admitting every request, not throttling.
unbinding_model="[device.model]
rbps = 1000000000000
rseqiops = 100000000
rrandiops = 100000000
wbps = 1000000000000
wseqiops = 100000000
wrandiops = 100000000"

work=$(mktemp -d /var/tmp/vhost-iocost-bench.XXXXXX)
daemon_pid=
# Every daemon start_daemon_in started that the script has not stopped (or forgotten):
# the exit trap stops them.
started_pids=()
cleanup() {
    for pid in ${started_pids[@]+"${started_pids[@]}"}; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

command -v fio >/dev/null || { echo "fio is required (apt-get install fio)"; exit 1; }
cargo build --release --quiet
bin=$PWD/target/release/vhost-iocost

# irq_cpu FILE: the CPU that has taken the most interrupts of any one request queue of
# the disk holding FILE (virtio-blk's `virtioN-req.Q`, NVMe's `nvmeNqQ` in
# /proc/interrupts), if this script may run there; empty, saying so on stderr, if none is
# found (device-mapper and md devices, /dev/root, overlay and tmpfs).
irq_cpu() {
    local dev name cpu
    dev=$(df --output=source "$1" | tail -1)
    dev=${dev#/dev/}
    if [ -e "/sys/class/block/$dev/partition" ]; then
        dev=$(basename "$(dirname "$(readlink -f "/sys/class/block/$dev")")")
    fi
    if [ -e "/sys/block/$dev/device" ]; then
        name=$(basename "$(readlink -f "/sys/block/$dev/device")")
    else
        name="no such device"
    fi
    # The header names the online CPUs' columns (CPU0 CPU2 ... with CPU1 offline).
    cpu=$(awk -v name="$name" 'NR == 1 { for (i = 1; i <= NF; i++) col[i] = substr($i, 4); ncpu = NF; next }
        $0 ~ (" " name "-req|" name "q[1-9]") {
            for (i = 2; i <= ncpu + 1; i++) if ($i + 0 > best) { best = $i + 0; cpu = col[i - 1] }
        }
        END { if (best > 0) print cpu }' /proc/interrupts)
    if [ -n "$cpu" ] && taskset -c "$cpu" true 2>/dev/null; then
        echo "$cpu"
    else
        echo "no CPU found taking the disk's interrupts: the pinned rows are skipped" >&2
    fi
}

# pin_client CMD...: runs CMD on CPU $client_cpu if it is set (fio started by CMD too).
pin_client() { if [ -n "${client_cpu:-}" ]; then taskset -c "$client_cpu" "$@"; else "$@"; fi; }

# start_daemon CONFIG_TEXT [WRAPPER...]: runs the daemon in $work (under WRAPPER, e.g.
# `taskset -c 1`) until it logs that it is serving; $daemon_pid is its PID.
start_daemon() { start_daemon_in "$work" "$@"; }

# start_daemon_in DIR CONFIG_TEXT [WRAPPER...]: the same in DIR, which holds its config,
# log and relative paths (sockets), so that several daemons can run at once.
start_daemon_in() {
    local dir=$1
    mkdir -p "$dir"
    printf '%s\n' "$2" > "$dir/config.toml"
    shift 2
    (cd "$dir" && exec "$@" "$bin" run --config config.toml 2>"$dir/daemon.log") &
    daemon_pid=$!
    started_pids+=("$daemon_pid")
    for _ in $(seq 100); do
        grep -q 'vhost-iocost running' "$dir/daemon.log" 2>/dev/null && return
        sleep 0.1
    done
    echo "daemon did not start:"; cat "$dir/daemon.log"; exit 1
}

# stop_daemon [PID]: stops the daemon with PID ($daemon_pid by default) and waits for it.
stop_daemon() {
    local pid=${1:-$daemon_pid}
    kill "$pid"
    wait "$pid" || true
    forget_daemon "$pid"
}

# forget_daemon PID: a daemon that has exited and been waited for; the exit trap leaves
# its PID alone (another process may have it by then).
forget_daemon() {
    local kept=() p
    for p in ${started_pids[@]+"${started_pids[@]}"}; do [ "$p" = "$1" ] || kept+=("$p"); done
    started_pids=(${kept[@]+"${kept[@]}"})
    if [ "$1" = "$daemon_pid" ]; then daemon_pid=; fi
}

# noisy_neighbour_config ENABLE: the daemon config of the noisy-neighbour runs: volumes
# "reader" and "writer" (1 GiB each) on disk.img with $model, and QoS on or off.
noisy_neighbour_config() {
    echo "[device]
path = \"disk.img\"
[device.model]
$model
[device.qos]
enable = $1
$qos
[[volume]]
name = \"reader\"
socket = \"reader.sock\"
size = \"1GiB\"
[[volume]]
name = \"writer\"
socket = \"writer.sock\"
offset = \"1GiB\"
size = \"1GiB\""
}

# emulated_device SIZE: the [device] keys of the emulated slow SSD (20k random reads/s,
# 200 MB/s of writes, 4 channels) on a disk.img of SIZE.
emulated_device() {
    printf 'path = "disk.img"\ncreate_size = "%s"\nkind = "emulated"\ndirect = false\n[device.emulated]\n%s\nchannels = 4\nbase_latency = "50us"' \
        "$1" "$(cat configs/emulated/slow-ssd.toml)"
}

# fill_file PATH SIZE: writes every block, so reads hit allocated blocks, not holes.
fill_file() {
    fio --name=fill --filename="$1" --size="$2" --rw=write --bs=1M --direct=1 \
        --ioengine=io_uring --iodepth=8 --output=/dev/null
}

# settle CMD...: after heavy writes this virtual disk serves reads slowly for ~10 s (the
# host presumably still writing back). Runs CMD (a short `vhost-iocost bench` of the
# reader) until two runs in a row agree within 10 % in IOPS (column 5 of its last line),
# at most 10 times, so a baseline is not measured on a disk still busy with the previous
# run's writes.
settle() {
    local prev=0 cur i
    for i in $(seq 10); do
        cur=$("$@" 2>/dev/null | tail -1 | awk '{ printf "%d", $5 }')
        if [ "$prev" -gt 0 ] && [ $((cur * 10)) -ge $((prev * 9)) ] && [ $((cur * 9)) -le $((prev * 10)) ]; then
            return
        fi
        prev=$cur
    done
    echo "(disk did not settle after 10 probes; last $cur IOPS)"
}

# qsd BLOCKDEV [iothread [POLL_MAX_NS]]: qemu-storage-daemon serving BLOCKDEV, in its main
# loop or in an iothread (which polls adaptively, poll-max-ns 32 us by default).
qsd() {
    rm -f "$work/q.sock"
    local iothread=() export_opt=
    if [ "${2:-}" = iothread ]; then
        iothread=(--object "iothread,id=io0${3:+,poll-max-ns=$3}")
        export_opt=,iothread=io0
    fi
    qemu-storage-daemon "${iothread[@]}" --blockdev "$1" \
        --export "type=vhost-user-blk,id=e0,node-name=n0,addr.type=unix,addr.path=$work/q.sock,writable=on,num-queues=1$export_opt" \
        2>"$work/qsd.log" &
    server_pid=$!
    for _ in $(seq 100); do [ -S "$work/q.sock" ] && return; sleep 0.1; done
    echo "qemu-storage-daemon did not start:"; cat "$work/qsd.log"; exit 1
}
# stop_server: stops whichever server runs, the daemon or qemu-storage-daemon.
stop_server() {
    if [ -n "${daemon_pid:-}" ]; then stop_daemon; daemon_pid=; else kill "$server_pid"; wait "$server_pid" || true; fi
    server_pid=
}
