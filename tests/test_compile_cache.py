"""The compiler's memory: a byte-bounded LRU of compiled constraints (sizes estimated honestly)
and of refused ones, which are answered again from memory with the same error."""

from __future__ import annotations

import random
import string
from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from kaname.errors import ConstraintError, InvalidRegexError
from kaname.grammar import GrammarCompiler, Guards, Regex
from kaname.grammar.cache import ByteLRU, compiled_size

KEYS = st.sampled_from([f"k{i}" for i in range(8)])
OPS = st.lists(st.one_of(st.tuples(st.just("put"), KEYS, st.integers(0, 120)),
                         st.tuples(st.just("get"), KEYS, st.just(0))), max_size=60)


class ModelLRU:
    """The behaviour asked for, written the plain way: evict least recently used first until
    the new entry fits; an entry over the whole budget is not kept."""

    def __init__(self, budget: int):
        self.budget = budget
        self.entries: OrderedDict[str, int] = OrderedDict()

    def put(self, key: str, size: int) -> None:
        size = max(size, 1)
        self.entries.pop(key, None)
        if size > self.budget:
            return
        while sum(self.entries.values()) + size > self.budget:
            self.entries.popitem(last=False)
        self.entries[key] = size

    def get(self, key: str) -> bool:
        if key in self.entries:
            self.entries.move_to_end(key)
            return True
        return False


@settings(max_examples=300, deadline=None)
@given(budget=st.integers(0, 300), ops=OPS)
def test_byte_lru_is_never_over_budget_and_keeps_the_most_recent(budget, ops):
    lru: ByteLRU[str] = ByteLRU(budget)
    model = ModelLRU(budget)
    for op, key, size in ops:
        if op == "put":
            kept = lru.put(key, f"value of {key} ({size})", size)
            model.put(key, size)
            assert kept == (max(size, 1) <= budget)
            if kept:  # the most recent entry is always kept
                assert lru.get(key) == f"value of {key} ({size})"
                model.get(key)
        else:
            assert (lru.get(key) is not None) == model.get(key)
        assert lru.bytes <= budget
        assert lru.bytes == sum(model.entries.values())
        assert {k for k in model.entries} == {k for k in (f"k{i}" for i in range(8)) if k in lru}


class Interrupted(BaseException):
    pass


def test_an_update_interrupted_half_way_leaves_a_working_lru(monkeypatch):
    """As an abandoned compile's thread is stopped (an exception at any instruction): between
    cachetools storing an entry and ordering it. The LRU starts afresh, and stays bounded."""
    import cachetools

    lru: ByteLRU[str] = ByteLRU(100)
    lru.put("a", "A", 40)
    store = cachetools.Cache.__setitem__

    def half_way(self, key, value):  # stored, then stopped before the order is updated
        store(self, key, value)
        raise Interrupted

    monkeypatch.setattr(cachetools.LRUCache.__setitem__, "__defaults__", (half_way,))
    try:
        lru.put("b", "B", 40)
    except Interrupted:
        pass
    monkeypatch.undo()
    for i in range(20):  # every entry can be evicted again
        assert lru.put(f"k{i}", "v", 30)
        assert lru.bytes <= 100
    assert "b" not in lru and len(lru) == 3


def test_a_refused_constraint_is_answered_from_memory(gemma):
    c = GrammarCompiler(gemma.tokenizer)
    errors = []
    for _ in range(3):
        try:
            c.compile(Regex("(unclosed[a-z]+"))
        except ConstraintError as e:
            errors.append(e)
    assert len(errors) == 3 and (c.misses, c.hits) == (1, 2)
    assert {(type(e), e.message, e.keyword, e.pointer) for e in errors} == \
        {(InvalidRegexError, errors[0].message, errors[0].keyword, errors[0].pointer)}
    assert errors[1] is not errors[2]  # a fresh exception each time, not one re-raised
    # the guards are part of what was refused: other guards are another constraint
    try:
        c.compile(Regex("(unclosed[a-z]+"), guards=Guards(max_string_length=5))
    except ConstraintError:
        pass
    assert c.misses == 2


def test_the_refused_memory_is_bounded(gemma):
    c = GrammarCompiler(gemma.tokenizer, refused_bytes=4096)
    for i in range(40):
        try:
            c.compile(Regex(f"(unclosed{i}"))
        except ConstraintError:
            pass
    assert 0 < len(c.refused) < 40 and c.refused.bytes <= 4096


def _rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


def test_the_cache_is_bounded_by_bytes_and_its_estimate_covers_what_an_entry_costs(gemma):
    rnd = random.Random(7)

    def words(n: int) -> Regex:
        return Regex("(" + "|".join("".join(rnd.choices(string.ascii_lowercase, k=9))
                                    for _ in range(n)) + ")")

    c = GrammarCompiler(gemma.tokenizer, cache_bytes=1 << 40)
    c.compile(words(3000))  # the allocator's first growth is not an entry's
    before, estimated = _rss(), 0
    for _ in range(12):
        compiled = c.compile(words(3000))  # 30k characters of grammar
        estimated += compiled_size(compiled.grammar, len(compiled.grammar),
                                   compiled.first_mask.nbytes)
    grown = _rss() - before
    assert 0 < grown <= estimated, (grown, estimated)

    small = GrammarCompiler(gemma.tokenizer, cache_bytes=3 * estimated // 12)
    for _ in range(12):
        small.compile(words(3000))
        assert small.cache.bytes <= small.cache.max_bytes
    assert 1 <= len(small.cache) <= 3


def test_a_refused_big_constraint_is_not_quoted_whole(gemma):
    """llguidance quotes the grammar line an error is on; a large schema is one line. The 400
    (and the refused memory) keeps a window around the error, its carets still under it."""
    from kaname.errors import UnsupportedSchemaError
    from kaname.grammar import JsonSchema

    props: dict = {f"p{i:05d}": {"type": "string"} for i in range(400)}
    props["zz"] = {"type": "string", "pattern": "^(?=a)b"}  # look-ahead: refused
    c = GrammarCompiler(gemma.tokenizer)
    try:
        c.compile(JsonSchema({"type": "object", "properties": props}, strict=True))
    except UnsupportedSchemaError as e:
        message = e.message
    assert "look-around" in message and len(message) < 2000, len(message)
    lines = message.splitlines()
    quoted = [i for i, ln in enumerate(lines) if "(?=a)" in ln]
    assert quoted, message
    caret = lines[quoted[0] + 1]
    assert caret.strip().startswith("^") and \
        lines[quoted[0]][len(caret) - len(caret.lstrip()):].startswith("(?=a)")
    assert c.refused.bytes < 4000
