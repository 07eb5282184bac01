"""What a compile's memory budget (grammar/budget.py) costs a real agent request: each
recorded agent request (tests/data/agent_requests), max tokens 1, the compile cache off so
that every request compiles, through the app in process (--model random, format qwen3). Run it
twice, `on` and `off` (the budget disabled), alone; it prints the median of 3 per request.

    .venv/bin/python scripts/bench_compile_budget.py on
    .venv/bin/python scripts/bench_compile_budget.py off
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from fastapi.testclient import TestClient

from kaname.cli import _runtime_for_format
from kaname.grammar.compiler import GrammarCompiler
from kaname.server import ServerConfig, build_app

REQUESTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "agent_requests"


def main(mode: str) -> None:
    if mode == "off":
        assert GrammarCompiler.__init__.__kwdefaults__ is not None
        GrammarCompiler.__init__.__kwdefaults__["budget"] = None
    app = build_app(ServerConfig(model="random", format="qwen3", compile_cache_mb=0),
                    _runtime_for_format)
    with TestClient(app, raise_server_exceptions=False) as client:
        for path in sorted(REQUESTS.glob("*/0*.json")):
            recorded = json.loads(path.read_text())
            body = {**recorded["body"], "stream": False, "model": "random"}
            limit = "max_output_tokens" if recorded["path"] == "/v1/responses" else "max_tokens"
            body[limit] = 1
            times = []
            for _ in range(3):
                start = time.perf_counter()
                r = client.post(recorded["path"].split("?")[0], json=body)
                times.append(time.perf_counter() - start)
            print(f"{mode} {path.parent.name}/{path.name} {r.status_code} "
                  f"median {statistics.median(times):.3f} s, tools "
                  f"{len(json.dumps(body.get('tools', [])))} chars", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
