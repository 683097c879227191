#!/usr/bin/env bash
# What the disk itself allows a QD1 4 KiB random reader next to a writer, with no daemon
# and no QoS: fio directly on a 2 GiB file, the writer (sequential, QD8) held at fixed
# bandwidths by fio's own rate limiter, i.e. perfectly paced. If the reader keeps less
# than half its solo IOPS here with the writer at half its solo bandwidth, no admission
# scheduler in front of this disk can give both tenants half (BENCHMARKS.md, "What a
# paced writer leaves the reader").
#   usage: scripts/bench-frontier.sh [RUNTIME_SECONDS]      (needs: fio)
#   RATES="600 850 1000 1200" ...    writer bandwidths to try, MiB/s (default)
#   WRITER_BS=1M ...                 the writer's block size (default 1M)
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-8}
source scripts/lib.sh
wbs=${WRITER_BS:-1M}
bs_kib=$(numfmt --from=iec "$wbs" | awk '{ print $1 / 1024 }')
fill_file "$work/disk.img" 2G
reader="socket=unused,name=reader,rw=randread,bs=4k,iodepth=1"
writer="socket=unused,name=writer,rw=write,bs=$wbs,iodepth=8"
bench() { "$bin" bench --runtime "${runtime}s" --ramp 1s --fio-file "$work/disk.img" "$@" 2>/dev/null | tail -n +2; }
probe() { settle "$bin" bench --runtime 2s --fio-file "$work/disk.img" --tenant "$reader"; }
probe
solo_r=$(bench --tenant "$reader" | awk '{ print $5 }')
solo_w=$(bench --tenant "$writer" | awk '{ print $6 }')
echo "solo: reader $solo_r IOPS, writer $solo_w MiB/s (write $wbs QD8)"
for rate in ${RATES:-600 850 1000 1200}; do
    probe
    iops=$(awk -v r="$rate" -v k="$bs_kib" 'BEGIN { printf "%d", r * 1024 / k }')
    bench --tenant "$reader" --tenant "$writer,rate_iops=$iops" | awk -v sr="$solo_r" -v sw="$solo_w" -v rate="$rate" '
        $1 == "reader" { r = $5; p99 = $8 } $1 == "writer" { w = $6 }
        END { printf "writer held at %5d MiB/s (%3.0f %% of solo): reader %6d IOPS (%3.0f %% of solo), p99 %s us\n",
              w, 100 * w / sw, r, 100 * r / sr, p99 }'
done
probe
echo "solo reader again: $(bench --tenant "$reader" | awk '{ print $5 }') IOPS"
