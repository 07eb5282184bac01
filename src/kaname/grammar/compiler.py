"""Compiling a constraint into one llguidance grammar, with errors that say what to fix.

The compiler is tokenizer-bound: a grammar is only accepted once llguidance built a matcher
for it on this vocabulary, so special-token names and parser limits are checked up front.
What it compiled, and what it refused, is remembered in LRUs bounded by bytes (cache.py), keyed
by the hash of the canonical constraint and the guards: sending a refused 1 MB schema again
costs a lookup and gets the same error.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import jsonschema
import llguidance as llg
import numpy as np

from ..errors import (
    ConstraintError,
    GrammarTooComplexError,
    InvalidGrammarError,
    InvalidRegexError,
    InvalidSchemaError,
    UnsupportedSchemaError,
)
from .budget import DEFAULT_BUDGET, Budget, probe
from .cache import ByteLRU, Refusal, compiled_size, key_hash, resident_bytes
from .constraints import Choice, Constraint, JsonObject, JsonSchema, Lark, Regex
from .dialect import dialect_of
from .guards import Guards
from .lark import JSON_OBJECT_SCHEMA, NOT_ENFORCED, constraint_lark, guarded_json, start_rule
from .matcher import LONG_FORCED, WARM_MAX_CHARS, Matcher, Spellings, spellings, warm
from .numbers import not_enforced_numbers
from .postcheck import exact_validator, is_valid, json_object_valid, validation_depth_error
from .rewrite import rewrite_schema
from .schema_walk import escape, format_pointers, keyword_pointers, resolve_pointer

T = TypeVar("T")

_UNIMPLEMENTED = re.compile(r"Unimplemented keys: \[([^\]]*)\]")
_UNKNOWN_FORMAT = re.compile(r"Unknown format: (\S+)")
# llguidance reports a Rust panic as an error whose text is the panic and its backtrace:
# the 400 names what it means, never that text.
_PANIC = r"(^|\s)panic: "
# llguidance's limits (LLParserLimits), as its messages name them, and what each means for
# the constraint that hit it: the one place that reads them, at compile time and while
# decoding (`limit_error`).
_LIMITS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), meaning) for pattern, meaning in (
        (r"grammar size \(number of symbols\) too big",
         "the grammar has too many symbols (max_grammar_size)"),
        (r"symbols\.len\(\) < u16::MAX",
         "the grammar has more symbols than the engine's table holds (65,535)"),
        (r"initial lexer configuration \(grammar\) too big",
         "the lexer's first state costs too much to build: too many or too large tokens, "
         "regexes or options (initial_lexer_fuel)"),
        (r"Current row has \d+ items; max is \d+",
         "too many alternatives are open at one point of the text: a long list of rule "
         "alternatives, or deep right recursion (max_items_in_row)"),
        (r"Too many items \(limit",
         "one step of the parser costs too much: deep nesting or many short alternatives "
         "(step_max_items)"),
        (r"too many states",
         "the lexer's regexes need too many states: large or many regexes, string sets or "
         "repetition counts (max_lexer_states)"),
        (r"too many expressions constructed|lex fuel|derivatives with total fuel",
         "one step of the lexer costs too much: large or many regexes (step_lexer_fuel)"),
        (r"fuel exhausted|relevance check fuel|DNF too large",
         "the grammar's tokens cost too much to analyse (lexer fuel)"),
        (r"schema too large|is too large; must be <=",
         "the constraint exceeds a size limit of the grammar engine"),
        (r"too complex|TooComplex|too many|too large|limit|lexer error",
         "the grammar exceeds a limit of the grammar engine"),
        (_PANIC, "the grammar engine stopped on an internal check"),
    ))


def limit_error(message: str, what: str = "constraint") -> GrammarTooComplexError | None:
    """The 400 for llguidance `message` where it says a parser limit was hit, naming the limit
    and what it means for `what` ("choice", "schema", "grammar"...); None for other errors.
    The error has no pointer: whoever knows where the constraint sat in a request moves it
    there (`ConstraintError.at`)."""
    line = _first_line(message)
    for pattern, meaning in _LIMITS:
        if pattern.search(line):
            quoted = "" if re.search(_PANIC, line) else f" (llguidance: {line})"
            return GrammarTooComplexError(
                f"{what} is too costly for the grammar engine: {meaning}; simplify it{quoted}")
    return None


@dataclass(frozen=True)
class NotEnforced:
    """A schema keyword the grammar does not enforce (strict=False); the post-check covers it."""

    keyword: str
    pointer: str


@dataclass
class CompiledConstraint:
    """A constraint ready for decoding: its grammar, a pristine matcher, and what it enforces."""

    constraint: Constraint
    grammar: str  # Lark text: what the matcher was built from, and what an upstream is sent
    grammar_hash: str
    matcher: llg.LLMatcher
    schema: Any = None  # the user's schema, for the jsonschema post-check
    first_mask: Any = None  # the mask before any token (int32 words; Matcher's first_mask)
    # a long run of bytes forced before any token, computed in the budget's child (Matcher's
    # forced_bytes: llguidance holds the GIL for it, 0.55 s for a 1 MB literal)
    first_forced: bytes | None = None
    spellings: Spellings | None = None  # the vocabulary's, for Matcher.widen
    not_enforced: tuple[NotEnforced, ...] = ()
    caps: dict[str, Any] = field(default_factory=dict)
    _validator: Any = None

    @property
    def is_json(self) -> bool:
        return isinstance(self.constraint, JsonSchema | JsonObject)

    def new_matcher(self) -> Matcher:
        return Matcher(self.matcher.deep_copy(), self.first_mask, self.spellings,
                       forced=self.first_forced)

    def validate(self, text: str) -> bool | None:
        """Independent post-check: jsonschema for JSON constraints, None for the others.
        Numbers are read exactly and nothing raises (postcheck.py)."""
        if not self.is_json:
            return None
        if isinstance(self.constraint, JsonObject):
            return json_object_valid(text)
        if self._validator is None:
            self._validator = exact_validator(self.schema)
        return is_valid(self._validator, text)


def accepts(compiled: CompiledConstraint, tokenizer: llg.LLTokenizer, text: str) -> bool:
    """Whether `text` is in the language of `compiled` (built for `tokenizer`): a post-check
    for constraints that are not JSON."""
    matcher = compiled.new_matcher()
    return matcher.accept_tokens(tokenizer.tokenize_str(text)) and matcher.is_accepting()


_STACK_BYTES = 512 * 1024 * 1024
_stack_lock = threading.Lock()


def _on_big_stack(fn: Callable[[], T]) -> T:
    """Run `fn` on a thread with a 512 MiB stack (reserved, committed only as used).

    llguidance's grammar compiler recurses over rule references: measured here, a Lark
    grammar nesting 3,000 rules overflows the default 8 MiB stack and kills the process with
    SIGSEGV. Caller input must never do that, so grammars are built on a deep stack.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    with _stack_lock:
        old = threading.stack_size(_STACK_BYTES)
        try:
            worker = threading.Thread(target=run, name="kaname-grammar")
            worker.start()
        finally:
            threading.stack_size(old)
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def default_limits() -> llg.LLParserLimits:
    """llguidance's limits, without echoing the grammar into error messages."""
    return llg.LLParserLimits(verbose_errors=False)


class GrammarCompiler:
    """Turns constraints into matchers for one tokenizer; thread-safe, with byte-bounded LRUs
    of what it compiled and what it refused."""

    # Above this the constraint is refused before llguidance sees it: a 100k-alternative Lark
    # grammar took ~23 s to reach llguidance's own symbol limit here.
    MAX_CONSTRAINT_BYTES = 1 << 20
    # The compile cache's default budget (`kaname serve --compile-cache-mb`): a few hundred
    # agent tool sets or a thousand small schemas (docs/benchmarks.md, "Compile cache").
    CACHE_BYTES = 256 << 20
    # Refused constraints: ~1 kB each (the error), so some thousands.
    REFUSED_BYTES = 4 << 20

    def __init__(self, tokenizer: llg.LLTokenizer, *, guards: Guards | None = None,
                 cache_bytes: int = CACHE_BYTES, refused_bytes: int = REFUSED_BYTES,
                 limits: llg.LLParserLimits | None = None,
                 max_constraint_bytes: int = MAX_CONSTRAINT_BYTES,
                 budget: Budget | None = DEFAULT_BUDGET):
        self.tokenizer = tokenizer
        # large constraints are first compiled in a child under this budget (None: never)
        self.budget = budget
        self.max_constraint_bytes = max_constraint_bytes
        self.guards = guards or Guards()
        self.limits = limits or default_limits()
        self.cache: ByteLRU[CompiledConstraint] = ByteLRU(cache_bytes)
        self.refused: ByteLRU[Refusal] = ByteLRU(refused_bytes)
        self._counts = threading.Lock()
        self.hits = 0
        self.misses = 0

    def compile(self, constraint: Any, *, guards: Guards | None = None) -> CompiledConstraint:
        from .constraints import to_constraint

        c = to_constraint(constraint)
        g = guards or self.guards
        try:
            key = _cache_key(c, g)
        except RecursionError as e:
            raise GrammarTooComplexError("constraint is nested too deeply") from e
        except (TypeError, ValueError) as e:
            raise InvalidSchemaError(f"constraint is not JSON-serialisable: {e}") from e
        if len(key) > self.max_constraint_bytes:
            raise GrammarTooComplexError(
                f"constraint is too costly to compile: {len(key)} bytes, the limit is "
                f"{self.max_constraint_bytes}")
        digest = key_hash(key)
        hit = self.cache.get(digest)
        if hit is not None:
            self._count(hit=True)
            return hit
        refusal = self.refused.get(digest)
        if refusal is not None:
            self._count(hit=True)
            raise refusal.error()
        self._count(hit=False)
        try:
            first_forced = None
            if self.budget is not None and len(key) >= self.budget.min_bytes:
                first_forced = probe(lambda: self._compile_in_child(c, g), self.budget,
                                     extra_reserved=_STACK_BYTES)
            before = resident_bytes()
            try:
                compiled = self._compile(c, g)
            except RecursionError as e:
                raise GrammarTooComplexError("constraint is nested too deeply") from e
            grown = resident_bytes() - before
        except ConstraintError as e:  # a property of the constraint: the same every time
            refusal = Refusal.of(e)
            self.refused.put(digest, refusal, refusal.size)
            raise
        if isinstance(first_forced, bytes):
            compiled.first_forced = first_forced
        # what the process grew by while compiling, where the estimate says less: the
        # bound follows memory (other threads' growth counts too: the cache then holds
        # less, never more)
        self.cache.put(digest, compiled, max(grown, compiled_size(
            compiled.grammar, len(key), compiled.first_mask.nbytes)))
        return compiled

    def _compile_in_child(self, c: Constraint, g: Guards) -> bytes | None:
        """The compile, in a forked child (budget.py): only this thread was copied, so a
        lock another thread held at the fork would never be released here. Returns the
        bytes forced before any token where they are a long run (computed here, where
        holding the GIL stalls no one)."""
        global _stack_lock
        _stack_lock = threading.Lock()
        forced = self._compile(c, g).new_matcher().forced_bytes()
        return forced if len(forced) > LONG_FORCED else None

    def _count(self, *, hit: bool) -> None:
        with self._counts:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    def _compile(self, c: Constraint, g: Guards) -> CompiledConstraint:
        if isinstance(c, JsonSchema | JsonObject):
            return self._compile_json(c, g)
        if isinstance(c, Regex):
            return self._finish(c, constraint_lark(c, g), InvalidRegexError, "regex")
        if isinstance(c, Choice):
            if not c.options or not all(isinstance(o, str) for o in c.options):
                raise InvalidGrammarError("choice needs a non-empty list of strings")
            return self._finish(c, constraint_lark(c, g), InvalidGrammarError, "choice")
        what = "Lark grammar" if isinstance(c, Lark) else "text"
        return self._finish(c, constraint_lark(c, g), InvalidGrammarError, what)

    def _compile_json(self, c: JsonSchema | JsonObject, g: Guards) -> CompiledConstraint:
        if isinstance(c, JsonObject):
            return self._compile_schema(c, g, JSON_OBJECT_SCHEMA, {"type": "object"}, True,
                                        rewrite=False)
        user_schema = _plain(c.schema)
        _check_metaschema(user_schema)
        too_deep = validation_depth_error(user_schema)  # the post-check's limit
        if too_deep is not None:
            raise too_deep
        # Keywords llguidance refuses are rewritten into equivalent ones it enforces
        # (rewrite.py, applied inside guarded_json); the post-check still validates against
        # the user's schema.
        try:
            try:
                return self._compile_schema(c, g, user_schema, user_schema, c.strict)
            except ConstraintError as e:
                try:
                    same = guarded_json(user_schema, g, strict=c.strict)[0] == \
                        guarded_json(user_schema, g, strict=c.strict, rewrite=False)[0]
                except GrammarTooComplexError:
                    raise e from None  # the schema as written costs more still (costs.py)
                if same:
                    raise
                if _names_a_user_keyword(e, user_schema):
                    raise  # what still blocks the schema once the rest is rewritten
            # Otherwise a rewrite never costs a schema nor changes its error: the original's
            return self._compile_schema(c, g, user_schema, user_schema, c.strict,
                                        rewrite=False)
        except UnsupportedSchemaError as e:
            better = _named_whole(_why_not_rewritten(e, rewrite_schema(user_schema).refused),
                                  user_schema)
            if better is e:
                raise
            raise better from e

    def _compile_schema(self, c: JsonSchema | JsonObject, g: Guards, schema: Any,
                        user_schema: Any, strict: bool, *,
                        rewrite: bool = True) -> CompiledConstraint:
        expr, caps = guarded_json(schema, g, strict=strict, rewrite=rewrite)
        too_costly = [NotEnforced("minProperties", p) for p in caps.pop(NOT_ENFORCED, [])]
        lark = start_rule(expr)
        is_error, messages = _on_big_stack(lambda: llg.LLMatcher.validate_grammar_with_warnings(
            llg.LLMatcher.grammar_from_lark(lark), self.tokenizer, limits=self.limits))
        if is_error:
            raise _schema_error(messages[0] if messages else "unknown error", user_schema)
        not_enforced = () if strict else tuple(dict.fromkeys(
            _not_enforced(messages, user_schema)
            + self._coerced_one_of(schema, user_schema, g, rewrite=rewrite)
            + [NotEnforced(k, p) for k, p in not_enforced_numbers(user_schema)]
            + too_costly))
        compiled = self._finish(c, lark, InvalidSchemaError, "schema")
        compiled.schema = user_schema
        compiled.not_enforced = not_enforced
        compiled.caps = caps
        return compiled

    def _coerced_one_of(self, schema: Any, user_schema: Any, g: Guards, *,
                        rewrite: bool = True) -> list[NotEnforced]:
        """Lenient compiles read a `oneOf` llguidance cannot prove exclusive as `anyOf` (a
        widening, and silent in llguidance): name it. Which one is known when a strict compile
        names it; if that compile fails for another reason first, every `oneOf` is named."""
        pointers = keyword_pointers(user_schema, "oneOf")
        if not pointers:
            return []
        try:
            lark = start_rule(guarded_json(schema, g, strict=True, rewrite=rewrite)[0])
        except ConstraintError:  # refused before llguidance (numbers.py): every oneOf
            return [NotEnforced("oneOf", p) for p in pointers]
        is_error, messages = _on_big_stack(lambda: llg.LLMatcher.validate_grammar_with_warnings(
            llg.LLMatcher.grammar_from_lark(lark), self.tokenizer, limits=self.limits))
        if not is_error:
            return []
        e = _schema_error(messages[0] if messages else "", user_schema)
        if e.keyword == "oneOf" and e.pointer:
            return [NotEnforced("oneOf", e.pointer)]
        return [NotEnforced("oneOf", p) for p in pointers]

    def _finish(self, c: Constraint, lark: str, error: type[ConstraintError],
                what: str) -> CompiledConstraint:
        grammar = llg.LLMatcher.grammar_from_lark(lark)
        matcher = _on_big_stack(lambda: llg.LLMatcher(self.tokenizer, grammar, log_level=0,
                                                      limits=self.limits))
        if matcher.is_error():
            message = _first_line(matcher.get_error())
            raise limit_error(message, what) or error(f"invalid {what}: {message}")
        # A grammar can compile and still match no text at all (`start: a`, `a: a`, or a
        # schema that only refers to itself): the first mask is then empty.
        # (A matcher of its own: a deep copy shares the lexer, whose expression budget the
        # probe's full mask would spend, so that decoding later hits llguidance's limit.)
        probe = _on_big_stack(lambda: llg.LLMatcher(self.tokenizer, grammar, log_level=0,
                                                    limits=self.limits))
        first = _on_big_stack(probe.compute_bitmask)
        if probe.is_error():
            message = _first_line(probe.get_error())
            too_large = limit_error(message, what)
            if too_large is not None:
                raise too_large
            raise error(f"{what} matches no text (llguidance: "
                        f"{message.splitlines()[0] if message else 'empty mask'})")
        # The probe's mask is every request's first one (see Matcher): kept, read-only.
        words = (self.tokenizer.vocab_size + 31) // 32
        vocab = spellings(self.tokenizer)
        first_mask = np.frombuffer(first, dtype=np.int32, count=words).copy()
        Matcher(probe, spellings=vocab).widen(first_mask)
        first_mask.flags.writeable = False
        if len(lark) <= WARM_MAX_CHARS:
            matcher = _on_big_stack(lambda: warm(matcher, first_mask, self.tokenizer))
        digest = hashlib.sha256(lark.encode()).hexdigest()[:16]
        return CompiledConstraint(c, lark, digest, matcher, first_mask=first_mask,
                                  spellings=vocab)


def _plain(schema: Any) -> Any:
    """A JSON round-trip: rejects non-JSON values early and detaches from the caller's dict."""
    try:
        return json.loads(json.dumps(schema))
    except (TypeError, ValueError) as e:
        raise InvalidSchemaError(f"schema is not JSON-serialisable: {e}") from e


def _check_metaschema(schema: Any) -> None:
    cls = dialect_of(schema)
    error = jsonschema.exceptions.best_match(cls(cls.META_SCHEMA).iter_errors(schema))
    if error is not None:
        pointer = "".join(f"/{escape(str(p))}" for p in error.absolute_path)
        keyword = str(error.absolute_path[-1]) if error.absolute_path else None
        raise InvalidSchemaError(
            f"invalid JSON Schema at '{pointer or '/'}': {error.message}",
            keyword=keyword, pointer=pointer or "/")


_WHERE = re.compile(r"while processing \S*?#(/\S*)")
# llguidance limitations, by the keyword they concern
_LIMITATIONS = (
    ("oneOf constraints are not supported", "oneOf"),
    ("min/maxProperties", "minProperties"),
    ("regex parse error", "pattern"),
    ("look-around", "pattern"),
    ("circular references with sibling keys", "$ref"),
)


def _unsupported(message: str) -> tuple[list[str], str | None]:
    """(unimplemented keywords, unknown format) named in an llguidance message."""
    m = _UNIMPLEMENTED.search(message)
    keywords = json.loads(f"[{m.group(1)}]") if m else []
    m = _UNKNOWN_FORMAT.search(message)
    return keywords, m.group(1).strip("\"'") if m else None


def _schema_error(message: str, schema: Any) -> ConstraintError:
    where = _WHERE.search(message)
    message = _first_line(message)
    keywords, fmt = _unsupported(message)
    if keywords:
        pointers = [p for k in keywords for p in keyword_pointers(schema, k)]
        keyword = keywords[0]
        pointer = pointers[0] if pointers else None
        return UnsupportedSchemaError(
            f"unsupported JSON Schema keyword '{keyword}' at '{pointer}' cannot be enforced "
            f"(all: {', '.join(pointers) or keywords}); remove it or set strict=false to skip "
            "it and post-check instead",
            keyword=keyword, pointer=pointer)
    if fmt is not None:
        pointers = format_pointers(schema, fmt)
        pointer = pointers[0] if pointers else None
        return UnsupportedSchemaError(
            f"unsupported string format '{fmt}' at '{pointer}'; remove it or set strict=false",
            keyword="format", pointer=pointer)
    if "does not exist" in message and "Pointer" in message:
        return InvalidSchemaError(f"schema has a dangling $ref: {message}", keyword="$ref",
                                  pointer=_first(keyword_pointers(schema, "$ref")))
    too_large = limit_error(message, "schema")
    if too_large is not None:
        return too_large
    for needle, keyword in _LIMITATIONS:
        if needle in message:
            pointer = (where.group(1) + "/" + keyword if where else
                       _first(keyword_pointers(schema, keyword)))
            return UnsupportedSchemaError(
                f"'{keyword}' at '{pointer}' cannot be enforced: {message}; "
                "simplify it or set strict=false", keyword=keyword, pointer=pointer)
    # The metaschema check passed, so this is a construct the grammar engine cannot express.
    at = f" (at '{where.group(1)}')" if where else ""
    return UnsupportedSchemaError(f"schema cannot be enforced{at}: {message}",
                                  pointer=where.group(1) if where else None)


# llguidance errors about the schema as a whole, by the keyword whose subschemas they concern
_WHOLE = (
    ("patternProperty regexes", "patternProperties"),
    ("intersection stack level exceeded", "allOf"),
    ("Unable to determine if regex is empty", "pattern"),
)
_OVERLAPPING = re.compile(r"patternProperty regexes /(.*)/ and /(.*)/ are not disjoint")


def _named_whole(e: UnsupportedSchemaError, schema: Any) -> UnsupportedSchemaError:
    """`e`, where it names no keyword and is one of llguidance's errors about the schema as a
    whole, with the keyword it concerns and the first pointer to it (for overlapping
    patternProperties, the first that holds one of the two regexes). Only the error finally
    raised is named: the compile's fallbacks read `e` as it came."""
    message = str(e)
    if e.keyword is not None:
        return e
    for needle, keyword in _WHOLE:
        if needle not in message:
            continue
        pointers = keyword_pointers(schema, keyword)
        m = _OVERLAPPING.search(message)
        if m and keyword == "patternProperties":
            named = [p for p in pointers if _holds_pattern(schema, p, m.groups())]
            pointers = named or pointers
        pointer = pointers[0] if pointers else None
        return UnsupportedSchemaError(
            f"'{keyword}' at '{pointer}' cannot be enforced: {message}", keyword=keyword,
            pointer=pointer)
    return e


def _holds_pattern(schema: Any, pointer: str, patterns: tuple[str, ...]) -> bool:
    try:
        node = resolve_pointer(schema, pointer)
    except (KeyError, IndexError, TypeError):
        return False
    return isinstance(node, dict) and any(p in node for p in patterns)


def _names_a_user_keyword(e: ConstraintError, schema: Any) -> bool:
    """Whether `e` is an unsupported keyword that the user's schema has at `e.pointer`."""
    if not isinstance(e, UnsupportedSchemaError) or not e.keyword or not e.pointer \
            or not e.pointer.endswith("/" + escape(e.keyword)):
        return False
    try:
        resolve_pointer(schema, e.pointer)
    except (KeyError, IndexError, TypeError):
        return False
    return True


def _why_not_rewritten(e: UnsupportedSchemaError, refused: Mapping[str, str]
                       ) -> UnsupportedSchemaError:
    """`e`, naming an occurrence of its keyword that rewrite.py could not rewrite (rather than
    one it did) and why not."""
    pointer = e.pointer or ""
    if pointer not in refused and e.keyword is not None:
        pointer = next((p for p in refused if p.rsplit("/", 1)[-1] == escape(e.keyword)),
                       pointer)
    why = refused.get(pointer)
    if why is None:
        return e
    message = e.message.replace(f"'{e.pointer}'", f"'{pointer}'", 1) if e.pointer else e.message
    return UnsupportedSchemaError(f"{message} (not rewritten: {why})", keyword=e.keyword,
                                  pointer=pointer)


def _first(pointers: list[str]) -> str | None:
    return pointers[0] if pointers else None


def _not_enforced(messages: list[str], schema: Any) -> list[NotEnforced]:
    found: list[NotEnforced] = []
    for message in messages:
        keywords, fmt = _unsupported(message)
        for k in keywords:
            found += [NotEnforced(k, p) for p in keyword_pointers(schema, k)] or [
                NotEnforced(k, "")]
        if fmt is not None:
            found += [NotEnforced("format", p) for p in format_pointers(schema, fmt)]
    return list(dict.fromkeys(found))


def _first_line(message: str) -> str:
    """llguidance's message without its parser-state dump and location trailer, its quotes of
    the grammar cut to what is around the error (`_excerpts`)."""
    head = message.strip().split("\n<state>")[0].split("\n<backtrace>")[0]
    return "\n".join(_excerpts([ln for ln in head.splitlines()
                                if not ln.strip().startswith("while processing")])).strip()


_QUOTE = 240  # characters of a quoted grammar line kept in an error
_CARETS = re.compile(r"^( *)(\^+) *$")


def _excerpts(lines: list[str]) -> list[str]:
    """`lines` with each one longer than `_QUOTE` cut to a window around the error: the
    columns its next line's carets mark, or else its start. llguidance quotes the grammar
    line an error is on, and a 1 MB schema is one line: its 400 (and the refused-constraint
    memory) would hold all of it."""
    out = []
    for i, line in enumerate(lines):
        if len(line) <= _QUOTE:
            out.append(line)
            continue
        m = _CARETS.match(lines[i + 1]) if i + 1 < len(lines) else None
        start = max(0, len(m.group(1)) - _QUOTE // 3) if m else 0
        cut = line[start:start + _QUOTE]
        out.append(("..." if start else "") + cut + ("..." if start + _QUOTE < len(line) else ""))
        if m:  # the carets, moved with the window
            lines[i + 1] = " " * (len(m.group(1)) - start + (3 if start else 0)) + m.group(2)
    return out


def _cache_key(c: Constraint, g: Guards) -> str:
    payload: Mapping[str, Any] | str | tuple[str, ...]
    if isinstance(c, JsonSchema):
        payload = {"schema": c.schema, "strict": c.strict}
    elif isinstance(c, Regex):
        payload = c.pattern
    elif isinstance(c, Lark):
        payload = c.grammar
    elif isinstance(c, Choice):
        payload = c.options
    else:
        payload = ""
    # Key order is kept: llguidance emits object properties in schema order, so two schemas
    # that differ only in property order compile to different grammars.
    return json.dumps([type(c).__name__, payload, g.key()], separators=(",", ":"),
                      ensure_ascii=False)
