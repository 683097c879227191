#!/usr/bin/env python3
"""Where a request's time goes: one traced run of the daemon and the bench client
(VHOST_IOCOST_STAGE_TRACE, src/stage_trace.rs) cut into the stages of its round trips.

usage: stage_breakdown.py PREFIX   (reads PREFIX.daemon and PREFIX.client)
prints one JSON object: the mean of each stage in microseconds over the round trips
traced, how many there were, and how many completions the daemon reaped at a time.

One client thread on one queue goes round a cycle: its wait returns with completions (W),
it queues new requests and kicks (K), the daemon pops the first of them (P), parses them
and submits them to the kernel (S..s, several times for a batch), the device answers and
the daemon reaps (R), puts the first completion on the used ring (U) and, after the rest
of its batch, notifies the client (N; a client that polls its queue asks for none), which
wakes or, polling, sees them (W).

The cycle is exact at QD1. At a deeper queue it holds while the client and the daemon
move whole batches in step (the daemon reaping the whole queue depth at a time, which
`completions_per_reap` shows); otherwise a reap may belong to an older batch, and the
stages blur.
"""
import collections
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
    woke = waits = popped = reaped = published = notified = None
    submit_start = last_submit = None
    in_kernel = 0
    cycle = {}
    for at, letter, n in events:
        if letter == "W":
            visible = notified if notified is not None else published
            if visible is not None and last_submit is not None:
                yield {
                    "client woken, or seeing the completions if it polls": at - visible,
                    "client: completions to new requests": cycle["client"],
                    "client submits to daemon popping": cycle["kick"],
                    "daemon: parse and map (user)": last_submit - popped - in_kernel,
                    "daemon: submit system calls (kernel)": in_kernel,
                    "device, and the daemon waking for it (last submit to reap)": reaped
                    - last_submit,
                    "daemon: complete, to the notification (or the used entries published)": visible
                    - reaped,
                }
            woke, waits, popped, reaped, published, notified = at, None, None, None, None, None
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
        elif letter == "s" and submit_start is not None and reaped is None:
            in_kernel += at - submit_start
            submit_start = None
            if n > 0:
                last_submit = at
        elif letter == "R" and popped is not None and reaped is None:
            # The null device completes without the kernel: no submit, no device time.
            last_submit = last_submit or at
            reaped = at
        elif letter == "U" and reaped is not None and published is None:
            published = at
        elif letter == "N" and reaped is not None and notified is None:
            notified = at


def main():
    events = load(sys.argv[1])
    traced = list(cycles(events))
    if not traced:
        sys.exit("no complete round trip in the trace")
    stages = {name: statistics.mean(c[name] for c in traced) / 1000 for name in traced[0]}
    reaps = collections.Counter(n for _, letter, n in events if letter == "R")
    count, times = reaps.most_common(1)[0]
    print(json.dumps({
        "round_trips": len(traced),
        "client_wake_ups": sum(1 for _, letter, _ in events if letter == "W"),
        "stages_us": stages,
        "completions_per_reap": {
            "mean": sum(n * k for n, k in reaps.items()) / sum(reaps.values()),
            "most_common": count,
            "its_share": times / sum(reaps.values()),
        },
    }))


if __name__ == "__main__":
    main()
