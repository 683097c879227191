#!/usr/bin/env bash
# Soak: one daemon, 16 volumes, each driven at QD64 with mixed random reads and writes of
# 4k-128k that verify every block they wrote (`bench ... verify=true`), for DURATION
# (default 30 min). Passes when no request fails, no read returns wrong data, every
# request completes (bench returns: a stuck request would hang it), the daemon's RSS after
# the warm-up stays within 5 % of its value at the end of the warm-up, and SIGTERM stops
# it cleanly. QoS is on with the defaults, so admission, parking and the planner are in
# the loop. The daemon log, RSS samples and bench JSON stay in $WORK (target/soak).
#   scripts/soak.sh                  # the run recorded in BENCHMARKS.md
#   DURATION=2m scripts/soak.sh      # a quick look
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${DURATION:-30m}
work=${WORK:-$PWD/target/soak}
volumes=16
cargo build --release --quiet
bin=$PWD/target/release/vhost-iocost
secs=$(python3 -c "import sys; v=sys.argv[1]; u={'s':1,'m':60,'h':3600}[v[-1]]; print(int(float(v[:-1])*u))" "$duration")
warmup=$(( secs / 10 > 60 ? secs / 10 : 60 ))
[ "$warmup" -lt "$secs" ] || { echo "DURATION must exceed 60 s"; exit 1; }

rm -rf "$work" && mkdir -p "$work"
{
    echo "[device]"
    echo "path = \"disk.img\""
    echo "create_size = \"$(( volumes * 64 + 64 ))MiB\""
    echo "[control]"
    echo "socket = \"control.sock\""
    for i in $(seq 0 $((volumes - 1))); do
        echo "[[volume]]"
        echo "name = \"v$i\""
        echo "socket = \"v$i.sock\""
        echo "offset = \"$(( i * 64 ))MiB\""
        echo "size = \"64MiB\""
        echo "num_queues = 2"
    done
} > "$work/config.toml"
sizes=(4k 16k 64k 128k)
{
    echo "[defaults]"
    echo "rw = \"randrw\""
    echo "iodepth = 64"
    echo "runtime = \"${secs}s\""
    echo "verify = true"
    for i in $(seq 0 $((volumes - 1))); do
        echo "[[tenant]]"
        echo "name = \"v$i\""
        echo "socket = \"v$i.sock\""
        echo "bs = \"${sizes[$((i % 4))]}\""
        echo "queues = $(( i % 2 + 1 ))"
    done
} > "$work/job.toml"

(cd "$work" && exec "$bin" run --config config.toml 2>daemon.log) &
daemon=$!
trap 'kill $daemon 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    grep -q 'vhost-iocost running' "$work/daemon.log" 2>/dev/null && break
    sleep 0.1
done
grep -q 'vhost-iocost running' "$work/daemon.log" || { cat "$work/daemon.log"; exit 1; }

# RSS (KiB) every 10 s while the bench runs.
(
    start=$(date +%s)
    while kill -0 "$daemon" 2>/dev/null; do
        rss=$(awk '/^VmRSS/ {print $2}' "/proc/$daemon/status" 2>/dev/null) || break
        echo "$(( $(date +%s) - start )) $rss"
        sleep 10
    done
) > "$work/rss.txt" &
sampler=$!

echo "soak: $volumes volumes x QD64 randrw 4k-128k with verify for $duration (work: $work)"
started=$(date +%s)
(cd "$work" && timeout $(( secs + 120 )) "$bin" bench --job job.toml --json --progress off \
    > bench.json 2> bench.err) || { echo "FAIL: bench failed or hung"; tail "$work/bench.err"; exit 1; }
elapsed=$(( $(date +%s) - started ))
kill "$daemon"
stopped=0
wait "$daemon" && stopped=1
kill "$sampler" 2>/dev/null || true
trap - EXIT

python3 - "$work" "$warmup" "$elapsed" "$stopped" <<'PY'
import json, sys
work, warmup, elapsed, stopped = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
results = json.load(open(f"{work}/bench.json"))["results"]
rss = [tuple(map(int, l.split())) for l in open(f"{work}/rss.txt") if len(l.split()) == 2]
at_warmup = [r for t, r in rss if t <= warmup][-1]
after = [r for t, r in rss if t > warmup]
growth = (max(after) - at_warmup) / at_warmup * 100
requests = sum(r["completed"] for r in results)
errors = sum(r["errors"] for r in results)
bad = sum(r["mismatches"] for r in results)
slowest = min(results, key=lambda r: r["completed"])
print(f"| run | {elapsed} s, {len(results)} volumes x QD64 |")
print(f"| requests completed | {requests:,} ({requests / elapsed:,.0f}/s) |")
print(f"| slowest volume | {slowest['name']}: {slowest['completed']:,} |")
print(f"| I/O errors | {errors} |")
print(f"| verify mismatches | {bad} |")
print(f"| RSS after {warmup} s warm-up | {at_warmup / 1024:.1f} MiB |")
print(f"| RSS max after | {max(after) / 1024:.1f} MiB ({growth:+.1f} %) |")
print(f"| SIGTERM | {'clean exit' if stopped else 'FAILED'} |")
ok = errors == 0 and bad == 0 and growth <= 5.0 and stopped and all(r["completed"] > 0 for r in results)
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
