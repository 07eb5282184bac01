"""The model's own Jinja chat template as the prompt renderer (`--chat-template`)."""

from __future__ import annotations

import json

import pytest

from kaname.chat import prepare_turn
from kaname.cli import main
from kaname.formats import get_format, render_prompt, tools_from_openai
from kaname.runtimes.synthetic import synthetic_tokenizer

# Our own ChatML template (not a model's), enough to render the conversations below.
CHATML = (
    "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tool role') }}"
    "{% endif %}{% if 'forbidden' in m.content %}{{ raise_exception('no forbidden words') }}"
    "{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_prepare_turn_renders_with_the_template():
    fmt = get_format("qwen3")
    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    turn = prepare_turn(fmt, MESSAGES, tok, chat_template=CHATML)
    assert turn.prompt == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"
                           "<|im_end|>\n<|im_start|>assistant\n")
    # without tools, qwen3's spec renders the same conversation identically; with reasoning
    # off (the default) it ends with the empty block Qwen3's own template writes for
    # enable_thinking=False, which this plain ChatML template does not
    assert turn.prompt == render_prompt(fmt, MESSAGES, tools_from_openai(None))
    assert prepare_turn(fmt, MESSAGES, tok, reasoning="on").prompt == turn.prompt
    assert prepare_turn(fmt, MESSAGES, tok).prompt == turn.prompt + "<think>\n\n</think>\n\n"


def test_chat_cli_with_a_template_file(tmp_path, capsys):
    template = tmp_path / "chatml.jinja"
    template.write_text(CHATML)
    messages = json.dumps(MESSAGES)
    assert main(["chat", "--model", "random", "--format", "qwen3", "--messages", messages,
                 "--chat-template", str(template), "--max-tokens", "64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["finish_reason"] in ("stop", "length")
    for extra, refusal in (({"role": "tool", "tool_call_id": "x", "content": "1"}, "no tool role"),
                           ({"role": "user", "content": "a forbidden word"},
                            "no forbidden words")):
        bad = json.dumps([*MESSAGES, extra])
        with pytest.raises(SystemExit) as e:
            main(["chat", "--model", "random", "--format", "qwen3", "--messages", bad,
                  "--chat-template", str(template), "--json"])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert refusal in err and err.count("\n") == 1
    with pytest.raises(SystemExit) as e:
        main(["chat", "--model", "random", "--messages", messages, "--chat-template",
              str(tmp_path / "missing.jinja")])
    assert e.value.code == 2


HERMES_CALLS = [{"id": "c1", "type": "function", "function": {
    "name": "get_weather", "arguments": '{"city": "Paris"}'}}, {"id": "c2", "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Oslo", "days": [1, 2]}'}}]
HERMES_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather, ünïcode", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "now", "description": "The time"}}]


@pytest.mark.parametrize("messages, tools", [
    (MESSAGES, None),
    (MESSAGES[1:], None),
    (MESSAGES, HERMES_TOOLS),
    (MESSAGES[1:], HERMES_TOOLS),
    ([*MESSAGES, {"role": "assistant", "content": "Let me see.", "tool_calls": HERMES_CALLS},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
      {"role": "tool", "tool_call_id": "c2", "content": "rain"},
      {"role": "assistant", "content": "Sunny, then rain."},
      {"role": "user", "content": "Thanks"},
      {"role": "assistant", "content": None, "tool_calls": HERMES_CALLS[:1]},
      {"role": "tool", "tool_call_id": "c1", "content": "still sunny"}], HERMES_TOOLS),
])
def test_hermes_jinja_template_writes_the_hermes_prompt(messages, tools):
    """scripts/hermes.jinja puts vLLM's own chat path on the prompt kaname's `hermes` format
    writes, so that the side-by-side benchmark compares the same prompts."""
    from pathlib import Path

    from kaname.formats import render_template

    template = (Path(__file__).resolve().parents[1] / "scripts" / "hermes.jinja").read_text()
    parsed = tools_from_openai(tools)
    assert render_template(template, messages, parsed) == \
        render_prompt(get_format("hermes"), messages, parsed)


def test_a_template_without_tools_leaves_turns_with_tools_to_the_spec():
    fmt = get_format("hermes")
    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    turn = prepare_turn(fmt, MESSAGES, tok, tools=HERMES_TOOLS, chat_template=CHATML)
    assert turn.prompt == render_prompt(fmt, MESSAGES, tools_from_openai(HERMES_TOOLS))
    assert "get_weather" in turn.prompt
    [why] = [i for i in turn.ignored if i.pointer == "/tools"]
    assert "chat template shows no tools" in why.reason
    # without tools the model's own template renders the turn, and nothing is reported
    plain = prepare_turn(fmt, MESSAGES, tok, chat_template=CHATML)
    assert not any(i.pointer == "/tools" for i in plain.ignored)
