"""Memory bounds that hold in memory, not in an estimate: the Responses store counts what it
keeps, and the compile cache what its entries cost the process."""

from __future__ import annotations

import tracemalloc

from kaname.server.responses_api import ResponseStore


def a_response(i: int, size: int) -> tuple[dict, list]:
    """A stored response of about `size` bytes of JSON, mostly many small objects: what
    grew ten times in memory when it was kept as Python objects."""
    rows = [{"id": f"r{i}-{j}", "qty": j, "ok": True, "tags": ["a", "b"]}
            for j in range(size // 60)]
    new = [({"role": "user", "content": [{"type": "input_text", "text": str(rows)}]}, "/input")]
    response = {"id": f"resp_{i}", "object": "response", "tools": [{"rows": rows}],
                "output": [{"type": "message", "role": "assistant",
                            "content": [{"type": "output_text", "text": "ok"}]}]}
    return response, new


def test_the_response_store_holds_what_it_counts():
    bound = 16 << 20
    store = ResponseStore(max_bytes=bound)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(40):  # ~0.68 MB of JSON each: past the bound
            response, new = a_response(i, 680_000)
            store.put(response, (), new, None)
            del response, new
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert store._bytes <= bound
    assert held <= bound * 1.1 + (1 << 20), held  # what it holds is what it counts
    kept = [i for i in range(40) if store.get(f"resp_{i}") is not None]
    assert kept == list(range(40 - len(kept), 40)) and len(kept) >= 10


def test_a_stored_response_reads_back_and_continues():
    store = ResponseStore()
    response, new = a_response(0, 2_000)
    store.put(response, (), new, None)
    first = store.get("resp_0")
    assert first is not None and first.response == response
    assert first.chain == (*new, (response["output"][0], "/previous_response_id"))
    more = [({"role": "user", "content": "and then?"}, "/input")]
    store.put({"id": "resp_1", "output": []}, first.chain, more, first)
    second = store.get("resp_1")
    assert second is not None and second.chain == (*first.chain, *more)
    assert second.size > first.size  # it keeps its parent alive, and counts it


def resident_mb() -> float:
    from kaname.grammar.cache import resident_bytes

    return resident_bytes() / (1 << 20)


def test_the_compile_cache_counts_what_an_entry_cost(gemma, monkeypatch):
    """With an estimate that says nothing (1 byte an entry), the cache still holds no more
    than its bound, since it counts what the process grew by while compiling: 24 distinct
    regexes that cost MBs each grow resident memory by at most the bound plus a constant
    (measured here: 13 entries kept, +76 MB; counting the estimate alone kept all 25 entries,
    +141 MB)."""
    import random

    import kaname.grammar.compiler as compiler_module
    from kaname.grammar.compiler import GrammarCompiler
    from kaname.grammar.constraints import Regex

    monkeypatch.setattr(compiler_module, "compiled_size", lambda *a, **k: 1)
    bound = 32 << 20
    compiler = GrammarCompiler(gemma.tokenizer, cache_bytes=bound)
    rng = random.Random(7)

    def regex() -> Regex:
        return Regex("(" + "|".join("".join(rng.choice("abcdefghijklmnop") for _ in range(9))
                                    for _ in range(10_000)) + ")")

    compiler.compile(regex())  # the first one's allocations: not the cache's
    start = resident_mb()
    for _ in range(24):
        compiler.compile(regex())
    assert compiler.cache.bytes <= bound
    assert len(compiler.cache) < 24
    assert resident_mb() - start < bound / (1 << 20) + 64, resident_mb() - start
