"""Render the alignment fixtures (tests/data/alignment.json) from official chat templates.

    python scripts/alignment_fixtures.py TEMPLATE_DIR > tests/data/alignment.json

TEMPLATE_DIR holds the models' Jinja chat templates under the file names in TEMPLATES (they
are not part of this repository: only what they render is). For each template and each
assistant turn in CASES, the conversation is rendered twice with kaname's sandboxed renderer
(transformers' Jinja settings): up to the user message with the generation prompt, and with the
assistant turn. What the second adds to the first, through the end-of-turn marker, is what the
model writes; what the generation prompt wrote of the turn after the format's header is the
opening. tests/test_alignment.py holds kaname's grammar and parser to both, and kaname's prompt
to the first rendering.

Renderings where the second does not extend the first (a template that drops the turn's
reasoning, or lays out history differently from the prompt) are listed on stderr and left out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from kaname.formats import get_format, render_template

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather forecast for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "days": {"type": "integer", "description": "Days ahead"},
            "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "detailed": {"type": "boolean"},
            "hours": {"type": "array", "items": {"type": "integer"}}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "filters": {"type": "object", "properties": {"free": {"type": "boolean"}}}},
            "required": ["query"]}}},
]
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "What is the weather in Paris this week?"}
REASONING = "The user wants a forecast; I should call the weather tool."


def _call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    # nine alphanumerics: Mistral's template refuses other ids
    return {"id": f"call{i:05d}", "type": "function",
            "function": {"name": name, "arguments": args}}


# (case name, the assistant message): arguments as objects, as templates iterate them
CASES: list[tuple[str, dict[str, Any]]] = [
    ("answer", {"content": "It will be sunny in Paris all week."}),
    ("reasoning_answer", {"reasoning_content": REASONING,
                          "content": "It will be sunny in Paris all week."}),
    ("call", {"content": "", "tool_calls": [_call(0, "get_weather", {"city": "Paris"})]}),
    ("reasoning_call", {"reasoning_content": REASONING, "content": "",
                        "tool_calls": [_call(0, "get_weather", {"city": "Paris", "days": 7})]}),
    ("content_calls", {"content": "Let me look that up.", "tool_calls": [
        _call(0, "get_weather", {"city": "Paris", "days": 7, "units": "celsius",
                                 "detailed": True, "hours": [9, 12]}),
        _call(1, "search", {"query": "Paris events this week", "filters": {"free": True}})]}),
    ("multiline_value", {"content": "", "tool_calls": [
        _call(0, "search", {"query": "line one\nline two"})]}),
]

# (kaname format, template file, template variables, kaname's reasoning mode for them)
TEMPLATES: list[tuple[str, str, dict[str, Any], str]] = [
    ("qwen3", "qwen3.jinja", {}, "on"),
    ("qwen3", "qwen3.jinja", {"enable_thinking": False}, "off"),
    ("qwen3_thinking", "qwen3-2507-thinking.jinja", {}, "on"),
    ("hermes", "qwen3-2507-instruct.jinja", {}, "off"),
    ("qwen3_coder", "qwen3-coder.jinja", {}, "off"),
    ("qwen35", "qwen3.5.jinja", {}, "on"),
    ("qwen35", "qwen3.5.jinja", {"enable_thinking": False}, "off"),
    ("deepseek_v31", "deepseek-v3.1.jinja", {}, "on"),
    ("deepseek_v31", "deepseek-v3.1.jinja", {"thinking": True}, "required"),
    ("glm45", "glm-4.6.jinja", {}, "on"),
    ("glm47", "glm-4.7.jinja", {}, "on"),
    ("glm47", "glm-4.7.jinja", {"enable_thinking": False}, "off"),
    ("gpt_oss", "gpt-oss.jinja", {}, "on"),
    ("llama31", "llama-3.1.jinja", {}, "off"),
    ("mistral", "mistral.jinja", {}, "on"),
    ("kimi_k2", "kimi-k2.jinja", {}, "on"),
    ("gemma3", "gemma3.jinja", {}, "off"),
]
SPECIAL = {"bos_token": "", "eos_token": ""}
EOS = {"llama31": "<|eot_id|>", "mistral": "</s>", "gemma3": "<eos>",
       "deepseek_v31": "<｜end▁of▁sentence｜>", "glm45": "", "glm47": ""}
BOS = {"llama31": "<|begin_of_text|>", "mistral": "<s>", "gemma3": "<bos>",
       "deepseek_v31": "<｜begin▁of▁sentence｜>"}


def _expected(name: str, case: dict[str, Any], generated: str) -> dict[str, Any]:
    """The message the turn stands for (what the template kept of it)."""
    reasoning = case.get("reasoning_content")
    content = case.get("content") or None
    if name == "gpt_oss" and content and case.get("tool_calls"):
        # harmony's template writes a calling turn's content in the analysis channel
        reasoning, content = content, None
    return {"reasoning_content": reasoning if reasoning and reasoning in generated else None,
            "content": content,
            "tool_calls": [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                           for c in case.get("tool_calls") or []]}


def _render(template: str, messages: list[dict[str, Any]], tokens: dict[str, str],
            variables: dict[str, Any]) -> str:
    """The conversation through the template: arguments as objects, as most templates
    iterate them, or as JSON text where the template concatenates them (DeepSeek V3.1)."""
    try:
        return render_template(template, messages, TOOLS, add_generation_prompt=False,
                               **tokens, **variables)
    except TypeError:
        as_text = [{**m, "tool_calls": [
            {**c, "function": {**c["function"],
                               "arguments": json.dumps(c["function"]["arguments"])}}
            for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in messages]
        return render_template(template, as_text, TOOLS, add_generation_prompt=False,
                               **tokens, **variables)


def main(folder: Path) -> None:
    out: list[dict[str, Any]] = []
    for name, file, variables, mode in TEMPLATES:
        path = folder / file
        if not path.exists():
            print(f"{file}: missing, {name} left out", file=sys.stderr)
            continue
        template = path.read_text()
        fmt = get_format(name)
        tokens = {**SPECIAL, "bos_token": BOS.get(name, ""), "eos_token": EOS.get(name, "")}
        before = [SYSTEM, USER]
        prompt = render_template(template, before, TOOLS, add_generation_prompt=True,
                                 **tokens, **variables)
        head = prompt.rfind(fmt.generation_prompt)
        opening = prompt[head + len(fmt.generation_prompt):] if head >= 0 else ""
        seen: set[str] = set()
        for case_name, case in CASES:
            if mode == "off" and case.get("reasoning_content"):
                continue  # a turn the format does not offer
            message = {"role": "assistant", **case}
            try:
                full = _render(template, [*before, message], tokens, variables)
            except Exception as e:  # a template that refuses the turn: say so, go on
                print(f"{file} {variables} {case_name}: {e}", file=sys.stderr)
                continue
            if not full.startswith(prompt):
                print(f"{file} {variables} {case_name}: the turn does not extend the prompt",
                      file=sys.stderr)
                continue
            rest = full[len(prompt):]
            ends = [(at, m) for m in fmt.end_markers if m and (at := rest.find(m)) >= 0]
            at, marker = min(ends) if ends else (len(rest), "")
            generated = rest[:at + len(marker)]
            added = ""
            if not marker and fmt.history_end == "":
                # the template writes no end of turn (GLM: the next turn's marker ends it):
                # the marker the model emits is added
                added = fmt.calls_end if case.get("tool_calls") else fmt.end_of_turn
                generated += added
            calls = [c["function"]["name"] for c in case.get("tool_calls") or []]
            if any(c not in generated for c in calls):
                print(f"{file} {variables} {case_name}: the template writes no tool calls",
                      file=sys.stderr)
                continue
            if generated in seen:
                continue  # the template wrote this turn as an earlier case's
            seen.add(generated)
            out.append({"format": name, "template": file, "variables": variables,
                        "reasoning": mode, "case": case_name, "prompt": prompt,
                        "opening": opening, "generated": generated, "end_added": added,
                        "expected": _expected(name, case, opening + generated)})
    json.dump({"tools": TOOLS, "messages": [SYSTEM, USER], "fixtures": out}, sys.stdout,
              ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
