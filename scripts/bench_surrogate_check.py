"""Cost of the lone-surrogate check every request body passes (edges/common.py
`lone_surrogate`): the C encoder's answer for clean bodies, the walk that names the string for
a body that has one. Best of 3 per body."""

from __future__ import annotations

import json
import time

from kaname.edges.common import lone_surrogate

BODIES = {
    "15k messages of non-ASCII text": {"messages": [
        {"role": "user", "content": "héllo wörld " * 20} for _ in range(15_000)]},
    "800k small values": {"x": [[i, "abc", {"k": "v"}] for i in range(200_000)]},
    "800k small values, a lone surrogate last": {
        "x": [[i, "abc", {"k": "v"}] for i in range(200_000)] + ["\ud800"]},
}

for name, body in BODIES.items():
    size = len(json.dumps(body)) / 2**20
    times = []
    for _ in range(3):
        t = time.perf_counter()
        lone_surrogate(body)
        times.append(time.perf_counter() - t)
    print(f"| {name} | {size:.1f} MiB | {min(times) * 1000:.0f} ms |")
