#!/usr/bin/env python3
"""Migrates a TCG guest between two QEMUs on this host, with the migration held back until
the guest has read a verified region through its page cache after the first pass, then
let converge; prints one line per run and keeps the destination console of a failed run.

usage: scripts/migration-stress.py DIR SOCKET HANDOVER_SOCKET [RUNS]

SOCKET and HANDOVER_SOCKET are the two vhost-user sockets of one 256+ MiB volume: the
daemon's `<socket>` and `<socket>.handover`, or two qemu-storage-daemon exports of one
node, for example:

  qemu-storage-daemon --blockdev driver=file,node-name=f,filename=disk.img,cache.direct=on \\
    --export type=vhost-user-blk,id=a,node-name=f,addr.type=unix,addr.path=vm.sock,writable=on,num-queues=2 \\
    --export type=vhost-user-blk,id=b,node-name=f,addr.type=unix,addr.path=vm.sock.handover,writable=on,num-queues=2

DIR takes the consoles, QMP and migration sockets. BENCHMARKS.md (Live migration on one
host) has the results.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_GUEST = os.path.join(HERE, "guest", "run-guest.sh")
JOBS = [
    ["name=fill", "direct=1", "ioengine=libaio", "rw=write", "bs=1M", "size=48M",
     "verify=crc32c", "do_verify=0"],
    # Writes 1 MiB of buffers over and over: the throttled migration cannot converge.
    ["name=writer", "stonewall", "exec_prerun=/bin/true", "direct=1", "ioengine=libaio",
     "rw=randwrite", "bs=64k", "iodepth=16", "offset=64M", "size=32M", "verify=crc32c",
     "do_verify=0", "time_based=1", "runtime=25"],
    # Waits for the second "go": reads the region into the page cache ...
    ["name=cache", "direct=0", "invalidate=1", "rw=read", "bs=1M", "size=48M",
     "verify=crc32c"],
    # ... and checks it from there, before and after the switch.
    ["name=recheck", "wait_for=cache", "exec_prerun=/bin/true", "direct=0", "invalidate=0",
     "rw=read", "bs=1M", "size=48M", "verify=crc32c", "time_based=1", "runtime=10"],
]


def qmp(path):
    deadline = time.time() + 30
    while True:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            break
        except OSError:
            s.close()
            if time.time() > deadline:
                raise
            time.sleep(0.1)
    f = s.makefile("rw")
    f.readline()

    def execute(name, **args):
        f.write(json.dumps({"execute": name, "arguments": args}) + "\n")
        f.flush()
        while True:
            r = json.loads(f.readline())
            if "return" in r:
                return r["return"]
            if "error" in r:
                raise RuntimeError(f"{name}: {r['error']}")

    execute("qmp_capabilities")
    return execute


def text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def wait(cond, secs=120):
    deadline = time.time() + secs
    while not cond():
        if time.time() > deadline:
            raise TimeoutError
        time.sleep(0.1)


def one_run(d, sock, handover, image):
    for f in ["src.log", "dst.log", "mig.sock", "src.qmp", "dst.qmp"]:
        if os.path.exists(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
    fio = [f"fio.{o}" for job in JOBS for o in [job[0], "filename=/dev/vda"] + job[1:]]
    args = ["--timeout", "120", "--kernel", image[0], "--initrd", image[1]]
    kernel = ["--", "harness.wait=1", "init_on_alloc=0"] + fio
    src = subprocess.Popen([RUN_GUEST, "--socket", sock, "--log", f"{d}/src.log", "--qmp",
                            f"{d}/src.qmp"] + args + kernel,
                           stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
    wait(lambda: "HARNESS: ready" in text(f"{d}/src.log"))
    dst = subprocess.Popen([RUN_GUEST, "--socket", handover, "--log", f"{d}/dst.log", "--qmp",
                            f"{d}/dst.qmp", "--incoming", f"unix:{d}/mig.sock"] + args + kernel,
                           stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait(lambda: os.path.exists(f"{d}/mig.sock"))

    def go():
        src.stdin.write(b"go\n")
        src.stdin.flush()

    go()
    wait(lambda: text(f"{d}/src.log").count("HARNESS: ready") >= 2)
    q = qmp(f"{d}/src.qmp")
    q("migrate-set-parameters", **{"max-bandwidth": 32 << 20, "downtime-limit": 1})
    q("migrate", uri=f"unix:{d}/mig.sock")
    wait(lambda: q("query-migrate").get("ram", {}).get("dirty-sync-count", 0) >= 2)
    go()
    time.sleep(4)  # the 48 MiB read takes 1-2 s here
    q("migrate-set-parameters", **{"max-bandwidth": 1 << 30, "downtime-limit": 300})
    wait(lambda: q("query-migrate")["status"] in ("completed", "failed"))
    status = q("query-migrate")["status"]
    rc = dst.wait()
    src.terminate()
    src.wait()
    console = text(f"{d}/dst.log")
    bad = sorted(set(re.findall(r"Oops|RIP:|verify: bad|bad magic|Kernel panic|BUG:", console)))
    fio_rc = re.search(r"HARNESS: fio exited rc=(\d+)", console)
    ok = status == "completed" and rc == 0 and not bad and fio_rc and fio_rc.group(1) == "0"
    print(f"migration {status}, destination exit {rc}, fio rc "
          f"{fio_rc.group(1) if fio_rc else None}, problems {bad}: {'ok' if ok else 'FAILED'}",
          flush=True)
    if not ok:
        kept = f"{d}/dst-failed-{int(time.time())}.log"
        shutil.copy(f"{d}/dst.log", kept)
        print(f"  destination console kept at {kept}", flush=True)
    return ok


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    d, sock, handover = (os.path.abspath(a) for a in sys.argv[1:4])
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    out = subprocess.run([os.path.join(HERE, "guest", "prepare.sh")], check=True,
                         capture_output=True, text=True).stdout
    field = lambda k: next(l[len(k):] for l in out.splitlines() if l.startswith(k))
    image = (field("KERNEL="), field("INITRD="))
    failed = sum(not one_run(d, sock, handover, image) for _ in range(runs))
    print(f"{failed} of {runs} runs failed")


if __name__ == "__main__":
    main()
