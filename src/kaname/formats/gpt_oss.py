"""gpt-oss (harmony): every message is `<|start|>ROLE<|channel|>CHANNEL<|message|>…`.

After the `<|start|>assistant` generation prompt the model writes its messages, each opening the
next with `<|end|><|start|>assistant`. What the grammar accepts (and the parser reads) in one
turn, as harmony's format docs, its renderer and parser tests, and the Hugging Face template
write it (docs/formats-harmony.md has the sources):

    [analysis]  <|channel|>analysis<|message|>…<|end|><|start|>assistant      (reasoning)
    then either the answer:
                <|channel|>final<|message|>…<|return|>
    or one tool call, optionally after one preamble:
    [preamble]  <|channel|>commentary<|message|>…<|end|><|start|>assistant    (content)
    call        HEADER{…arguments JSON…}<|call|>

HEADER puts the recipient before the channel (the template, harmony's renderer) or after it
(harmony's docs), with the content type written " json", " <|constrain|>json",
"<|constrain|>json" or left out:

     to=functions.NAME<|channel|>commentary[CT]<|message|>
    <|channel|>commentary to=functions.NAME[CT]<|message|>

All eight spellings give the same call; history is rendered the template's way,
` to=functions.NAME<|channel|>commentary json<|message|>`. A preamble (a commentary message
without recipient, meant for the user) is the turn's `content` next to the call, as vLLM maps
it, and is rendered back as a preamble. At most one per turn (the docs show one, and a turn
ends at `<|call|>`), its text ending at `<|end|>`; allowed under any tool_choice that allows
calls, but not with a JSON response_format (content must follow it). One call per turn:
`<|call|>` stops generation, the next call is the next turn. Not accepted, on purpose: an
answer next to a call, a preamble before an answer, more than one analysis message, built-in
tools (browser, python) and other recipients.

Prompt: harmony's system message (model identity, dates, reasoning effort "medium", channels),
the OpenAI system message as the developer message's "# Instructions", the tools as a
TypeScript `namespace functions` after it. Earlier answers end with `<|end|>`, earlier calls
with `<|call|>`; reasoning is shown only for turns after the last user message (the template
keeps it for tool-call turns without a later answer). Where the published templates differ
between revisions (the tools-only channel line, JSON-quoting of string arguments and results,
a parameter without a description) kaname follows the harmony format documentation: strings
as given, the channel line only with tools, no empty comment lines. So prompts are not
byte-exact to a template revision; the turn syntax is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .request import Tool
from .spec import ChatFormat, ReasoningSyntax, ToolCallSyntax

_SYSTEM = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: {date}\n\nReasoning: medium\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every "
    "message.{tools_preamble}<|end|>"
)


def _ts_type(schema: Any, indent: str = "") -> str:
    """A JSON Schema as the TypeScript type harmony shows the model."""
    if not isinstance(schema, Mapping):
        return "any"
    nullable = " | null" if schema.get("nullable") else ""
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    if isinstance(schema.get("enum"), list):
        return " | ".join(json.dumps(e, ensure_ascii=False) for e in schema["enum"]) + nullable
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " | ".join(_ts_type(v, indent) for v in schema[key])
    t = schema.get("type")
    if isinstance(t, list):
        return " | ".join(_ts_type({**schema, "type": x}, indent) for x in t)
    if t == "array":
        inner = _ts_type(schema.get("items"), indent)
        return (f"Array<{inner}>" if " " in inner else f"{inner}[]") + nullable
    if t == "object":
        props = schema.get("properties")
        if not isinstance(props, Mapping) or not props:
            return "object" + nullable
        return "{\n" + _fields(props, schema.get("required") or (), indent) + indent + "}" \
            + nullable
    simple = {"string": "string", "number": "number", "integer": "number",
              "boolean": "boolean", "null": "null"}
    name = simple.get(t) if isinstance(t, str) else None
    return "any" if name is None else name + nullable


def _fields(props: Mapping[str, Any], required: Sequence[str], indent: str = "") -> str:
    out = ""
    for name, spec in props.items():
        desc = spec.get("description") if isinstance(spec, Mapping) else None
        if desc:
            out += "".join(f"{indent}// {line}\n" for line in str(desc).splitlines())
        out += f"{indent}{name}{'' if name in required else '?'}: {_ts_type(spec, indent)},"
        if isinstance(spec, Mapping) and "default" in spec:
            out += f" // default: {json.dumps(spec['default'], ensure_ascii=False)}"
        out += "\n"
    return out


def render_namespace(tools: Sequence[Tool]) -> str:
    """The tools as harmony's `namespace functions` of TypeScript function types."""
    out = "## functions\n\nnamespace functions {\n\n"
    for t in tools:
        if t.description:
            out += "".join(f"// {line}\n" for line in t.description.splitlines())
        params = t.parameters or {}
        props = params.get("properties")
        if isinstance(props, Mapping) and props:
            out += f"type {t.name} = (_: {{\n{_fields(props, params.get('required') or ())}"
            out += "}) => any;\n\n"
        else:
            out += f"type {t.name} = () => any;\n\n"
    return out + "} // namespace functions"


_RECIPIENT = " to=functions."
_COMMENTARY = "<|channel|>commentary"
_MESSAGE = "<|message|>"
# how the model writes the content type of a call's arguments: the template's first
CONTENT_TYPES = (" json", " <|constrain|>json", "<|constrain|>json", "")
# (begin, end) around NAME: the recipient before the channel, then after it
HEADERS = (*((_RECIPIENT, _COMMENTARY + ct + _MESSAGE) for ct in CONTENT_TYPES),
           *((_COMMENTARY + _RECIPIENT, ct + _MESSAGE) for ct in CONTENT_TYPES))

GPT_OSS = ChatFormat(
    name="gpt_oss",
    aliases=("harmony", "gpt-oss"),
    description="gpt-oss harmony: analysis / final channels, one commentary call per turn "
                "(recipient before or after the channel, an optional preamble), "
                "<|return|> / <|call|>",
    source="openai/gpt-oss-20b chat_template, the harmony format docs and renderer",
    special_tokens=("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                    "<|return|>", "<|call|>", "<|startoftext|>", "<|endoftext|>"),
    bos="",
    preamble=_SYSTEM,
    tools_preamble="\nCalls to these tools must go to the commentary channel: 'functions'.",
    system="<|start|>developer<|message|># Instructions\n\n{content}<|end|>",
    tools_system="<|start|>developer<|message|>{content}<|end|>",
    user="<|start|>user<|message|>{content}<|end|>",
    assistant_prefix="<|start|>assistant",
    content_begin="<|channel|>final<|message|>",
    end_of_turn="<|return|>",
    history_end="<|end|>",
    after_turn="",
    tool_result="<|start|>functions.{name} to=assistant<|channel|>commentary<|message|>"
                "{content}<|end|>",
    generation_prompt="<|start|>assistant",
    tools_template="\n\n# Tools\n\n{tools}",
    tools_renderer=render_namespace,
    tools_position="system",
    reasoning=ReasoningSyntax(begin="<|channel|>analysis<|message|>",
                              end="<|end|><|start|>assistant"),
    reasoning_history="after_last_user",
    tool_calls=ToolCallSyntax(
        layout="name_args", call_begin=HEADERS[0][0], call_end="", args_begin=HEADERS[0][1],
        headers=HEADERS[1:], end_of_turn="<|call|>", parallel=False,
        content_before_calls=False, preamble_begin=_COMMENTARY + _MESSAGE,
        preamble_end="<|end|><|start|>assistant"),
)
