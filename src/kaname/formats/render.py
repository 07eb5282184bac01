"""Rendering an OpenAI messages list into a prompt, from the format's spec.

Earlier assistant turns are written with the same tool-call and reasoning syntax the grammar
enforces, so the model sees its own history in the shape it is asked to produce.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConstraintError
from .request import Tool
from .spec import ChatFormat


def _text(content: Any, where: str) -> str:
    """OpenAI content: a string, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, p in enumerate(content):
            if not isinstance(p, Mapping) or p.get("type") != "text":
                raise ConstraintError("only text content parts are supported",
                                      pointer=f"{where}/content/{i}")
            parts.append(str(p.get("text", "")))
        return "".join(parts)
    raise ConstraintError("content must be a string or a list of text parts",
                          pointer=f"{where}/content")


def render_tool_calls(fmt: ChatFormat, calls: Sequence[Mapping[str, Any]]) -> str:
    """Tool calls of an earlier assistant turn, exactly as the model would write them."""
    s = fmt.tool_calls
    if s is None or not calls:
        return ""
    rendered = []
    for i, call in enumerate(calls):
        fn = call.get("function", {})
        name = fn.get("name", "")
        raw = fn.get("arguments", "{}")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError as e:
            raise ConstraintError(f"tool call arguments are not JSON: {e}",
                                  pointer=f"/tool_calls/{i}/function/arguments") from e
        if s.layout == "json":
            body = json.dumps({s.name_key: name, s.args_key: args}, ensure_ascii=False)
        elif s.index_sep and call.get("id"):
            body = f"{call['id']}{s.args_begin}{_args_text(raw)}"
        else:
            index = f"{s.index_sep}{i}" if s.index_sep else ""
            body = f"{s.name_prefix}{name}{index}{s.args_begin}{_args_text(raw)}"
        rendered.append(f"{s.call_begin}{body}{s.call_end}")
    return s.section_begin + s.separator.join(rendered) + s.section_end


def _args_text(raw: Any) -> str:
    """Arguments as templates write them: a JSON string verbatim, an object through json.dumps
    with default separators (Jinja's tojson in transformers)."""
    return raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)


def render_assistant(fmt: ChatFormat, message: Mapping[str, Any], where: str, *,
                     with_reasoning: bool = True) -> str:
    """The generated part of an assistant turn, end-of-turn marker included."""
    out = ""
    reasoning = message.get("reasoning_content") if with_reasoning else None
    if reasoning and fmt.reasoning is not None:
        r = fmt.reasoning
        out += r.begin + (reasoning.strip(r.pad) if r.pad else reasoning) + r.pad + r.end
    content = _text(message.get("content"), where)
    calls = render_tool_calls(fmt, message.get("tool_calls") or [])
    out += content
    if content and calls and fmt.tool_calls is not None:
        out += fmt.tool_calls.after_content
    out += calls
    return out + fmt.end_of_turn


def render_prompt(fmt: ChatFormat, messages: Sequence[Mapping[str, Any]],
                  tools: Sequence[Tool] = (), *, add_generation_prompt: bool = True) -> str:
    if not messages:
        raise ConstraintError("messages must not be empty", pointer="/messages")
    tools_text = ""
    if tools and fmt.tools_position != "none":
        tools_text = fmt.tools_template.format(tools=_tools_json(fmt, tools))
    out = fmt.bos
    msgs = list(messages)
    if fmt.default_system and msgs[0].get("role") not in ("system", "developer"):
        msgs.insert(0, {"role": "system", "content": fmt.default_system})
    if tools_text:
        if fmt.tools_position == "own_system":  # the template is a whole turn of its own
            out += tools_text
        elif msgs[0].get("role") in ("system", "developer"):
            first = dict(msgs[0])
            first["content"] = _text(first.get("content"), "/messages/0") + tools_text
            msgs[0] = first
        else:
            msgs.insert(0, {"role": "system", "content": tools_text.lstrip("\n")})
    last_user = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=-1)
    in_tools = False
    pending_system = ""  # system text waiting for the first user turn (Gemma)
    for i, m in enumerate(msgs):
        where = f"/messages/{i}"
        role = m.get("role") if isinstance(m, Mapping) else None
        if in_tools and role != "tool":
            out += fmt.tool_close
            in_tools = False
        if role in ("system", "developer"):
            text = fmt.system.format(content=_text(m.get("content"), where))
            if fmt.system_in_first_user:
                pending_system += text
            else:
                out += text
        elif role == "user":
            out += fmt.user.format(content=pending_system + _text(m.get("content"), where))
            pending_system = ""
        elif role == "assistant":
            keep = fmt.reasoning_history == "keep" or i > last_user
            out += fmt.assistant_prefix + render_assistant(fmt, m, where, with_reasoning=keep) \
                + fmt.after_turn
        elif role == "tool":
            if not in_tools:
                out += fmt.tool_open
                in_tools = True
            out += fmt.tool_result.format(content=_text(m.get("content"), where),
                                          name=m.get("name", ""),
                                          tool_call_id=m.get("tool_call_id", ""))
        else:
            raise ConstraintError(f"unsupported message role {role!r}", pointer=f"{where}/role")
    if in_tools:
        out += fmt.tool_close
    if add_generation_prompt:
        out += fmt.generation_prompt
    return out


def _tools_json(fmt: ChatFormat, tools: Sequence[Tool]) -> str:
    defs = [t.to_openai() for t in tools]
    if fmt.tools_json == "compact_list":
        return json.dumps(defs, ensure_ascii=False, separators=(",", ":"))
    if fmt.tools_json == "list":
        return json.dumps(defs, ensure_ascii=False)
    return "\n".join(json.dumps(d, ensure_ascii=False) for d in defs)
