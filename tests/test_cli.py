"""The `kaname generate` contract that checks outside the test suite rely on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kaname.formats import FORMATS, get_format

ROOT = Path(__file__).resolve().parents[1]


def kaname(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kaname.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def assert_bad_input(p: subprocess.CompletedProcess[str], *words: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert p.stdout == ""


def test_generate_json_on_the_default_model():
    p = kaname("generate", "--json", "--json-schema", "examples/company.schema.json",
               "ほしぞら書店株式会社は2011年5月に横浜市中区で設立された。従業員は約120名。\nJSON: ")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert set(out) == {"text", "finish_reason", "usage", "valid"}
    assert set(out["usage"]) == {"prompt_tokens", "completion_tokens", "forced_tokens",
                                 "draft_tokens", "draft_accepted"}
    assert out["finish_reason"] == "stop" and out["valid"] is True
    assert out["usage"]["forced_tokens"] > 0
    assert json.loads(out["text"])["founded_year"] == 2011


@pytest.mark.parametrize("args, valid", [
    (["--regex", "[0-9]{3}-[0-9]{4}"], None),
    (["--choice", "yes", "--choice", "no"], None),
    (["--response-format", '{"type": "json_object"}'], True),
])
def test_generate_random_model(args, valid):
    p = kaname("generate", "--model", "random", "--json", "--seed", "3", *args, "Answer:")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["finish_reason"] == "stop" and out["valid"] is valid
    if "--choice" in args:
        assert out["text"] in ("yes", "no")
    if "--regex" in args:
        assert len(out["text"]) == 8 and out["text"][3] == "-"


def test_adversarial_model_ends(tmp_path):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "string"}},
                                  "required": ["a"]}))
    p = kaname("generate", "--model", "adversarial", "--json", "--json-schema", str(schema),
               "--max-tokens", "512", "x")
    out = json.loads(p.stdout)
    assert out["finish_reason"] == "stop" and out["valid"] is True


def test_invalid_schema(tmp_path):
    f = tmp_path / "s.json"
    f.write_text('{"type": "object", "properties": {"a": {"type": "strin"}}}')
    assert_bad_input(kaname("generate", "--model", "random", "--json-schema", str(f), "x"),
                     "/properties/a/type")


def test_unsupported_keyword_under_strict(tmp_path):
    f = tmp_path / "s.json"
    f.write_text('{"type": "array", "uniqueItems": true}')
    assert_bad_input(kaname("generate", "--model", "random", "--json-schema", str(f), "x"),
                     "uniqueItems", "/uniqueItems", "strict")


def test_bad_regex():
    assert_bad_input(kaname("generate", "--model", "random", "--regex", "a(", "x"),
                     "regex", "unclosed group")


def test_bad_lark(tmp_path):
    f = tmp_path / "g.lark"
    f.write_text("start: /[/\n")
    assert_bad_input(kaname("generate", "--model", "random", "--grammar", str(f), "x"),
                     "Lark", "unclosed character class")


def test_too_costly_grammar(tmp_path):
    f = tmp_path / "g.lark"
    f.write_text("start: s0\n" + "\n".join(f's{i}: s{i + 1} s{i + 1} | "x"' for i in range(3000))
                 + '\ns3000: "y"\n')
    # its first mask already exceeds llguidance's per-step limit: refused at compile time
    assert_bad_input(kaname("generate", "--model", "random", "--grammar", str(f), "x"),
                     "too costly")
    big = tmp_path / "big.lark"
    big.write_text("start: " + " | ".join(f'"w{i}"' for i in range(200_000)) + "\n")
    assert_bad_input(kaname("generate", "--model", "random", "--grammar", str(big), "x"),
                     "too costly")


@pytest.mark.parametrize("args, words", [
    (["--regex", "a", "--choice", "b"], ["at most one"]),
    (["--json-schema", "missing.json"], ["no such file"]),
    (["--response-format", "{not json"], ["invalid JSON"]),
    (["--model", "nope.gguf"], ["--model"]),
    (["--max-tokens", "0"], ["max-tokens"]),
    (["--temperature", "abc"], ["temperature"]),
])
def test_bad_arguments(args, words):
    assert_bad_input(kaname("generate", *args, "x"), *words)


def test_ctx_size_reaches_generate():
    """--ctx-size is the runtime's context: a prompt of ~60 tokens fits the test model's own
    (unbounded), and not 16 tokens of it (bad input, exit 2, naming the size)."""
    prompt = "word " * 60
    ok = kaname("generate", "--model", "random", "--json", "--max-tokens", "4", prompt)
    assert ok.returncode == 0, ok.stderr
    assert_bad_input(kaname("generate", "--model", "random", "--ctx-size", "16",
                            "--max-tokens", "4", prompt), "maximum context length is 16 tokens")


MESSAGES = '[{"role": "user", "content": "Weather in Tokyo?"}]'
TOOLS = ('[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": '
         '"object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]')


def test_formats_json():
    p = kaname("formats", "--json")
    assert p.returncode == 0
    names = {f["name"] for f in json.loads(p.stdout)}
    assert {"gemma3", "qwen3", "kimi_k2", "plamo3"} <= names


@pytest.mark.parametrize("fmt", ["gemma3", "qwen3", "kimi_k2", "plamo3"])
def test_chat_random_model_every_format(fmt):
    p = kaname("chat", "--model", "random", "--format", fmt, "--messages", MESSAGES,
               "--tools", TOOLS, "--tool-choice", "get_weather", "--parallel-tool-calls",
               "false", "--json", "--seed", "2")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert set(out) == {"message", "finish_reason", "usage"}
    assert out["message"]["role"] == "assistant"
    if out["finish_reason"] != "length":
        assert out["finish_reason"] == "tool_calls"
        [call] = out["message"]["tool_calls"]
        assert call["function"]["name"] == "get_weather"
        assert isinstance(json.loads(call["function"]["arguments"])["city"], str)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_chat_reasoning_defaults_to_the_formats_own(name):
    """Without a reasoning mode, every format gets one it can have (the pipeline's
    resolve_reasoning, as `kaname serve` where a request does not say): the model may reason
    where the format has a reasoning block, else it does not."""
    from kaname.chat import resolve_reasoning
    from kaname.formats.request import TurnRequest

    fmt = get_format(name)
    mode, ignored = resolve_reasoning(fmt, TurnRequest(), None)
    assert (mode, ignored) == ("on" if fmt.reasoning else "off", [])
    fmt.opening(mode)  # raises ConstraintError where the format cannot have it


def test_chat_without_reasoning_on_a_format_that_always_reasons():
    """qwen3_thinking's prompt always opens its reasoning block: a fixed --reasoning off
    default made this exit 2."""
    p = kaname("chat", "--model", "random", "--format", "qwen3_thinking", "--messages",
               MESSAGES, "--max-tokens", "32", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["message"]["role"] == "assistant"


@pytest.mark.parametrize("args, words", [
    (["--format", "nope"], ["unknown chat format"]),
    (["--tools", TOOLS, "--tool-choice", "nope"], ["unknown tool"]),
    (["--tool-choice", "required"], ["at least one tool"]),
])
def test_chat_bad_input(args, words):
    assert_bad_input(kaname("chat", "--model", "random", "--messages", MESSAGES, *args), *words)


def test_parser_imports_no_benchmark():
    """Building the parser (and parsing a bench command line) must not import the bench suites:
    every `kaname` command would pay for them (numpy, the peers, the runtimes) at start-up."""
    code = ("import sys, kaname.cli\n"
            "p = kaname.cli.build_parser()\n"
            "for argv in (['generate', 'x'], ['bench', 'engine', '--quick'],\n"
            "             ['bench', 'toolcall', '--data', 'd', '--out', 'o'],\n"
            "             ['bench', 'schemas', '--limit', '3'], ['bench', 'e2e', '--quick']):\n"
            "    p.parse_args(argv)\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('kaname.bench.'))\n"
            "assert not loaded, loaded\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr


def test_chat_non_strict_tool_with_unenforceable_keywords_runs_and_says_so():
    """The measured failure: an MCP-style tool with uniqueItems and format uri-reference failed
    the whole request. Without `strict` it runs; what is not enforced (uniqueItems over
    strings) is named on stderr."""
    tools = json.dumps([{"type": "function", "function": {"name": "tag", "parameters": {
        "type": "object", "properties": {
            "url": {"type": "string", "format": "uri-reference", "maxLength": 20},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
        "required": ["url", "tags"], "additionalProperties": False}}}])
    p = kaname("chat", "--model", "random", "--format", "qwen3", "--messages", MESSAGES,
               "--tools", tools, "--tool-choice", "required", "--json", "--seed", "1")
    assert p.returncode == 0, p.stderr
    assert set(json.loads(p.stdout)) == {"message", "finish_reason", "usage"}
    assert "not enforced: uniqueItems at /tools/0/function/parameters/properties/tags/" \
           "uniqueItems" in p.stderr
    # uri-reference is enforced (RFC 3986 as a pattern, grammar/rewrite.py): not named
    assert "/properties/url/format" not in p.stderr
    strict = tools.replace('"name": "tag",', '"name": "tag", "strict": true,')
    p = kaname("chat", "--model", "random", "--format", "qwen3", "--messages", MESSAGES,
               "--tools", strict, "--json")
    assert p.returncode == 2 and "/tools/0/function/parameters/properties/" in p.stderr
