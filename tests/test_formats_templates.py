"""Rendering with a model's own Jinja chat template; reading it from a GGUF."""

from __future__ import annotations

import datetime
import struct

import pytest
from test_formats import MESSAGES, TOOLS

from kaname.errors import ConstraintError, ModelError
from kaname.formats import (
    chat_template_from_gguf,
    get_format,
    render_prompt,
    render_template,
    tools_from_openai,
)

# kaname's mistral format written as a Jinja template (our own, for these tests)
MISTRAL_TEMPLATE = """{{- bos_token }}
{%- set ns = namespace(tools_shown=false) %}
{%- for m in messages %}
    {%- if m.role == 'system' %}
        {{- '[SYSTEM_PROMPT]' + m.content + '[/SYSTEM_PROMPT]' }}
    {%- elif m.role == 'user' %}
        {%- if tools and not ns.tools_shown %}
            {{- '[AVAILABLE_TOOLS]' + tools | tojson + '[/AVAILABLE_TOOLS]' }}
            {%- set ns.tools_shown = true %}
        {%- endif %}
        {{- '[INST]' + m.content + '[/INST]' }}
    {%- elif m.role == 'assistant' %}
        {%- if m.reasoning_content %}
            {{- '[THINK]' + m.reasoning_content + '[/THINK]' }}
        {%- endif %}
        {{- m.content or '' }}
        {%- for call in m.tool_calls or [] %}
            {{- '[TOOL_CALLS]' + call.function.name + '[ARGS]' + call.function.arguments }}
        {%- endfor %}
        {{- eos_token }}
    {%- elif m.role == 'tool' %}
        {{- '[TOOL_RESULTS]' + m.content + '[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception('unsupported role ' + m.role) }}
    {%- endif %}
{%- endfor %}
"""


def test_template_renders_like_the_spec():
    tools = tools_from_openai(TOOLS)
    ours = render_template(MISTRAL_TEMPLATE, MESSAGES, tools, bos_token="<s>", eos_token="</s>")
    assert ours == render_prompt(get_format("mistral"), MESSAGES, tools)
    assert render_template(MISTRAL_TEMPLATE, MESSAGES, TOOLS, bos_token="<s>",
                           eos_token="</s>") == ours  # OpenAI tool dicts work too


def test_template_helpers_are_transformers_like():
    t = ("{{ strftime_now('%Y') }}|{{ {'b': 1, 'a': [2]} | tojson }}|{{ x | tojson(indent=2) }}"
         "|{% for m in messages %}{{ m.thinking }}{{ m.content is defined }}{% endfor %}"
         "{% generation %}!{% endgeneration %}")
    out = render_template(t, [{"role": "assistant", "content": None, "reasoning_content": "r"}],
                          x={"k": "é"})
    assert out == (f"{datetime.date.today().year}|{{\"b\": 1, \"a\": [2]}}|"
                   "{\n  \"k\": \"é\"\n}|rFalse!")


def test_template_errors_are_constraint_errors():
    with pytest.raises(ConstraintError, match="unsupported role nope"):
        render_template(MISTRAL_TEMPLATE, [{"role": "nope", "content": ""}])
    with pytest.raises(ConstraintError, match="does not parse"):
        render_template("{% if %}", MESSAGES)
    with pytest.raises(ConstraintError):  # the sandbox refuses attribute tricks
        render_template("{{ messages.__class__.__mro__ }}", MESSAGES)


def test_transformers_renders_the_same():
    from transformers.utils import chat_template_utils as transformers
    theirs, _ = transformers.render_jinja_template(
        [MESSAGES], tools=TOOLS, chat_template=MISTRAL_TEMPLATE, add_generation_prompt=True,
        bos_token="<s>", eos_token="</s>")
    assert render_template(MISTRAL_TEMPLATE, MESSAGES, TOOLS, bos_token="<s>",
                           eos_token="</s>") == theirs[0]


def _gguf(path, kvs):
    def s(text):
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs))
    for key, kind, value in kvs:
        out += s(key) + struct.pack("<I", kind) + value
    path.write_bytes(out)
    return path


def test_chat_template_from_gguf(tmp_path):
    strings = struct.pack("<IQ", 8, 2) + struct.pack("<Q", 1) + b"a" + struct.pack("<Q", 0)
    path = _gguf(tmp_path / "m.gguf", [
        ("general.alignment", 4, struct.pack("<I", 32)),
        ("tokenizer.ggml.tokens", 9, strings),
        ("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 2) + struct.pack("<ff", 0, 1)),
        ("tokenizer.chat_template", 8, struct.pack("<Q", 9) + b"{{ 'hi' }}"[:9]),
    ])
    assert chat_template_from_gguf(path) == "{{ 'hi' }"
    assert chat_template_from_gguf(_gguf(tmp_path / "n.gguf", [])) is None
    (tmp_path / "x.bin").write_bytes(b"nope")
    with pytest.raises(ModelError, match="not a GGUF"):
        chat_template_from_gguf(tmp_path / "x.bin")


def test_embedded_gemma_has_no_template():
    from kaname.runtimes.models import default_model_path

    assert chat_template_from_gguf(default_model_path()) is None  # the spec renders then
