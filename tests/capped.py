"""Running a piece of test code in a child process whose address space is capped
(`resource.setrlimit`), so that a regression that would take the machine's memory fails the
test instead."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

CAP_GB = 3  # above the child's address space once kaname is loaded: what its code may add


def in_capped_child(code: str, timeout: float = 120) -> dict[str, Any]:
    """Run `code` (which prints one JSON line last) in a child whose address space may grow
    by CAP_GB beyond what it has once kaname and the Gemma vocabulary are loaded."""
    prelude = textwrap.dedent(f"""
        import json, resource, time
        from kaname.runtimes.llamacpp import default_vocab
        from kaname.grammar.budget import Budget
        from kaname.grammar.compiler import GrammarCompiler
        from kaname.grammar.constraints import JsonSchema
        tokenizer = default_vocab().tokenizer
        size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (size + ({CAP_GB} << 30),) * 2)
        def peak_mb():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM"):
                    return int(line.split()[1]) >> 10
    """)
    done = subprocess.run([sys.executable, "-"], input=prelude + textwrap.dedent(code),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
