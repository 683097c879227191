#!/usr/bin/env bash
# Unpacks a QEMU that reconnects after a backend dies in the middle of its handshake
# (QEMU 9.1 or later; Debian 12's 7.2 does not, design §8.14) into the cache directory:
# bookworm-backports' qemu-system-x86, -common and -data, fetched with private apt lists
# (the host's sources and installed QEMU are left alone) and unpacked with `dpkg -x`.
#
# usage: scripts/guest/fetch-qemu.sh [CACHE_DIR]   (default: $GUEST_CACHE or target/guest-cache)
# Prints `QEMU_FIXED=<path of qemu-system-x86_64>` on success; exit status 2 otherwise.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=$(realpath -m "${1:-${GUEST_CACHE:-$repo/target/guest-cache}}")
dir=$cache/qemu-backports
bin=$dir/root/usr/bin/qemu-system-x86_64
say() { echo "fetch-qemu.sh: $*" >&2; }

if [ ! -x "$bin" ]; then
    command -v apt-get >/dev/null 2>&1 || { say "no apt-get"; exit 2; }
    rm -rf "$dir"
    mkdir -p "$dir/lists/partial" "$dir/debs" "$dir/root"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main" \
        > "$dir/sources.list"
    apt_private=(-o "Dir::Etc::sourcelist=$dir/sources.list" -o "Dir::Etc::sourceparts=-"
                 -o "Dir::State::Lists=$dir/lists" -o "Debug::NoLocking=1")
    apt-get "${apt_private[@]}" update -qq >&2 || { say "apt-get update (bookworm-backports) failed"; exit 2; }
    (cd "$dir/debs" && apt-get "${apt_private[@]}" download qemu-system-x86 qemu-system-common qemu-system-data >&2) \
        || { say "apt-get download failed"; exit 2; }
    for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/root"; done
fi
version=$("$bin" --version 2>/dev/null | sed -n 's/^QEMU emulator version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
read -r major minor <<<"${version:-0 0}"
if [ "$major" -lt 9 ] || { [ "$major" = 9 ] && [ "$minor" -lt 1 ]; }; then
    say "$bin is not QEMU 9.1 or later (${version:-does not run})"
    exit 2
fi
echo "QEMU_FIXED=$bin"
