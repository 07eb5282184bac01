"""Reasoning opened by the prompt: Qwen3-2507 Thinking's generation prompt ends with
"<think>\\n", DeepSeek V3.1's with "<think>" (thinking) or "</think>" (its default). The grammar
starts inside (or after) the block, the parser reads the prompt's opening first, and
`reasoning_content` comes out the same streamed and not."""

from __future__ import annotations

import json
import random

import pytest
from streaming import merge_chat_chunks

from kaname.chat import opened_by, prepare_turn
from kaname.decoding import SamplingParams, decode
from kaname.errors import ConstraintError
from kaname.formats import StreamParser, get_format, merge_deltas, parse
from kaname.grammar import GrammarCompiler, Lark
from kaname.runtimes.random_logits import RandomLogitsRuntime
from kaname.runtimes.synthetic import synthetic_tokenizer

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
    "additionalProperties": False}}}]
ASK = [{"role": "user", "content": "Weather in Tokyo?"}]

# What each model writes after its prompt's opening (model cards and official templates):
# reasoning, the block's end, then the answer or a call.
QWEN3_THINKING_CALL = ('Need weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", '
                       '"arguments": {"city": "Tokyo"}}\n</tool_call><|im_end|>')
DEEPSEEK_THINKING_ANSWER = "Need weather.</think>It is sunny.<｜end▁of▁sentence｜>"
DEEPSEEK_CALL = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                 '{"city": "Tokyo"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>')


def _prepared(name: str, reasoning: str, **kw):
    fmt = get_format(name)
    tok, eos = synthetic_tokenizer(fmt.special_tokens)
    compiler = GrammarCompiler(tok)
    return fmt, tok, eos, compiler, prepare_turn(fmt, ASK, tok, compiler, tools=TOOLS,
                                                 reasoning=reasoning, **kw)


def _accepts(compiler, tok, grammar: str, text: str) -> bool:
    m = compiler.compile(Lark(grammar)).new_matcher()
    return m.accept_tokens(tok.tokenize_str(text, parse_special=True)) and m.is_accepting()


def _streamed(fmt, opening: str, text: str, seed: int) -> dict:
    r = random.Random(seed)
    sp = StreamParser(fmt)
    deltas = sp.feed(opening)
    i = 0
    while i < len(text):
        step = r.randint(1, 7)
        deltas += sp.feed(text[i:i + step])
        i += step
    return merge_deltas(deltas + sp.finish()[1])


@pytest.mark.parametrize(("name", "reasoning", "opening", "text", "content"), [
    ("qwen3_thinking", "on", "<think>\n", QWEN3_THINKING_CALL, None),
    ("qwen3_thinking", "required", "<think>\n", QWEN3_THINKING_CALL, None),
    ("deepseek_v31", "required", "<think>", DEEPSEEK_THINKING_ANSWER, "It is sunny."),
])
def test_a_turn_that_starts_inside_the_block(name, reasoning, opening, text, content):
    fmt, tok, _, compiler, turn = _prepared(name, reasoning)
    assert turn.request.opening == opening
    assert turn.prompt.endswith(fmt.generation_prompt + opening)
    assert _accepts(compiler, tok, turn.grammar, text)
    assert not _accepts(compiler, tok, turn.grammar, opening + text), "opened twice"
    parsed = parse(fmt, opening + text, tools=turn.request.tools)
    assert parsed.reasoning_content == "Need weather."
    assert parsed.content == content
    for seed in range(20):
        merged = _streamed(fmt, opening, text, seed)
        assert merged["reasoning_content"] == parsed.reasoning_content
        assert merged["content"] == parsed.content


def test_deepseek_default_is_the_prompt_closed_block():
    """DeepSeek V3.1's template defaults to not thinking: the prompt ends with </think>, after
    which the model answers or calls; neither marker may come again."""
    fmt, tok, _, compiler, turn = _prepared("deepseek_v31", "on")
    assert turn.prompt.endswith("<｜Assistant｜></think>")
    assert _accepts(compiler, tok, turn.grammar, DEEPSEEK_CALL)
    assert not _accepts(compiler, tok, turn.grammar, "</think>" + DEEPSEEK_CALL)
    assert not _accepts(compiler, tok, turn.grammar, "<think>x</think>" + DEEPSEEK_CALL)
    parsed = parse(fmt, "</think>" + DEEPSEEK_CALL, tools=turn.request.tools)
    assert parsed.reasoning_content is None
    assert [json.loads(c.arguments) for c in parsed.tool_calls] == [{"city": "Tokyo"}]


def test_a_model_that_always_reasons_cannot_be_switched_off():
    with pytest.raises(ConstraintError, match="always reasons"):
        _prepared("qwen3_thinking", "off")


def test_a_jinja_prompt_that_opens_the_block_is_detected():
    """A model's own template (here one whose generation prompt ends in "<think>\\n", as
    Qwen3-2507 Thinking's does) used with the plain qwen3 format."""
    template = ("{% if tools %}<|im_start|>system\n{{ tools | tojson }}<|im_end|>\n{% endif %}"
                "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n"
                "{% endif %}")
    fmt, tok, _, compiler, turn = _prepared("qwen3", "on", chat_template=template)
    assert turn.request.opening == "<think>\n" == opened_by(fmt, turn.prompt)
    assert _accepts(compiler, tok, turn.grammar, QWEN3_THINKING_CALL)
    assert parse(fmt, "<think>\n" + QWEN3_THINKING_CALL).reasoning_content == "Need weather."


@pytest.mark.parametrize(("name", "reasoning"), [("qwen3_thinking", "on"),
                                                 ("deepseek_v31", "required"),
                                                 ("deepseek_v31", "on")])
def test_random_model_turns_parse_with_the_opening(name, reasoning):
    fmt, tok, eos, compiler, turn = _prepared(name, reasoning, tool_choice="auto")
    compiled = compiler.compile(Lark(turn.grammar))
    runtime = RandomLogitsRuntime(tok, eos_token_ids=eos)
    ended = 0
    for seed in range(12):
        runtime.seed = seed
        d = decode(runtime, [0], compiled.new_matcher(), SamplingParams(), max_tokens=300)
        if d.finish_reason != "stop":
            continue
        ended += 1
        text = turn.request.opening + d.text
        parsed = parse(fmt, text, tools=turn.request.tools)
        if turn.request.opening == fmt.reasoning.begin:
            assert parsed.reasoning_content is not None, text
        else:
            assert parsed.reasoning_content is None, text
        merged = _streamed(fmt, turn.request.opening, d.text, seed)
        assert (merged["reasoning_content"], merged["content"]) == (parsed.reasoning_content,
                                                                    parsed.content)
    assert ended >= 4, ended


def test_through_the_server_streamed_and_not():
    """qwen3_thinking through `kaname serve`: reasoning_content the same streamed and not; a
    request switching reasoning off is a 400 naming its field; --reasoning off fails at
    start."""
    import subprocess
    import sys

    import openai
    from serverproc import ServerProcess

    with ServerProcess("--model", "random", "--format", "qwen3_thinking") as s:
        c = openai.OpenAI(base_url=f"{s.url}/v1", api_key="x", max_retries=0)
        seen = 0
        for seed in range(4):
            r = c.chat.completions.create(model="random", messages=ASK, max_tokens=200,
                                          seed=seed, temperature=1.0)
            message = r.choices[0].message
            reasoning = message.model_extra.get("reasoning_content")
            seen += reasoning is not None
            chunks = c.chat.completions.create(model="random", messages=ASK, max_tokens=200,
                                               seed=seed, temperature=1.0, stream=True)
            deltas = [ch.choices[0].delta.to_dict() for ch in chunks if ch.choices]
            merged = merge_chat_chunks([d for d in deltas if d])
            # the stream's first chunk carries content "" (OpenAI's role chunk)
            assert (merged["reasoning_content"], merged["content"] or None) == (
                reasoning, message.content)
        assert seen >= 2  # a turn that ended reasoned; one cut inside the block has only it
        # switching reasoning off cannot be honoured: served reasoning, and reported
        for extra, param in (({"reasoning_effort": "none"}, "/reasoning_effort"),
                             ({"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
                              "/chat_template_kwargs/enable_thinking")):
            r = c.chat.completions.create(model="random", messages=ASK, max_tokens=5, **extra)
            (ignored,) = r.model_extra["kaname"]["ignored"]
            assert ignored["pointer"] == param and "always reasons" in ignored["reason"]
    start = subprocess.run([sys.executable, "-m", "kaname.cli", "serve", "--model", "random",
                            "--format", "qwen3_thinking", "--reasoning", "off", "--port", "1"],
                           capture_output=True, text=True, timeout=120)
    assert start.returncode != 0 and "always reasons" in start.stderr
