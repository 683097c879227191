#!/usr/bin/env python3
"""Where a request's time goes: one traced run of the daemon and the bench client
(VHOST_IOCOST_STAGE_TRACE, src/stage_trace.rs) cut into the stages of its round trips.

usage: stage_breakdown.py PREFIX   (reads PREFIX.daemon and PREFIX.client)
prints one JSON object: the median of each stage in microseconds and the rounds traced.

One client thread on one queue goes round a cycle: its wait returns with completions (W),
it queues new requests and kicks (K), the daemon pops the first of them (P), parses them
and submits them to the kernel (S..s, several times for a batch), the device answers and
the daemon reaps (R), completes them on the used ring (U) and notifies the client (N,
unless it polls), which wakes or, polling, sees them (W).
"""
import json
import statistics
import sys


def load(prefix):
    events = []
    for role in ("daemon", "client"):
        with open(f"{prefix}.{role}") as f:
            for line in f:
                letter, at, n = line.split()
                events.append((int(at), letter, int(n)))
    events.sort()
    return events


def cycles(events):
    """Yields one dict of stage durations (ns) per complete round trip."""
    woke = waits = popped = reaped = published = None
    submit_start = last_submit = None
    in_kernel = 0
    for at, letter, n in events:
        if letter == "W":
            if published is not None and last_submit is not None:
                yield {
                    "client sees the completions (published to client running)": at - published,
                    "client: completions to new requests": cycle["client"],
                    "client submits to daemon popping": cycle["kick"],
                    "daemon: parse and map (user)": last_submit - popped - in_kernel,
                    "daemon: submit system calls (kernel)": in_kernel,
                    "device, and the daemon waking for it (last submit to reap)": reaped - last_submit,
                    "daemon: complete (reap to used ring)": published - reaped,
                }
            woke, waits, popped, reaped, published = at, None, None, None, None
            submit_start = last_submit = None
            in_kernel = 0
            cycle = {}
        elif letter == "K" and woke is not None and waits is None:
            waits = at
            cycle["client"] = at - woke
        elif letter == "P" and waits is not None and popped is None:
            popped = at
            cycle["kick"] = at - waits
        elif letter == "S" and popped is not None and reaped is None:
            submit_start = at
        elif letter == "s" and submit_start is not None and reaped is None and n > 0:
            in_kernel += at - submit_start
            last_submit = at
            submit_start = None
        elif letter == "R" and popped is not None and reaped is None:
            # The null device completes without the kernel: no submit, no device time.
            last_submit = last_submit or at
            reaped = at
        elif letter == "U" and reaped is not None and published is None:
            published = at


def main():
    traced = list(cycles(load(sys.argv[1])))
    if not traced:
        sys.exit("no complete round trip in the trace")
    stages = {
        name: statistics.median(c[name] for c in traced) / 1000 for name in traced[0]
    }
    print(json.dumps({"round_trips": len(traced), "stages_us": stages}))


if __name__ == "__main__":
    main()
