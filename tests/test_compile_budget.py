"""A compile's memory budget (grammar/budget.py): a large constraint is compiled first in a
forked child capped in memory; what would take the server's memory takes the child's, and the
request gets a 400 naming the budget."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import pytest
from capped import in_capped_child

from kaname.errors import UnsupportedSchemaError
from kaname.grammar.budget import Budget
from kaname.grammar.compiler import GrammarCompiler
from kaname.grammar.constraints import JsonSchema


def blow_up(n: int = 1_000) -> dict:
    """llguidance's minProperties over n optional properties: ~n² symbols, built whole
    (2.8 GB at 1,000 before costs.py named it), here with costs.py's check switched off to
    stand for a construction nobody has named yet."""
    return {"type": "object", "additionalProperties": False, "minProperties": 1,
            "properties": {f"name{i:05d}": {"type": "string"} for i in range(n)}}


@pytest.fixture
def unnamed(monkeypatch):
    import kaname.grammar.lark as lark

    monkeypatch.setattr(lark, "cost_error", lambda *a, **k: None)


def test_a_compile_past_the_budget_is_a_400_and_the_server_keeps_its_memory():
    """Run under an address-space cap (capped.py): without the budget, the compile here would
    take the child down and the test would fail, not the machine."""
    result = in_capped_child(f"""
        import kaname.grammar.lark as lark
        from kaname.grammar.cache import resident_bytes
        lark.cost_error = lambda *a, **k: None
        compiler = GrammarCompiler(tokenizer, cache_bytes=0,
                                   budget=Budget(memory_bytes=384 << 20))
        before, start = resident_bytes(), time.monotonic()
        out = {{}}
        for attempt in range(2):
            try:
                compiler.compile(JsonSchema(json.loads({json.dumps(json.dumps(blow_up()))})))
                out["compiled"] = True
            except Exception as e:
                out[f"error{{attempt}}"] = [type(e).__name__, str(e)]
        out.update(seconds=time.monotonic() - start, misses=compiler.misses,
                   grown_mb=(resident_bytes() - before) / (1 << 20))
        print(json.dumps(out))
    """)
    assert "compiled" not in result, result
    assert result["error0"][0] == "GrammarTooComplexError", result
    assert "compile memory budget of 384 MB" in result["error0"][1]
    assert result["error1"] == result["error0"] and result["misses"] == 1  # remembered
    assert result["seconds"] < 20 and result["grown_mb"] < 64, result


@pytest.fixture
def children(monkeypatch) -> list[object]:
    """What each probe's child returned (so a test knows a child ran)."""
    import kaname.grammar.compiler as compiler_module
    from kaname.grammar import budget

    ran: list[object] = []

    def counted(*args, **kwargs):
        try:
            out = budget.probe(*args, **kwargs)
        except Exception as e:
            ran.append(e)
            raise
        ran.append(out)
        return out

    monkeypatch.setattr(compiler_module, "probe", counted)
    return ran


def test_what_the_child_refuses_is_the_same_error(gemma, children):
    props = {f"p{i}": {"type": "string"} for i in range(600)}
    schema = {"type": "object", "properties": {**props, "t": {"type": "array",
                                                              "uniqueItems": True,
                                                              "items": {"type": "string"}}}}
    errors = []
    for budget in (Budget(min_bytes=0), None):
        with pytest.raises(UnsupportedSchemaError) as e:
            GrammarCompiler(gemma.tokenizer, cache_bytes=0, budget=budget).compile(
                JsonSchema(schema))
        errors.append((type(e.value), e.value.message, e.value.keyword, e.value.pointer))
    assert errors[0] == errors[1]
    assert len(children) == 1 and isinstance(children[0], UnsupportedSchemaError)


def test_a_probed_compile_is_the_compile(gemma, children):
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(600)}}
    probed = GrammarCompiler(gemma.tokenizer, cache_bytes=0,
                             budget=Budget(min_bytes=0)).compile(JsonSchema(schema))
    plain = GrammarCompiler(gemma.tokenizer, cache_bytes=0, budget=None).compile(
        JsonSchema(schema))
    assert probed.grammar == plain.grammar and probed.not_enforced == plain.not_enforced
    assert children == [None]  # the child compiled it (no long forced run to pass back)


def test_a_child_that_cannot_finish_within_the_budget_is_a_400():
    """However the child fails for want of address space (here an mmap: OSError, not
    MemoryError; `_on_big_stack`'s 512 MiB thread stacks fail so, as RuntimeError), the
    compile is refused, not run uncapped."""
    import mmap

    from kaname.errors import GrammarTooComplexError
    from kaname.grammar.budget import probe

    def heavy() -> object:
        with mmap.mmap(-1, 400 << 20) as area:
            return len(area)

    with pytest.raises(GrammarTooComplexError) as e:
        probe(heavy, Budget(memory_bytes=256 << 20))
    assert "within the compile budget (OSError" in e.value.message
    assert probe(heavy, Budget(memory_bytes=512 << 20)) == 400 << 20


def _children() -> set[int]:
    me = str(os.getpid())
    found = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines()
                          if ":\t" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == me:
            found.add(int(status.parent.name))
    return found


def test_an_abandoned_compile_stops_its_child(gemma, unnamed):
    """The request's deadline passes (or its client leaves): the worker is abandoned, and the
    child compiling for it is killed, not left to run to its budget."""
    from kaname.server.workers import Workers

    compiler = GrammarCompiler(gemma.tokenizer, cache_bytes=0,
                               budget=Budget(memory_bytes=4 << 30))
    workers = Workers(2)
    existing = _children()

    async def give_up() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(workers.run(lambda: compiler.compile(
                JsonSchema(blow_up(3_000)))), timeout=1.0)

    seen: set[int] = set()

    def watch() -> None:
        while not done.is_set():
            seen.update(_children() - existing)
            time.sleep(0.05)

    done = threading.Event()
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        asyncio.run(give_up())
        done.set()
        watcher.join()
        assert seen, "no child was forked"
        deadline = time.monotonic() + 5
        while _children() - existing and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _children() - existing
    finally:
        workers.shutdown()
