#!/usr/bin/env bash
# Host scale: VOLUMES volumes of 1 MiB on one daemon (the emulated slow SSD, 20k random
# reads/s; QoS on with its defaults). Prints one table:
#   - start-up: from starting the process to its "running" log line;
#   - threads and descriptors while every volume is idle, and per idle volume beyond a
#     one-volume daemon's;
#   - GET /v1/stats and GET /metrics: answer time (best of 3) and size, whole and a page
#     of 100 volumes;
#   - CONNECTED volumes at QD4 4 KiB random reads for 10 s (the `bench` load generator):
#     the slowest volume's IOPS against the mean, and the daemon's threads meanwhile;
#   - SIGTERM while CONNECTED volumes are busy again: from the signal to the exit.
#
# Usage: scripts/bench-scale.sh   (VOLUMES=2000 CONNECTED=200)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
# Stop the load generator too on any exit (lib.sh's cleanup would wait for it).
trap 'kill $(jobs -p) 2>/dev/null || true; cleanup' EXIT

volumes=${VOLUMES:-2000}
connected=${CONNECTED:-200}

# config N: N volumes of 1 MiB on an emulated device.
config() {
    printf '[device]\npath = "disk.img"\ncreate_size = "%sMiB"\nkind = "emulated"\ndirect = false\n' "$1"
    printf '[device.emulated]\n%s\n' "$(cat configs/emulated/slow-ssd.toml)"
    printf '[control]\nsocket = "control.sock"\n'
    for i in $(seq 0 $(($1 - 1))); do
        printf '[[volume]]\nname = "v%s"\nsocket = "v%s.sock"\noffset = "%sMiB"\nsize = "1MiB"\n' "$i" "$i" "$i"
    done
}

now() { date +%s.%N; }
threads() { ls "/proc/$daemon_pid/task" | wc -l; }
fds() { ls "/proc/$daemon_pid/fd" | wc -l; }

start_daemon "$(config 1)"
base_threads=$(threads); base_fds=$(fds)
stop_daemon
rm -f "$work"/*.sock "$work/disk.img"

t0=$(now)
start_daemon "$(config "$volumes")"
t1=$(now)
idle_threads=$(threads); idle_fds=$(fds)

# get PATH: the best of three answer times in ms, and the size in bytes.
get() {
    local best=999999 size=0 t
    for _ in 1 2 3; do
        read -r t size < <(curl -s --unix-socket "$work/control.sock" -o /dev/null \
            -w '%{time_total} %{size_download}\n' "http://localhost$1")
        best=$(echo "$best $t" | awk '{ t = $2 * 1000; print (t < $1 ? t : $1) }')
    done
    echo "$best $size"
}
read -r stats_ms stats_bytes < <(get /v1/stats)
read -r metrics_ms metrics_bytes < <(get /metrics)
page="offset=$((volumes / 2))&limit=100"
read -r page_ms page_bytes < <(get "/v1/stats?$page")
read -r mpage_ms mpage_bytes < <(get "/metrics?$page")

job="$work/scale-job.toml"
printf '[defaults]\nrw = "randread"\nbs = "4k"\niodepth = 4\nruntime = "10s"\nramp = "2s"\n' > "$job"
for i in $(seq 0 $((connected - 1))); do
    printf '[[tenant]]\nname = "v%s"\nsocket = "v%s.sock"\n' "$i" "$i" >> "$job"
done
"$bin" bench --job "$job" --socket-dir "$work" --json > "$work/bench.json" &
bench_pid=$!
sleep 6
busy_threads=$(threads)
busy_vrate=$(curl -s --unix-socket "$work/control.sock" http://localhost/v1/stats |
    python3 -c 'import json, sys; print(round(json.load(sys.stdin)["device"]["vrate_pct"]))')
wait "$bench_pid"
read -r min_iops mean_iops < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
iops = [t["iops"] for t in r["results"]]
print(min(iops), sum(iops) / len(iops))' "$work/bench.json")

# SIGTERM while the same volumes are busy again: the daemon completes what is in
# flight, closes every connection and exits.
sed -i 's/^runtime = .*/runtime = "30s"/' "$job"
"$bin" bench --job "$job" --socket-dir "$work" --json > /dev/null 2>&1 &
bench_pid=$!
sleep 4
t2=$(now)
kill -TERM "$daemon_pid"
term_status=0
wait "$daemon_pid" || term_status=$?
t3=$(now)
forget_daemon "$daemon_pid"
# The load generator waits for ever for the requests the daemon answered no more.
kill "$bench_pid" 2>/dev/null || true
wait "$bench_pid" 2>/dev/null || true

echo "scale: $volumes volumes of 1 MiB, $connected connected at QD4 (emulated device)"
echo "| measure | value | target |"
echo "|---|---|---|"
awk -v s="$t0" -v e="$t1" 'BEGIN { printf "| start-up | %.2f s | ≤ 2 s |\n", e - s }'
echo "| threads, all idle | $idle_threads (one volume: $base_threads) | ≤ 50 |"
awk -v f="$idle_fds" -v b="$base_fds" -v n="$volumes" \
    'BEGIN { printf "| descriptors, all idle | %d (one volume: %d): %.2f per idle volume | ≤ 3 per volume |\n", f, b, (f - b) / (n - 1) }'
echo "| GET /v1/stats | $stats_ms ms, $stats_bytes bytes | ≤ 100 ms |"
echo "| GET /metrics | $metrics_ms ms, $metrics_bytes bytes | ≤ 100 ms |"
echo "| GET /v1/stats?$page | $page_ms ms, $page_bytes bytes | |"
echo "| GET /metrics?$page | $mpage_ms ms, $mpage_bytes bytes | |"
awk -v m="$min_iops" -v a="$mean_iops" -v t="$busy_threads" -v c="$connected" -v v="$busy_vrate" \
    'BEGIN { printf "| %d connected at QD4 | slowest %.0f IOPS, mean %.0f: %.2f of the mean; %d threads; vrate %d %% | ≥ 0.5 |\n", c, m, a, m / a, t, v }'
awk -v s="$t2" -v e="$t3" -v c="$connected" -v st="$term_status" \
    'BEGIN { printf "| SIGTERM to exit, %d volumes busy | %.2f s, exit status %d | ≤ 2 s, 0 |\n", c, e - s, st }'
