#!/usr/bin/env python3
"""Takes the CPUs away in bursts, as a busy hypervisor does, to reproduce a noisy host.

    scripts/steal-cpu.py BUSY_MS PERIOD_MS [SECONDS]

One process per CPU, pinned and at SCHED_FIFO priority 50 (root), spins for BUSY_MS
(0.5-1.5x, at random) of every PERIOD_MS, for SECONDS (default: until interrupted).
The time it takes shows as ordinary CPU time, not as steal. Example: `0.3 3` takes a
tenth of each CPU in 0.3 ms bites, `60 300` a fifth in 60 ms ones.
"""
import os
import random
import sys
import time


def spin(cpu, busy, period, until):
    os.sched_setaffinity(0, {cpu})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
    while time.monotonic() < until:
        start = time.monotonic()
        while time.monotonic() - start < busy * random.uniform(0.5, 1.5):
            pass
        time.sleep(max(period - busy, 0))


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    busy, period = float(sys.argv[1]) / 1e3, float(sys.argv[2]) / 1e3
    if not 0 < busy < period:
        sys.exit("BUSY_MS must be above 0 and below PERIOD_MS")
    seconds = float(sys.argv[3]) if len(sys.argv) == 4 else float("inf")
    until = time.monotonic() + seconds
    children = []
    for cpu in sorted(os.sched_getaffinity(0)):
        pid = os.fork()
        if pid == 0:
            try:
                spin(cpu, busy, period, until)
            except KeyboardInterrupt:
                pass
            os._exit(0)
        children.append(pid)
    try:
        for pid in children:
            os.waitpid(pid, 0)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
