#!/usr/bin/env python3
"""Writes the hand-made seeds of the fuzz corpora (the rest of each corpus is what
libFuzzer found, minimised with `cargo fuzz cmin`)."""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
NEXT, WRITE, INDIRECT = 1, 2, 4
IN, OUT, FLUSH, GET_ID, DISCARD, WRITE_ZEROES = 0, 1, 4, 8, 11, 13


def put(mem, addr, data):
    mem[addr:addr + len(data)] = data


def desc(addr, length, flags, nxt):
    return struct.pack("<QIHH", addr, length, flags, nxt)


def header(kind, sector):
    return struct.pack("<IIQ", kind, 0, sector)


def split_queue(chains, extra=()):
    """chains: lists of (addr, len, flags) from descriptor index 0 on, one avail entry
    per chain; extra: (addr, bytes) to place."""
    mem = bytearray(0x6000)
    index = 0
    heads = []
    for chain in chains:
        heads.append(index)
        for n, (addr, length, flags) in enumerate(chain):
            last = n == len(chain) - 1
            f = flags | (0 if last else NEXT)
            put(mem, index * 16, desc(addr, length, f, 0 if last else index + 1))
            index += 1
    put(mem, 0x1000, struct.pack("<HH", 0, len(heads)))
    for n, head in enumerate(heads):
        put(mem, 0x1004 + 2 * n, struct.pack("<H", head))
    for addr, data in extra:
        put(mem, addr, data)
    control = 4  # queue size 16
    return bytes([control]) + bytes(mem)


def write(target, name, data):
    with open(os.path.join(HERE, "corpus", target, name), "wb") as f:
        f.write(data)


status = (0x3f00, 1, WRITE)
read = [(0x3000, 16, 0), (0x4000, 4096, WRITE), status]
write_ = [(0x3010, 16, 0), (0x4000, 512, 0), (0x4200, 512, 0), status]
flush = [(0x3020, 16, 0), status]
discard = [(0x3030, 16, 0), (0x3040, 16, 0), status]
get_id = [(0x3050, 16, 0), (0x3100, 20, WRITE), status]
headers = [
    (0x3000, header(IN, 8)),
    (0x3010, header(OUT, 2040)),
    (0x3020, header(FLUSH, 0)),
    (0x3030, header(DISCARD, 0)),
    (0x3040, struct.pack("<QII", 16, 8, 0)),
    (0x3050, header(GET_ID, 0)),
]
write("split_queue", "read", split_queue([read], headers))
write("split_queue", "mixed", split_queue([read, write_, flush, discard, get_id], headers))
# An indirect table at 0x5000 holding the read's three descriptors.
table = b"".join(
    desc(a, l, f | (NEXT if i < 2 else 0), i + 1 if i < 2 else 0)
    for i, (a, l, f) in enumerate(read)
)
write("split_queue", "indirect",
      split_queue([[(0x5000, len(table), INDIRECT)]], headers + [(0x5000, table)]))

bodies = [
    (0, {"rpct": 95, "rlat": "5ms", "wpct": 95, "wlat": "10ms", "min": 50, "max": 150}),
    (0, {"enable": False}),
    (1, {"rbps": 1000000000, "rseqiops": 100000, "rrandiops": 80000,
         "wbps": 500000000, "wseqiops": 50000, "wrandiops": 40000}),
    (1, {"preset": "ssd"}),
    (2, {"weight": 300}),
    (3, {"weight": 50, "group": "root"}),
]
for n, (route, body) in enumerate(bodies):
    write("rest_bodies", f"body-{n}", bytes([route]) + json.dumps(body).encode())

root = os.path.dirname(HERE)
for sub in ("configs", "configs/bench", "configs/sim"):
    for name in sorted(os.listdir(os.path.join(root, sub))):
        if name.endswith(".toml"):
            shutil.copy(os.path.join(root, sub, name),
                        os.path.join(HERE, "corpus", "config_parse", f"{sub.replace('/', '-')}-{name}"))
