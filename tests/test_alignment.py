"""Alignment with the official chat templates: for every format, the assistant turns the model's
own template renders (tests/data/alignment.json, made by scripts/alignment_fixtures.py; the
templates themselves are not in this repository) are accepted by kaname's grammar token by
token and parsed, whole and streamed, into the message they render; kaname's prompt writes
what the template's generation prompt writes of the turn (its opening), and, where a format is
byte-exact, the whole prompt.

A fixture the format deliberately does not take is listed in REFUSED with the reason: the
grammar must refuse it and the parser must raise, never read it as another answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from streaming import streamed

from kaname.errors import FormatParseError
from kaname.formats import (
    TurnRequest,
    build_grammar,
    get_format,
    parse,
    render_prompt,
    tools_from_openai,
)
from kaname.grammar import GrammarCompiler, Lark
from kaname.runtimes.synthetic import synthetic_tokenizer

DATA = json.loads((Path(__file__).parent / "data" / "alignment.json").read_text())
TOOLS = tools_from_openai(DATA["tools"])
FIXTURES = DATA["fixtures"]

# (format, case): why the format does not take the template's rendering
REFUSED = {
    # Mistral Small 3.2's template writes "[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{…}"; kaname's
    # mistral format is mistral-common's v13 layout, "[TOOL_CALLS]NAME[ARGS]{…}"
    ("mistral", "call"): "[CALL_ID]",
    ("mistral", "reasoning_call"): "[CALL_ID]",
    ("mistral", "content_calls"): "[CALL_ID]",
    ("mistral", "multiline_value"): "[CALL_ID]",
}
# Formats whose prompt is not byte-exact to the template's, and why (test_formats.py holds
# the layout kaname writes for them).
PROMPT_DIFFERS = {
    "deepseek_v31": "the template ignores tools; kaname writes the model card's tool text",
    "gpt_oss": "the template indents a nested object's last property type onto a new line; "
               "kaname writes harmony's documented TypeScript layout",
    "gemma3": "Gemma 3's template has no tools; kaname lists them in the system text",
}


def _id(f: dict[str, Any]) -> str:
    extra = ",".join(f"{k}={v}" for k, v in f["variables"].items())
    return f"{f['format']}-{f['case']}" + (f"-{extra}" if extra else "")


def _request(f: dict[str, Any]) -> TurnRequest:
    return TurnRequest(tools=TOOLS, reasoning=f["reasoning"])


def _accepts(f: dict[str, Any]) -> tuple[bool, str]:
    fmt = get_format(f["format"])
    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    m = GrammarCompiler(tok).compile(Lark(build_grammar(fmt, _request(f), tok))).new_matcher()
    ok = m.accept_tokens(tok.tokenize_str(f["generated"], parse_special=True))
    return ok and m.is_accepting(), m.error() or ""


def _read(calls: list[Any]) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def test_every_format_has_fixtures():
    """Every format with a public template is in the fixtures (plamo3 has none: its layout
    is vLLM's parsers', in test_formats.OFFICIAL_TURNS)."""
    from kaname.formats import FORMATS

    assert {f["format"] for f in FIXTURES} == set(FORMATS) - {"plamo3"}


@pytest.mark.parametrize("f", FIXTURES, ids=_id)
def test_the_prompt_opens_the_turn_as_the_template_does(f):
    fmt = get_format(f["format"])
    assert _request(f).opening_in(fmt) == f["opening"]
    if f["format"] in PROMPT_DIFFERS:
        return
    prompt = render_prompt(fmt, DATA["messages"], TOOLS, reasoning=f["reasoning"])
    assert prompt == f["prompt"]


@pytest.mark.parametrize("f", FIXTURES, ids=_id)
def test_the_grammar_takes_the_templates_turn_and_the_parser_reads_it(f):
    fmt = get_format(f["format"])
    text = f["opening"] + f["generated"]
    refused = REFUSED.get((f["format"], f["case"]))
    accepted, error = _accepts(f)
    if refused:
        assert refused in text
        assert not accepted
        with pytest.raises(FormatParseError):
            parse(fmt, text, tools=TOOLS)
        return
    assert accepted, error
    want = f["expected"]
    expected = (want["reasoning_content"], want["content"],
                [(c["name"], c["arguments"]) for c in want["tool_calls"]])
    turn = parse(fmt, text, tools=TOOLS)
    assert (turn.reasoning_content, turn.content,
            [(c.name, json.loads(c.arguments)) for c in turn.tool_calls]) == expected
    for size in (1, 3, 8):  # streamed in chunks, the deltas add up to the same message
        msg = streamed(fmt, text, size, TOOLS)
        assert (msg["reasoning_content"], msg["content"], _read(msg["tool_calls"])) == expected
