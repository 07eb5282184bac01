"""gpt-oss (harmony): every layout the model is documented to write is accepted token by token
and parsed to the same tool call, streamed or not; what is not harmony is refused by both."""

from __future__ import annotations

import functools
import json
import random

import pytest

from kaname.errors import FormatParseError
from kaname.formats import (
    StreamParser,
    Tool,
    TurnRequest,
    build_grammar,
    get_format,
    merge_deltas,
    parse,
    render_assistant,
)
from kaname.formats.items import CallDelta, TextDelta
from kaname.grammar import GrammarCompiler, Guards, Lark
from kaname.runtimes.synthetic import synthetic_tokenizer

FMT = get_format("gpt_oss")
WEATHER = Tool("get_weather", {"type": "object", "properties": {
    "location": {"type": "string"}, "format": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["location"]})
FILES = Tool("generate_file", {"type": "object", "properties": {
    "template": {"type": "string"}, "path": {"type": "string"}},
    "required": ["template", "path"]})
TOOLS = (WEATHER, FILES)
ARGS = '{"location": "San Francisco", "format": "celsius"}'

# The call header around NAME, as each source writes it (text after `<|start|>assistant`).
HEADERS = {
    # the Hugging Face chat template (and harmony's parser tests, "missing message token")
    "before json": " to=functions.{name}<|channel|>commentary json<|message|>",
    # harmony's renderer: recipient in the role section, " <|constrain|>json"
    "before constrain": " to=functions.{name}<|channel|>commentary <|constrain|>json<|message|>",
    # harmony's tests: "the model might not output a space before constrain"
    "before constrain adjacent": " to=functions.{name}<|channel|>commentary<|constrain|>json"
                                 "<|message|>",
    # no content type (harmony's parser and vLLM read it as JSON)
    "before bare": " to=functions.{name}<|channel|>commentary<|message|>",
    # harmony's docs ("Receiving tool calls"), xgrammar's and vLLM's structural tags
    "after constrain": "<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>",
    # harmony's docs ("Preambles") and its parser tests
    "after constrain adjacent": "<|channel|>commentary to=functions.{name}<|constrain|>json"
                                "<|message|>",
    "after json": "<|channel|>commentary to=functions.{name} json<|message|>",
    "after bare": "<|channel|>commentary to=functions.{name}<|message|>",
}
ANALYSIS = ("<|channel|>analysis<|message|>Need to use function get_weather.<|end|><|start|>"
            "assistant")
PREAMBLE_TEXT = "**Action plan**:\n1. Look up the weather\n---\nWill start now"
PREAMBLE = f"<|channel|>commentary<|message|>{PREAMBLE_TEXT}<|end|><|start|>assistant"

# Verbatim from harmony's docs/format.md and its tests: the model's output after the prompt's
# `<|start|>assistant` -> (reasoning, preamble, name, arguments).
DOCUMENTED = {
    "docs: receiving tool calls": (
        "<|channel|>analysis<|message|>Need to use function get_weather.<|end|><|start|>"
        "assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"location":"San Francisco"}<|call|>',
        "Need to use function get_weather.", None, "get_weather", {"location": "San Francisco"}),
    "docs: preambles": (
        "<|channel|>analysis<|message|>{long chain of thought}<|end|><|start|>assistant"
        "<|channel|>commentary<|message|>**Action plan**:\n1. Generate an HTML file\n2. Generate "
        "a JavaScript for the Node.js server\n3. Start the server\n---\nWill start executing the "
        "plan step by step<|end|><|start|>assistant<|channel|>commentary to=functions."
        'generate_file<|constrain|>json<|message|>{"template": "basic_html", "path": '
        '"index.html"}<|call|>',
        "{long chain of thought}", "**Action plan**:\n1. Generate an HTML file\n2. Generate a "
        "JavaScript for the Node.js server\n3. Start the server\n---\nWill start executing the "
        "plan step by step", "generate_file", {"template": "basic_html", "path": "index.html"}),
    "harmony tests: constrain tokenized": (
        ' to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>'
        '{"location": "Tokyo"}<|call|>', None, None, "get_weather", {"location": "Tokyo"}),
    "harmony tests: channel before recipient, adjacent": (
        "<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>"
        '{"location":"Paris"}<|call|>', None, None, "get_weather", {"location": "Paris"}),
}


def _turn(header: str, *, analysis: bool, preamble: bool, name: str = "get_weather",
          args: str = ARGS) -> str:
    return ((ANALYSIS if analysis else "") + (PREAMBLE if preamble else "")
            + header.format(name=name) + args + "<|call|>")


CASES = [(h, a, p) for h in HEADERS for a in (False, True) for p in (False, True)]


# The docs' and harmony's tests' arguments are compact JSON ({"location":"San Francisco"}),
# which the default guards' fixed separators (", ", ": ") refuse: whitespace that JSON allows,
# within the guards' bound, takes both.
FLEXIBLE = Guards(separators=None)


@functools.cache
def _compiled(tool_choice: str = "auto", strict_level: str = "full",
              guards: Guards | None = None, json_content: bool = False):
    tok, _ = synthetic_tokenizer(FMT.special_tokens)
    req = TurnRequest(tools=TOOLS, tool_choice=tool_choice, reasoning="on",
                      strict_level=strict_level,
                      response_format={"type": "json_object"} if json_content else None)
    lark = build_grammar(FMT, req, tok, guards=guards)
    return tok, GrammarCompiler(tok, guards=guards).compile(Lark(lark))


def _accepts(text: str, tool_choice: str = "auto", strict_level: str = "full",
             guards: Guards | None = None, json_content: bool = False) -> bool:
    tok, compiled = _compiled(tool_choice, strict_level, guards, json_content)
    m = compiled.new_matcher()
    return m.accept_tokens(tok.tokenize_str(text, parse_special=True)) and m.is_accepting()


def _streamed(text: str, seed: int) -> dict:
    """The message a client assembles from StreamParser deltas over a random chunking."""
    r = random.Random(seed)
    sp = StreamParser(FMT, tools=TOOLS)
    deltas, i = [], 0
    while i < len(text):
        step = r.randint(1, 12)
        deltas += sp.feed(text[i:i + step])
        i += step
    _, rest = sp.finish()
    return merge_deltas(deltas + rest)


def _read(text: str) -> tuple[str | None, str | None, list[tuple[str, object]]]:
    """(reasoning, content, [(name, arguments)]), the same streamed under 30 chunkings."""
    turn = parse(FMT, text, tools=TOOLS)
    calls = [(c.name, json.loads(c.arguments)) for c in turn.tool_calls]
    for seed in range(30):
        msg = _streamed(text, seed)
        assert (msg["reasoning_content"], msg["content"]) == (turn.reasoning_content,
                                                              turn.content), seed
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in msg["tool_calls"]] == calls, seed
    return turn.reasoning_content, turn.content, calls


@pytest.mark.parametrize(("header", "analysis", "preamble"), CASES,
                         ids=[f"{h}{' +analysis' * a}{' +preamble' * p}" for h, a, p in CASES])
def test_every_header_layout_is_accepted_and_parsed_to_the_same_call(header, analysis,
                                                                      preamble):
    text = _turn(HEADERS[header], analysis=analysis, preamble=preamble)
    assert _accepts(text), text
    assert _read(text) == ("Need to use function get_weather." if analysis else None,
                           PREAMBLE_TEXT if preamble else None,
                           [("get_weather", json.loads(ARGS))])


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_documented_outputs_verbatim(name):
    text, reasoning, preamble, tool, args = DOCUMENTED[name]
    assert _accepts(text, guards=FLEXIBLE), text
    assert _read(text) == (reasoning, preamble, [(tool, args)])


def test_every_header_under_every_tool_choice_that_calls():
    """required and named calls take every header and a preamble too; the arguments stay bound
    to the tool's schema whichever header the model wrote."""
    for header in HEADERS.values():
        for choice in ("required", "get_weather"):
            assert _accepts(_turn(header, analysis=True, preamble=True), choice), (header, choice)
        assert not _accepts(_turn(header, analysis=False, preamble=False, args='{"city": "X"}'))
        assert not _accepts(_turn(header, analysis=False, preamble=False, name="get_wether"))
        # strict level off: any name, any object, in every header
        assert _accepts(_turn(header, analysis=False, preamble=False, name="other",
                              args='{"x": 1}'), strict_level="off")
    assert _read(_turn(HEADERS["after json"], analysis=False, preamble=False, name="other",
                       args='{"x": 1}'))[2] == [("other", {"x": 1})]
    none = TurnRequest(tools=TOOLS, tool_choice="none", reasoning="on")
    tok, _ = synthetic_tokenizer(FMT.special_tokens)
    m = GrammarCompiler(tok).compile(Lark(build_grammar(FMT, none, tok))).new_matcher()
    call = _turn(HEADERS["after constrain"], analysis=False, preamble=False)
    assert not (m.accept_tokens(tok.tokenize_str(call, parse_special=True))
                and m.is_accepting())


def test_no_preamble_where_content_must_be_json():
    """A preamble is the turn's content: with a JSON response_format content follows the
    schema, so the model calls without one (or answers in JSON)."""
    for header in HEADERS.values():
        assert _accepts(_turn(header, analysis=True, preamble=False), json_content=True)
        assert not _accepts(_turn(header, analysis=True, preamble=True), json_content=True)
    assert _accepts('<|channel|>final<|message|>{"a": 1}<|return|>', json_content=True)


CALL = _turn(HEADERS["after constrain"], analysis=False, preamble=False)
FINAL = "<|channel|>final<|message|>It is sunny.<|return|>"
# Refused by the grammar, and the parser raises: never a call read as content, nor content
# read from text that is not harmony.
NOT_HARMONY = {
    "plain text": "It is sunny.",
    "a final answer ending as a call": "<|channel|>final<|message|>It is sunny.<|call|>",
    "an answer next to a call": FINAL[:-len("<|return|>")] + "<|end|><|start|>assistant" + CALL,
    "a preamble before an answer": PREAMBLE + FINAL,
    "a preamble that ends the turn": PREAMBLE.removesuffix("<|end|><|start|>assistant")
                                     + "<|return|>",
    "two preambles": PREAMBLE + PREAMBLE + CALL,
    "analysis after a preamble": PREAMBLE + ANALYSIS + CALL,
    "two analysis messages": ANALYSIS + ANALYSIS + CALL,
    "another recipient": "<|channel|>commentary to=browser.search <|constrain|>json<|message|>"
                         '{"query": "x"}<|call|>',
    "the analysis channel for a function": "<|channel|>analysis to=functions.get_weather "
                                           '<|constrain|>json<|message|>{"location": "X"}<|call|>',
    "arguments that are not JSON": "<|channel|>commentary to=functions.get_weather <|constrain|>"
                                   "json<|message|>{location: X}<|call|>",
    "a call ending as an answer": CALL.removesuffix("<|call|>") + "<|return|>",
    "a content type glued to the name": " to=functions.get_weatherjson<|message|>"
                                        '{"location": "X"}<|call|>',
}


@pytest.mark.parametrize("name", sorted(NOT_HARMONY))
def test_what_is_not_harmony_is_refused_by_grammar_and_parser(name):
    text = NOT_HARMONY[name]
    assert not _accepts(text), text
    with pytest.raises(FormatParseError):
        parse(FMT, text, tools=TOOLS)
    # streamed: raised as soon as the text cannot be harmony, at the latest by finish() (an
    # answer's text streams until <|return|>: with a spelled-out vocabulary "<|end|>" is text)
    sp = StreamParser(FMT, tools=TOOLS)
    with pytest.raises(FormatParseError):
        for i in range(0, len(text), 5):
            sp.feed(text[i:i + 5])
        sp.finish()


def test_a_preamble_is_content_and_renders_back_as_a_preamble():
    """History: the client sends the preamble back as the call's content; kaname writes it as
    the commentary message it was, and the call in the template's header."""
    text = _turn(HEADERS["after constrain adjacent"], analysis=True, preamble=True)
    msg = parse(FMT, text, tools=TOOLS).to_message()
    assert msg["content"] == PREAMBLE_TEXT
    rendered = render_assistant(FMT, msg, "/messages/2")
    assert rendered == _turn(HEADERS["before json"], analysis=True, preamble=True)
    assert _accepts(rendered)
    # without a call there is no preamble: content is the answer
    assert render_assistant(FMT, {"role": "assistant", "content": "Sunny."}, "") == \
        "<|channel|>final<|message|>Sunny.<|end|>"


def test_partial_text_waits_where_the_channel_is_undecided():
    """`<|channel|>commentary` may open a preamble or a call: nothing is emitted until the
    header says which."""
    for cut in ("<|channel|>", "<|channel|>commentary", "<|channel|>commentary to=func",
                "<|channel|>commentary to=functions.get_weather <|constrain|>js"):
        assert StreamParser(FMT, tools=TOOLS).feed(cut) == [], cut
    sp = StreamParser(FMT, tools=TOOLS)
    deltas = sp.feed(PREAMBLE[:-len("<|start|>assistant")])
    assert deltas == [TextDelta("content", PREAMBLE_TEXT)]
    deltas = sp.feed("<|start|>assistant<|channel|>commentary to=functions.get_weather json"
                     "<|message|>{")
    assert isinstance(deltas[0], CallDelta) and deltas[0].name == "get_weather"
