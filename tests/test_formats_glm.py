"""GLM's per-key tool calls: what the grammar accepts (token by token) and the parser reads.

GLM-4.5 / 4.6 (`glm45`) write `<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>
\\n…</tool_call>`, GLM-4.7 (`glm47`) the same without the newlines, after a prompt that opened
`<think>`. String values are raw text, others JSON."""

from __future__ import annotations

import json

import jsonschema
import pytest
from test_formats import MESSAGES, WEATHER

from kaname.chat import prepare_turn
from kaname.errors import ConstraintError
from kaname.formats import (
    FormatParseError,
    StreamParser,
    Tool,
    TurnRequest,
    build_grammar,
    get_format,
    merge_deltas,
    parse,
    render_prompt,
)
from kaname.formats.tool_checks import check_tools, not_enforced
from kaname.grammar import GrammarCompiler, Guards, Lark
from kaname.runtimes.synthetic import synthetic_tokenizer

GLM = ["glm45", "glm47"]


def _accepts(name: str, req: TurnRequest, text: str, *, spelled: bool = False,
             guards: Guards | None = None) -> bool:
    """Token by token, `text` being the whole turn: what the prompt wrote of it (its opening,
    GLM-4.7's "<think>" or "</think>") must start it, and the grammar takes the rest. `spelled`:
    a vocabulary without the format's special tokens, so every marker is plain text (the lazy
    path)."""
    fmt = get_format(name)
    opening = req.opening_in(fmt)
    if not text.startswith(opening):
        return False
    tok, _ = synthetic_tokenizer(() if spelled else fmt.special_tokens)
    lark = build_grammar(fmt, req, tok, guards=guards)
    m = GrammarCompiler(tok).compile(Lark(lark)).new_matcher()
    rest = text[len(opening):]
    return m.accept_tokens(tok.tokenize_str(rest, parse_special=True)) and m.is_accepting()


def _call(name: str, tool: str, *pairs: tuple[str, str]) -> str:
    """One call as each format's model writes it, reasoning off."""
    if name == "glm45":
        args = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in pairs)
        return f"\n<think></think>\n<tool_call>{tool}\n{args}</tool_call><|observation|>"
    args = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in pairs)
    return f"</think><tool_call>{tool}{args}</tool_call><|observation|>"


def _read(name: str, req: TurnRequest, text: str) -> dict:
    """The arguments the parser rebuilds, checked to stream the same one character a time."""
    fmt = get_format(name)
    turn = parse(fmt, text, tools=req.tools)
    sp = StreamParser(fmt, tools=req.tools)
    deltas = [d for ch in text for d in sp.feed(ch)]
    deltas += sp.finish()[1]
    streamed = merge_deltas(deltas)["tool_calls"]
    assert [c["function"]["arguments"] for c in streamed] == [
        c.arguments for c in turn.tool_calls]
    assert len(turn.tool_calls) == 1
    return json.loads(turn.tool_calls[0].arguments)


def _tool(params: dict, strict: bool = False) -> TurnRequest:
    return TurnRequest(tools=(Tool("t", params, strict=strict),), tool_choice="required")


# ---- optional strings: raw text, or null -------------------------------------------------

OPTIONAL = {
    # pydantic v2's Optional[str] = None
    "anyOf": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None,
              "title": "Note"},
    "type_list": {"type": ["string", "null"], "maxLength": 8},
    # Optional[Unit] with Unit a str Enum: through $defs
    "ref_enum": {"anyOf": [{"$ref": "#/$defs/Unit"}, {"type": "null"}], "default": None},
}


@pytest.mark.parametrize("name", GLM)
@pytest.mark.parametrize("kind", sorted(OPTIONAL))
def test_optional_string_is_raw_text_or_null(name, kind):
    params = {"type": "object", "properties": {"city": {"type": "string"},
                                               "note": OPTIONAL[kind]},
              "required": ["city"], "$defs": {"Unit": {"type": "string", "enum": ["c", "f"]}}}
    req = _tool(params, strict=True)  # enforced fully: no 400
    text = "c" if kind == "ref_enum" else "Tokyo 12"
    for value, expected in ((text, text), ("null", None)):
        call = _call(name, "t", ("city", "12"), ("note", value))
        assert _accepts(name, req, call), value
        args = _read(name, req, call)
        assert args == {"city": "12", "note": expected}  # "12" stays a string
        jsonschema.validate(args, params)
    bad = "x" if kind == "ref_enum" else '"Tokyo"' if kind == "anyOf" else "123456789"
    if kind != "anyOf":  # a quoted value is a string with quotes in it, valid for anyOf
        assert not _accepts(name, req, _call(name, "t", ("city", "a"), ("note", bad)))
    # JSON-quoted is not how GLM writes a string: it is the text with its quotes
    assert _read(name, req, _call(name, "t", ("city", "a"), ("note", '"x"'))) == {
        "city": "a", "note": '"x"'}


# ---- arguments the schema does not declare ------------------------------------------------

@pytest.mark.parametrize("name", GLM)
def test_undeclared_arguments_where_the_schema_allows_them(name):
    req = TurnRequest(tools=(WEATHER,), tool_choice="required")  # no additionalProperties
    call = _call(name, "weather", ("city", "Oslo"), ("zone", "CET"), ("n", "3"))
    assert _accepts(name, req, call)
    assert _read(name, req, call) == {"city": "Oslo", "zone": "CET", "n": 3}  # any: JSON first
    for bad in ([("city", "Oslo"), ("city", "Bergen")],   # a declared key, again
                [("city", "Oslo"), ("days", "x")],        # a declared key keeps its schema
                [("zone", "CET"), ("city", "Oslo")]):     # undeclared keys come last
        assert not _accepts(name, req, _call(name, "weather", *bad)), bad
    closed = _tool({**WEATHER.parameters, "additionalProperties": False})
    assert not _accepts(name, closed, _call(name, "t", ("city", "Oslo"), ("zone", "CET")))
    typed = _tool({**WEATHER.parameters, "additionalProperties": {"type": "integer"}})
    assert _read(name, typed, _call(name, "t", ("city", "Oslo"), ("n", "3"))) == {
        "city": "Oslo", "n": 3}
    assert not _accepts(name, typed, _call(name, "t", ("city", "Oslo"), ("n", "x")))
    raw = _tool({**WEATHER.parameters, "additionalProperties": {"type": "string",
                                                                 "pattern": "^[A-Z]+$"}})
    assert _read(name, raw, _call(name, "t", ("city", "Oslo"), ("zone", "CET"))) == {
        "city": "Oslo", "zone": "CET"}
    assert not _accepts(name, raw, _call(name, "t", ("city", "Oslo"), ("zone", "cet")))
    # no properties at all: any keys, any values
    anything = _tool({"type": "object"})
    assert _read(name, anything, _call(name, "t", ("a", "1"), ("b", "x y"))) == {
        "a": 1, "b": "x y"}


@pytest.mark.parametrize("name", GLM)
def test_undeclared_arguments_are_capped(name):
    req = TurnRequest(tools=(WEATHER,), tool_choice="required")
    extras = [(f"k{i}", "v") for i in range(17)]
    assert _accepts(name, req, _call(name, "weather", ("city", "a"), *extras[:16]))
    assert not _accepts(name, req, _call(name, "weather", ("city", "a"), *extras))
    two = Guards(max_array_items=2)
    assert _accepts(name, req, _call(name, "weather", ("city", "a"), *extras[:2]), guards=two)
    assert not _accepts(name, req, _call(name, "weather", ("city", "a"), *extras[:3]),
                        guards=two)


def test_a_required_key_that_is_not_declared_is_bound_like_undeclared_ones():
    params = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city", "tz"]}
    req = _tool(params, strict=True)  # enforceable now: no 400
    assert not _accepts("glm47", req, _call("glm47", "t", ("city", "Oslo")))
    call = _call("glm47", "t", ("city", "Oslo"), ("tz", "CET"))
    assert _accepts("glm47", req, call)
    assert _read("glm47", req, call) == {"city": "Oslo", "tz": "CET"}
    tok, _ = synthetic_tokenizer(get_format("glm47").special_tokens)
    with pytest.raises(ConstraintError) as e:  # unsatisfiable where undeclared keys are not
        build_grammar(get_format("glm47"), _tool({**params, "additionalProperties": False},
                                                 strict=True), tok)
    assert e.value.pointer == "/tools/0/function/parameters/required/1"


# ---- pattern and format on raw text -------------------------------------------------------

BOUND = {"type": "object", "properties": {
    "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "slug": {"type": "string", "pattern": "-"},  # unanchored: contains a "-"
    "day": {"type": "string", "format": "date"},
    "id": {"type": "string", "format": "uuid"},
    "mail": {"type": ["string", "null"], "format": "email"},
}, "required": ["code", "slug", "day", "id", "mail"]}
GOOD = {"code": "OSL", "slug": "a-b c", "day": "2024-02-29",
        "id": "123e4567-e89b-12d3-a456-426614174000", "mail": "a.b@example.org"}


@pytest.mark.parametrize("spelled", [False, True], ids=["tokens", "spelled"])
@pytest.mark.parametrize("name", GLM)
def test_raw_strings_keep_pattern_and_format(name, spelled):
    req = _tool(BOUND, strict=True)  # enforced, not a 400
    assert not_enforced(check_tools(get_format(name), req, None)) == []

    def call(**change: str) -> str:
        return _call(name, "t", *{**GOOD, **change}.items())

    assert _accepts(name, req, call(), spelled=spelled)
    args = _read(name, req, call())
    assert args == GOOD
    jsonschema.validate(args, BOUND, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    assert _read(name, req, call(mail="null"))["mail"] is None
    for bad in ({"code": "Oslo"}, {"code": "OS"}, {"slug": "ab"}, {"day": "2023-02-29"},
                {"day": "2024-13-01"}, {"id": "123e4567e89b12d3a456426614174000"},
                {"mail": "a@"}, {"mail": "a</arg_value>@b.c"}):
        assert not _accepts(name, req, call(**bad), spelled=spelled), bad


@pytest.mark.parametrize("name", GLM)
def test_a_raw_value_never_contains_its_end_marker_spelled_out(name):
    """The parser cuts a value at the first end marker's core (GLM-4.5's marker has a newline
    after it, which a model may leave out; GLM's own parsers cut at `</arg_value>` too), so the
    grammar never lets a value contain it, whatever tokens spell it."""
    req = TurnRequest(tools=(WEATHER,), tool_choice="required")
    marker = get_format(name).tool_calls.value_end
    for inside in (marker, marker.strip()):
        assert not _accepts(name, req, _call(name, "weather", ("city", f"a{inside}b")),
                            spelled=True)
    near = "a</arg_valu b"
    call = _call(name, "weather", ("city", near))
    assert _accepts(name, req, call, spelled=True)
    assert _read(name, req, call) == {"city": near}


def test_what_raw_text_cannot_carry_is_refused_or_reported():
    fmt = get_format("glm47")
    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    params = {"type": "object", "properties": {
        # Python reads [[:alpha:]] as a class of "[", ":", ... then "]": Rust as letters
        "w": {"type": "string", "pattern": "^[[:alpha:]]+$"},
        "h": {"anyOf": [{"type": "string", "format": "hostname"}, {"type": "null"}]}}}
    with pytest.raises(ConstraintError) as e:
        build_grammar(fmt, _tool(params, strict=True), tok)
    assert e.value.pointer == "/tools/0/function/parameters/properties/w/pattern"
    req = _tool(params)
    assert not_enforced(check_tools(fmt, req, GrammarCompiler(tok))) == [
        {"keyword": "pattern", "pointer": "/tools/0/function/parameters/properties/w/pattern"},
        {"keyword": "format",
         "pointer": "/tools/0/function/parameters/properties/h/anyOf/0/format"}]
    assert _accepts("glm47", req, _call("glm47", "t", ("w", "1"), ("h", "x")))  # not bound


# ---- GLM-4.7: the official template's layout ----------------------------------------------

# zai-org/GLM-4.7's chat_template.jinja rendered (transformers' settings, no tools) for
# MESSAGES + an answer + a new user message: reasoning before the last user message is
# dropped ("</think>" alone), calls without newlines.
GLM47_HISTORY = (
    "[gMASK]<sop><|system|>You are helpful.<|user|>Weather in Tokyo?<|assistant|></think>"
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Tokyo</arg_value></tool_call>"
    "<|observation|><tool_response>{\"temp\": 20}</tool_response><|assistant|></think>20C."
    "<|user|>Thanks<|assistant|><think>")


def test_glm47_history_matches_the_official_template():
    messages = [*MESSAGES, {"role": "assistant", "reasoning_content": "ok", "content": "20C."},
                {"role": "user", "content": "Thanks"}]
    assert render_prompt(get_format("glm47"), messages) == GLM47_HISTORY


GET_WEATHER = Tool("get_weather", {"type": "object", "properties": {
    "city": {"type": "string"}, "date": {"type": "string"}}})
NOW = Tool("get_current_date", {"type": "object", "properties": {}})


# Outputs of the shapes vLLM's GLM-4.7 parser tests use (tests/tool_parsers/
# test_glm47_moe_tool_parser.py), as the model writes them after the prompt's "<think>".
@pytest.mark.parametrize(("text", "content", "calls"), [
    ("</think><tool_call>get_current_date</tool_call><|observation|>", None,
     [("get_current_date", {})]),
    ("</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Beijing</arg_value>"
     "</tool_call><tool_call>get_weather<arg_key>city</arg_key><arg_value>Shanghai"
     "</arg_value></tool_call><|observation|>", None,
     [("get_weather", {"city": "Beijing"}), ("get_weather", {"city": "Shanghai"})]),
    ("</think>Checking.<tool_call>get_current_date</tool_call><|observation|>", "Checking.",
     [("get_current_date", {})]),
    ("</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Beijing</arg_value>"
     "<arg_key>date</arg_key><arg_value>2025-08-01</arg_value></tool_call><|observation|>",
     None, [("get_weather", {"city": "Beijing", "date": "2025-08-01"})]),
    ("</think>This is a plain response.<|user|>", "This is a plain response.", []),
])
def test_glm47_reads_what_the_model_writes(text, content, calls):
    req = TurnRequest(tools=(NOW, GET_WEATHER))
    assert _accepts("glm47", req, text)
    turn = parse(get_format("glm47"), text, tools=req.tools)
    assert (turn.reasoning_content, turn.content) == (None, content)
    assert [(c.name, json.loads(c.arguments)) for c in turn.tool_calls] == calls


def test_glm47_turn_starts_inside_the_prompts_reasoning_block():
    """The prompt ends with "<think>" (reasoning on) or "</think>" (off), as the template's
    does; texts here are whole turns, the prompt's part first."""
    fmt = get_format("glm47")
    on = TurnRequest(reasoning="on")
    assert _accepts("glm47", on, "<think>Think.</think>Hi.<|user|>")
    assert _accepts("glm47", on, "<think></think>Hi.<|user|>")
    assert not _accepts("glm47", on, "<think>Hi.<|user|>")  # the block must be closed
    off = TurnRequest()
    assert _accepts("glm47", off, "</think>Hi.<|user|>")
    assert not _accepts("glm47", off, "</think>Think.</think>Hi.<|user|>")
    turn = parse(fmt, "<think>Think.</think>Hi.<|user|>")
    assert (turn.reasoning_content, turn.content) == ("Think.", "Hi.")
    # the model's own template is asked for what the reasoning mode says
    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    probe = "{{ 'open' if enable_thinking else 'closed' }}"
    assert prepare_turn(fmt, MESSAGES, tok, chat_template=probe, reasoning="on").prompt \
        == "open"
    assert prepare_turn(fmt, MESSAGES, tok, chat_template=probe).prompt == "closed"
    assert render_prompt(fmt, MESSAGES, reasoning="on").endswith("<|assistant|><think>")
    assert render_prompt(fmt, MESSAGES, reasoning="off").endswith("<|assistant|></think>")


# ---- the parser: what it cannot read is an error, never content ---------------------------

@pytest.mark.parametrize("name", GLM)
def test_malformed_calls_are_refused_by_grammar_and_parser(name):
    req = TurnRequest(tools=(WEATHER,), tool_choice="required")
    good = _call(name, "weather", ("city", "Oslo"))
    # seen from GLM-4.7-family models under load (vLLM #49248, #47190): a tag left out
    for bad in (good.replace("<arg_value>", "", 1), good.replace("<arg_key>", "", 1),
                good.replace("</arg_value>", "", 1), good.replace("</tool_call>", "", 1)):
        assert not _accepts(name, req, bad), bad
        with pytest.raises(FormatParseError):
            parse(get_format(name), bad, tools=req.tools)
    if name == "glm47":  # the reasoning block the prompt opened never closes
        with pytest.raises(FormatParseError):
            parse(get_format(name), "<think>Thinking on and on", tools=req.tools)


# ---- raw_text's regexes are never wider than the post-check -------------------------------

def _full_match(regex: str):
    tok, _ = synthetic_tokenizer(())
    compiled = GrammarCompiler(tok).compile(Lark(f"start: V\nV: /{regex}/\n"))

    def accepts(text: str) -> bool:
        m = compiled.new_matcher()
        return m.accept_tokens(tok.tokenize_str(text)) and m.is_accepting()
    return accepts


PATTERNS = [r"^[A-Z]{2}-\d{3}$", "b", "^ab", "cd$", r"\w+@\w+", r"^\S+$", "[^a-c]x",
            "(?i)^abc$", "^a.c$", "(?s)^a.c$", r"^\d*\.?\d+$", "x{2,3}?", r"^[\w.-]+$",
            r"^[^\W\d]+$", r"^\$\d+$", r"^[\^\-\]]+$", "a{,2}b", "(?x) a b # c", "^(?i:a)B$",
            r"^\x41\u00e9$", r"^\s*$"]


def test_raw_patterns_match_what_the_post_check_matches():
    """Python's re.search (the jsonschema post-check) against the llguidance lexeme, over
    strings from an alphabet with the characters where the two regex dialects differ: never
    wider; narrower only where Python's `$` matches before a final newline."""
    import random
    import re

    from kaname.formats import raw_text

    alphabet = [*"abcxABé 013\n._-@$^]\\", "\x1c", "\u0663", "\u00b2", "\u00a0"]
    rng = random.Random(1)
    strings = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
               for _ in range(150)]
    strings += ["AB-123", "ab", "xcd", "cd\n", "a@b", "ABC", "a\nc", "xx", "xxx", "bb", "aab",
                "$12", "^-]", "Aé", "1.5", ".5"]
    for p in PATTERNS:
        regex = raw_text.pattern_regex(p)
        assert regex is not None, p
        accepts = _full_match(regex)
        for s in strings:
            found = re.search(p, s) is not None
            assert accepts(s) == found or (found and s.endswith("\n") and "$" in p), (p, s)
    for refused in (r"^a|b$", r"\bword\b", "(?=a)", r"(a)\1", "[[:alpha:]]", "a++",
                    "(?m)^a$", "(?>a)", "[a&&b]"):
        assert raw_text.pattern_regex(refused) is None, refused


def test_raw_formats_agree_with_the_post_check():
    from kaname.formats import raw_text

    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    date = _full_match(raw_text.DATE)
    for year in ("0000", "0001", "0004", "1900", "2000", "2023", "2024", "2100", "9999"):
        for month in range(14):
            for day in (0, 1, 28, 29, 30, 31, 32):
                s = f"{year}-{month:02d}-{day:02d}"
                assert date(s) == checker.conforms(s, "date"), s
    ipv4 = _full_match(raw_text.IPV4)
    for s in ("1.2.3.4", "255.255.255.255", "256.1.1.1", "01.2.3.4", "0.0.0.0", "1.2.3",
              "1.2.3.4.5", "1..3.4"):
        assert ipv4(s) == checker.conforms(s, "ipv4"), s
    for fmt, ok in (("uuid", "123e4567-e89b-12d3-a456-426614174000"), ("email", "a@b.c")):
        accepts = _full_match(raw_text.format_regex(fmt))
        assert accepts(ok) and checker.conforms(ok, fmt)
    for fmt in ("time", "date-time", "byte", "json-pointer", "relative-json-pointer",
                "uri-template"):  # each builds in llguidance
        _full_match(raw_text.format_regex(fmt, max_fraction_digits=8))
    assert raw_text.format_regex("password") == raw_text.ANY
    assert raw_text.format_regex("hostname") is None
