#!/usr/bin/env bash
# Is one build of the daemon faster than another on the data path? Runs each given
# binary in turn, round by round in rotating order (so drift on this shared machine hits
# all of them), against the null device: one volume, 4 KiB random reads at QD$QD through
# `bench` (the first binary's), QoS as the daemon's defaults leave it unless QOS= gives a
# [device.qos] body. Prints the IOPS of each binary per round; compare medians.
#
# Usage: scripts/bench-ab.sh BIN_A BIN_B [BIN_C...]   (ROUNDS=6 QD=32 SECS=4 QOS=)
# A build of another commit: git worktree add /tmp/old REV &&
#   (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release)
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,9p "$0"; exit 1; }
rounds=${ROUNDS:-6}
qd=${QD:-32}
secs=${SECS:-4}
bins=("$@")
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
{
    printf '[device]\nkind = "null"\ncreate_size = "1GiB"\n'
    if [ -n "${QOS:-}" ]; then printf '[device.qos]\n%s\n' "$QOS"; fi
    printf '[[volume]]\nname = "v"\nsocket = "v.sock"\nsize = "512MiB"\n'
} > "$work/config.toml"

# iops BIN: the daemon built as BIN serving the config, measured by the first binary.
iops() {
    (cd "$work" && exec "$1" run --config config.toml >daemon.log 2>&1) &
    pid=$!
    for _ in $(seq 200); do [ -S "$work/v.sock" ] && break; sleep 0.05; done
    (cd "$work" && "${bins[0]}" bench --tenant "socket=v.sock,rw=randread,bs=4k,iodepth=$qd" \
        --runtime "${secs}s" --ramp 1s --json) |
        python3 -c "import json, sys; print(round(json.load(sys.stdin)['results'][0]['iops']))"
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
    rm -f "$work/v.sock"
}

n=${#bins[@]}
for round in $(seq "$rounds"); do
    line="round $round:"
    for k in $(seq 0 $((n - 1))); do
        b=${bins[$(((k + round) % n))]}
        line+=" $b=$(iops "$b")"
    done
    echo "$line"
done
