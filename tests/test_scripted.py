"""The scripted test model (runtimes/scripted.py): it follows its script through the real decode
loop, the grammar still masking every step; which turn it plays is read from the prompt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from kaname.decoding import SamplingParams, decode
from kaname.errors import ConstraintError
from kaname.formats import FORMATS, get_format
from kaname.formats.grammar import build_grammar
from kaname.formats.parser import parse
from kaname.formats.render import render_tool_calls
from kaname.formats.request import Tool, TurnRequest
from kaname.grammar import GrammarCompiler, Lark
from kaname.runtimes.scripted import ScriptedRuntime, load_script
from kaname.runtimes.synthetic import synthetic_tokenizer

ROOT = Path(__file__).resolve().parents[1]
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
           "additionalProperties": False}
TOOLS = (Tool("get_weather", WEATHER),)
CALL = {"id": "call_0", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Osaka"}'}}
# as the model writes it: no id yet (Kimi K2 would write a history call's id in its place)
WRITTEN = {"type": "function", "function": CALL["function"]}


def _vocab(fmt, gemma=None):
    """(tokenizer, eos ids, bos id): Gemma's for gemma3 (as `kaname serve` uses), else a
    synthetic vocabulary with the format's special tokens."""
    if fmt.name == "gemma3" and gemma is not None:
        return gemma.tokenizer, gemma.eos_token_ids, gemma.bos_token_id
    tok, eos = synthetic_tokenizer(fmt.special_tokens)
    return tok, eos, None


def _generate(fmt, runtime, req, *, temperature=0.0, seed=None, max_tokens=300):
    """One turn through the decode loop under the turn's grammar: (text after the prompt's
    opening, finish reason)."""
    compiler = GrammarCompiler(runtime.tokenizer)
    grammar = build_grammar(fmt, req, runtime.tokenizer, compiler=compiler)
    d = decode(runtime, runtime.tokenize(fmt.generation_prompt),
               compiler.compile(Lark(grammar)).new_matcher(),
               SamplingParams(temperature=temperature, seed=seed), max_tokens=max_tokens)
    return d.text, d.finish_reason


def _reasoning_can_be_off(fmt) -> bool:
    try:
        fmt.opening("off")
    except ConstraintError:  # the prompt always opens a reasoning block
        return False
    return True


# Every format with tool calls whose turn can start with its calls (those that always reason
# open the turn inside a reasoning block: qwen3_thinking, whose markers are qwen3's).
CALL_FORMATS = [n for n, f in sorted(FORMATS.items())
                if f.tool_calls is not None and _reasoning_can_be_off(f)]


@pytest.mark.parametrize("name", CALL_FORMATS)
def test_a_scripted_call_comes_out_as_that_call(name, gemma):
    """The script is the call as the format writes it (kaname's own history renderer): the
    generation follows it byte for byte and parses as that call, at temperature 0 and 1."""
    fmt = get_format(name)
    script = render_tool_calls(fmt, [WRITTEN]) + fmt.calls_end
    tok, eos, bos = _vocab(fmt, gemma)
    runtime = ScriptedRuntime(tok, [script], eos_token_ids=eos, bos_token_id=bos,
                              end_markers=fmt.end_markers)
    req = TurnRequest(tools=TOOLS, tool_choice="auto", parallel_tool_calls=False)
    for temperature, seed in ((0.0, None), (1.0, 1), (1.0, 2)):
        text, finish = _generate(fmt, runtime, req, temperature=temperature, seed=seed)
        assert finish == "stop"
        turn = parse(fmt, req.opening_in(fmt) + text, tools=TOOLS)
        [call] = turn.tool_calls
        assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Osaka"}
        assert script.startswith(text.rstrip()), (text, script)


@pytest.mark.parametrize("name", ["qwen3", "hermes", "gemma3", "kimi_k2"])
def test_a_script_outside_the_grammar_gives_valid_output(name, gemma):
    """A call to a tool that does not exist, with arguments its schema refuses, then text
    where the grammar allows none: the mask wins at each of those steps, and the turn still
    ends (not cut by max_tokens) as one valid call."""
    fmt = get_format(name)
    bad_call = {"type": "function", "function": {
        "name": "launch_rockets", "arguments": '{"count": 99, "city": ["Osaka", 1]}'}}
    script = render_tool_calls(fmt, [bad_call]) + " and then some text" + fmt.calls_end
    tok, eos, bos = _vocab(fmt, gemma)
    runtime = ScriptedRuntime(tok, [script], eos_token_ids=eos, bos_token_id=bos,
                              end_markers=fmt.end_markers)
    req = TurnRequest(tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    text, finish = _generate(fmt, runtime, req)
    assert finish == "stop", text
    [call] = parse(fmt, req.opening_in(fmt) + text, tools=TOOLS).tool_calls
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    assert not text.startswith(script)  # (the script's words may still stand in a string)


def test_an_exhausted_script_ends_the_turn():
    fmt = get_format("qwen3")
    tok, eos, _ = _vocab(fmt)
    runtime = ScriptedRuntime(tok, [], eos_token_ids=eos, end_markers=fmt.end_markers)
    text, finish = _generate(fmt, runtime, TurnRequest())
    assert (text, finish) == (fmt.end_of_turn, "stop")  # at the first step


def test_the_turn_is_the_number_of_assistant_turns_in_the_prompt():
    """Turn k (from 0) for a prompt that holds k assistant turns before the one it opens,
    whatever the server was asked before (a side request does not shift the script)."""
    from kaname.formats.render import render_prompt

    fmt = get_format("qwen3")
    tok, eos, _ = _vocab(fmt)
    runtime = ScriptedRuntime(tok, ["a", "b"], eos_token_ids=eos,
                              assistant_prefix=fmt.assistant_prefix,
                              generation_prompts=[fmt.generation_prompt + fmt.opening("off")])
    user = {"role": "user", "content": "Weather in Osaka?"}
    history = [user, {"role": "assistant", "content": None, "tool_calls": [CALL]},
               {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}]
    for messages, turn in (([user], 0), (history, 1), ([user], 0), (history, 1),
                           ([*history, {"role": "assistant", "content": "Sunny."}, user], 2)):
        prompt = render_prompt(fmt, messages, reasoning="off")
        runtime.start(runtime.tokenize(prompt))
        assert runtime.turn == turn, prompt


def kaname(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kaname.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("name", ["qwen3", "gemma3"])
def test_kaname_chat_plays_a_tool_round_trip(name, tmp_path):
    """`--model scripted:PATH`: turn 1 calls the tool, turn 2 (the tool's result in the
    conversation) answers; each request gets its turn from its own messages."""
    fmt = get_format(name)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [render_tool_calls(fmt, [WRITTEN]),
                                            "It is sunny in Osaka."]}))
    tools = json.dumps([{"type": "function", "function": {"name": "get_weather",
                                                          "parameters": WEATHER}}])
    user = {"role": "user", "content": "Weather in Osaka?"}
    history = [user, {"role": "assistant", "content": None, "tool_calls": [CALL]},
               {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}]
    answers = []
    for messages in ([user], history):
        p = kaname("chat", "--model", f"scripted:{script}", "--format", name, "--messages",
                   json.dumps(messages), "--tools", tools, "--json")
        assert p.returncode == 0, p.stderr
        answers.append(json.loads(p.stdout))
    first, second = answers
    assert first["finish_reason"] == "tool_calls"
    [call] = first["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Osaka"}
    assert second["finish_reason"] == "stop"
    assert second["message"]["content"] == "It is sunny in Osaka."


@pytest.mark.parametrize("text, words", [
    ('{"turns": "one"}', ["turns"]),
    ("[]", ["turns"]),
    ("not json", ["not JSON"]),
])
def test_a_bad_script_is_refused(text, words, tmp_path):
    path = tmp_path / "script.json"
    path.write_text(text)
    with pytest.raises(ValueError) as e:
        load_script(path)
    assert all(w in str(e.value) for w in words)
    p = kaname("chat", "--model", f"scripted:{path}", "--format", "qwen3",
               "--messages", '[{"role": "user", "content": "hi"}]')
    assert p.returncode == 2 and "scripted model" in p.stderr, p.stderr
