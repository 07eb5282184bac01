"""Which chat format a model speaks, read from its GGUF: the chat template's markers first,
the architecture where the file has no template.

llama.cpp's server picks its tool-call parser the same way (markers in the template). Each
rule names the official template its markers come from; tests/test_detect.py holds the rules to
the renderings of those templates (tests/data/alignment.json) and to the real GGUFs served.
A template none of the rules knows is an error, never a silent default: a wrong format binds the
model's answer to a syntax it was not trained on (SmolLM2 under Gemma's fenced calls wrote
`{"city": "greet_wel_wel_wel_` until max_tokens).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConstraintError, ModelError
from .spec import ChatFormat
from .template import check_template, gguf_strings, render_template

_PROBE_TOOL = {"type": "function", "function": {
    "name": "kaname_probe_tool", "description": "probe",
    "parameters": {"type": "object", "properties": {}}}}


@dataclass(frozen=True)
class Detection:
    """The format a model's GGUF calls for, and why (one line, for the start-up message)."""

    format: ChatFormat
    why: str
    # the template writes the tool definitions into the prompt; where it does not (SmolLM2's
    # ChatML template), turns with tools are rendered by the format's spec instead
    template_shows_tools: bool = True


def _formats() -> dict[str, ChatFormat]:
    from . import FORMATS  # the package imports this module

    return FORMATS


def detect_gguf(path: str | Path) -> Detection:
    """The format of the GGUF at `path` (its header only is read); ModelError naming what was
    found and the `--format` choices where no rule applies."""
    meta = gguf_strings(path, ("tokenizer.chat_template", "general.architecture"))
    return detect(meta.get("tokenizer.chat_template"), meta.get("general.architecture"))


def detect(template: str | None, architecture: str | None = None) -> Detection:
    """The format for a chat template (None: the file has none) and an architecture."""
    formats = _formats()
    arch = f"architecture {architecture}" if architecture else "no architecture given"
    if template is None:
        if architecture == "gemma3":  # the embedded Gemma 3 GGUF carries no template
            return Detection(formats["gemma3"], f"no chat template in the GGUF; {arch}")
        raise ModelError(
            f"the GGUF has no chat template and its {arch} does not say which chat format "
            f"it speaks: give --format ({', '.join(formats)})")
    try:
        check_template(template)
    except ConstraintError as e:  # every request would meet it: say so at start
        raise ModelError(f"the GGUF's template cannot render prompts ({e}): give "
                         "--chat-template spec (the format's own prompt) or a template file "
                         "with --format") from e
    found = classify(template, _generation_prompt(template))
    if found is not None:
        name, why = found
        if name == "!":  # a family kaname knows and has no format for
            raise ModelError(f"the GGUF's chat template {why}: no kaname format writes its "
                             f"calls; give --format ({', '.join(formats)}) with "
                             "--chat-template spec, or a template of a known family")
        shows = template_shows_tools(template)
        note = "" if shows else "; the template shows no tools, so turns with tools are " \
                                f"rendered by the {name} spec"
        return Detection(formats[name], f"chat template {why} ({arch}){note}", shows)
    raise ModelError(
        "the GGUF's chat template has none of the markers kaname knows (<|im_start|>, "
        "<tool_call>, [TOOL_CALLS], <｜tool▁calls▁begin｜>, <|channel|>, <start_of_turn>, "
        f"<|start_header_id|>, <arg_key>, ...; {arch}): give --format "
        f"({', '.join(formats)})")


def classify(template: str, prompt: str) -> tuple[str, str] | None:
    """(format name, why) for a template's text and the prompt it renders for one user
    message; name "!" for a family kaname knows and has no format for; None: unknown."""
    for rule in _RULES:
        if (found := rule(template, prompt)) is not None:
            return found
    return None


@functools.lru_cache(maxsize=16)
def template_shows_tools(template: str) -> bool:
    """Whether `template` writes a tool's definition into the prompt (a probe tool's name
    appears when rendered). A template that fails on the probe is taken to show them: its
    own error then reaches the request that has tools."""
    try:
        text = render_template(template, [{"role": "user", "content": "hi"}], [_PROBE_TOOL])
    except Exception:
        return True
    return "kaname_probe_tool" in text


def _generation_prompt(template: str) -> str:
    """What the template writes for one user message and the generation prompt ("" where it
    refuses): its end tells a template that opens the reasoning block."""
    try:
        return render_template(template, [{"role": "user", "content": "hi"}])
    except Exception:
        return ""


Rule = Callable[[str, str], "tuple[str, str] | None"]


def _harmony(t: str, _p: str) -> tuple[str, str] | None:
    # openai/gpt-oss chat_template: harmony's channels
    return ("gpt_oss", "writes harmony channels (<|channel|>)") if "<|channel|>" in t else None


def _deepseek(t: str, _p: str) -> tuple[str, str] | None:
    # deepseek-ai/DeepSeek-V3.1 chat_template; V3 and R1 wrap arguments in ```json fences,
    # V3.2 and V4 write DSML (<｜DSML｜invoke name=…>)
    if "<｜tool▁calls▁begin｜>" not in t and "<｜Assistant｜>" not in t:
        return None
    if "｜DSML｜" in t:
        return ("!", "writes DeepSeek V3.2+ DSML calls (<｜DSML｜invoke …>)")
    if "```json" in t:
        return ("!", "writes DeepSeek V3/R1 calls (<｜tool▁calls▁begin｜> with ```json "
                     "arguments)")
    if "<｜tool▁sep｜>" not in t:
        return ("!", "writes DeepSeek turns without V3.1's call markers (<｜tool▁sep｜>)")
    return ("deepseek_v31", "writes DeepSeek V3.1 markers (<｜tool▁calls▁begin｜>)")


def _kimi(t: str, _p: str) -> tuple[str, str] | None:
    # moonshotai Kimi-K2(-Thinking) chat_template
    if "<|tool_calls_section_begin|>" in t or "<|im_assistant|>" in t:
        return ("kimi_k2", "writes Kimi K2 markers (<|tool_calls_section_begin|>)")
    return None


def _glm(t: str, p: str) -> tuple[str, str] | None:
    # zai-org/GLM-4.5 / GLM-4.6 / GLM-4.7 chat_template: 4.7's prompt opens <think> itself
    if "<arg_key>" not in t:
        return None
    if "<|assistant|>" not in t:  # poolside Laguna: per-key calls in turns of its own
        return ("!", "writes per-key calls (<arg_key>) outside GLM's turns (<|assistant|>)")
    if p.rstrip().endswith(("<|assistant|><think>", "<|assistant|></think>")):
        return ("glm47", "writes GLM-4.7 per-key calls (<arg_key>, the prompt opens <think>)")
    return ("glm45", "writes GLM-4.5 per-key calls (<arg_key>)")


def _mistral(t: str, _p: str) -> tuple[str, str] | None:
    # mistralai/mistral-common template v13; v11 adds [CALL_ID], v3/v7 write a JSON list
    if "[TOOL_CALLS]" not in t and "[INST]" not in t:
        return None
    if "[TOOL_CALLS]" not in t:  # Llama 2 / Mistral v1 turns: no tool syntax at all
        return ("!", "writes [INST] turns without tool syntax")
    if "[CALL_ID]" in t or "[ARGS]" not in t:
        return ("!", "writes Mistral calls of a tokenizer before v13 ([TOOL_CALLS] without "
                     "[ARGS], or with [CALL_ID])")
    return ("mistral", "writes Mistral v13 calls ([TOOL_CALLS]NAME[ARGS])")


def _llama(t: str, _p: str) -> tuple[str, str] | None:
    # meta-llama/Llama-3.1-8B-Instruct chat_template (3.2 and 3.3 share the turns); models
    # built on Llama 3's turns with calls of their own: Nemotron-Super (<TOOLCALL>),
    # functionary (<function=…>, >>>NAME), firefunction (functools[)
    if "<|start_header_id|>" not in t:
        return None
    if any(m in t for m in ("<TOOLCALL>", "<function=", ">>>", "functools[")):
        return ("!", "writes Llama 3 headers with a call syntax of its own (<TOOLCALL>, "
                     "<function=…>, >>>NAME or functools[)")
    return ("llama31", "writes Llama 3 headers (<|start_header_id|>)")


def _plamo(t: str, _p: str) -> tuple[str, str] | None:
    # vLLM's PLaMo 3 parsers (no public template)
    return ("plamo3", "writes PLaMo markers (<|plamo:)") if "<|plamo:" in t else None


def _chatml(t: str, p: str) -> tuple[str, str] | None:
    # Qwen3-Coder / Qwen3.5 (<function=…> calls), Qwen3 and Qwen3-2507 Thinking (<think>),
    # Qwen2.5 / Qwen3-2507 Instruct / Hermes (<tool_call> JSON), plain ChatML (SmolLM2)
    if "<|im_start|>" not in t:
        return None
    own = [m for m in _OWN_CHATML_CALLS if m in t]
    if own and "<function=" not in t:
        return ("!", f"writes ChatML turns with calls or turns of its own ({own[0]})")
    if "<function=" in t:
        if "<think>" in t:
            return ("qwen35", "writes Qwen3.5 calls (<function=…>) and reasons (<think>)")
        return ("qwen3_coder", "writes Qwen3-Coder calls (<function=…>)")
    if "<think>" in t:
        if p.endswith("<think>\n"):
            return ("qwen3_thinking", "writes ChatML, <tool_call> and a prompt that opens "
                                      "<think>")
        return ("qwen3", "writes ChatML, <tool_call> calls and <think> reasoning")
    if "<tool_call>" in t:
        return ("hermes", "writes ChatML and <tool_call> calls, no reasoning")
    return ("hermes", "writes ChatML turns (<|im_start|>) and no tool syntax")


# ChatML models whose calls (or turns) are none of Qwen's: LFM2 (<|tool_call_start|>[f(a=1)]),
# MiniCPM (<function name=…>), MiroThinker (<use_mcp_tool>), Phi-4 (<|im_sep|> turns)
_OWN_CHATML_CALLS = ("<|tool_call_start|>", "<|tool_list_start|>", "List of tools: [",
                     "<use_mcp_tool>", '<function name="', "<|im_sep|>")


def _gemma(t: str, _p: str) -> tuple[str, str] | None:
    # google/gemma-3 chat_template (Gemma 2's turns are the same); FunctionGemma calls
    # <start_function_call>call:F{…}
    if "<start_of_turn>" not in t:
        return None
    if "<start_function_call>" in t:
        return ("!", "writes FunctionGemma calls (<start_function_call>)")
    return ("gemma3", "writes Gemma turns (<start_of_turn>)")


# Most specific first: Kimi's and Qwen's templates both write ChatML-like markers, GLM's a
# <tool_call> of its own.
_RULES: tuple[Rule, ...] = (_harmony, _deepseek, _kimi, _glm, _mistral, _llama, _plamo,
                            _chatml, _gemma)
