"""Rendering an OpenAI messages list into a prompt, from the format's spec.

Earlier assistant turns are written with the same tool-call and reasoning syntax the grammar
enforces, so the model sees its own history in the shape it is asked to produce.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import TOO_DEEP, ConstraintError
from . import keyed
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


def render_tool_calls(fmt: ChatFormat, calls: Sequence[Mapping[str, Any]],
                      where: str = "") -> str:
    """Tool calls of an earlier assistant turn, exactly as the model would write them
    (`where`: the message's pointer, for errors)."""
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
                                  pointer=f"{where}/tool_calls/{i}/function/arguments") from e
        except RecursionError:
            raise ConstraintError(TOO_DEEP, pointer=f"{where}/tool_calls/{i}/function/"
                                                    "arguments") from None
        if s.layout == "json":
            body = json.dumps({s.name_key: name, s.args_key: args}, ensure_ascii=False)
        elif s.layout == "per_key":
            if not isinstance(args, Mapping):
                raise ConstraintError("tool call arguments must be a JSON object",
                                      pointer=f"{where}/tool_calls/{i}/function/arguments")
            pairs = "".join(f"{s.key_begin}{k}{s.key_end}{s.value_begin}{keyed.encode(v)}"
                            f"{s.value_end}" for k, v in args.items())
            body = f"{s.name_prefix}{name}{s.args_begin}{pairs}"
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
                     with_reasoning: bool = True, continuing: bool = False) -> str:
    """The generated part of an assistant turn, end-of-turn marker included.

    `continuing`: the turn goes on after tool results (DeepSeek V3.1), so no reasoning or
    no-reasoning marker opens it."""
    out = ""
    r = fmt.reasoning
    reasoning = message.get("reasoning_content") if with_reasoning else None
    if r is not None and not continuing:
        if reasoning:
            out += r.begin + (reasoning.strip(r.pad) if r.pad else reasoning) + r.pad + r.end
        elif r.off_in_history == "always" or (r.off_in_history == "kept" and with_reasoning):
            out += r.off
    content = _text(message.get("content"), where)
    if fmt.trim_content:
        content = content.strip()
    calls = render_tool_calls(fmt, message.get("tool_calls") or [], where)
    s = fmt.tool_calls
    if content and calls and s is not None and s.preamble_begin:
        out += s.preamble_begin + content + s.preamble_end  # harmony's commentary preamble
    elif content:
        out += fmt.content_begin + content
        if calls and s is not None:
            out += s.after_content
    out += calls
    if calls:
        return out + fmt.calls_end
    return out + (fmt.end_of_turn if fmt.history_end is None else fmt.history_end)


def turn_opening(fmt: ChatFormat, messages: Sequence[Mapping[str, Any]],
                 reasoning: str = "on") -> str:
    """What the generation prompt writes of the assistant turn after its header (the
    reasoning block's opening or the no-reasoning marker, where the format's prompt opens the
    block); nothing where the model goes on with its turn after tool results (DeepSeek)."""
    if fmt.continue_after_tool and messages and messages[-1].get("role") == "tool":
        return ""
    return fmt.opening(reasoning)


def render_prompt(fmt: ChatFormat, messages: Sequence[Mapping[str, Any]],
                  tools: Sequence[Tool] = (), *, add_generation_prompt: bool = True,
                  reasoning: str = "on") -> str:
    """The prompt for the next assistant turn; `reasoning` (off / on / required) decides
    what a format whose prompt opens the reasoning block writes after the header."""
    if not messages:
        raise ConstraintError("messages must not be empty", pointer="/messages")
    tools_text = render_tools(fmt, tools) if tools and fmt.tools_position != "none" else ""
    tools_preamble = fmt.tools_preamble if tools_text else ""
    out = fmt.bos + fmt.preamble.format(date=datetime.date.today().isoformat(),
                                        tools_preamble=tools_preamble)
    msgs = list(messages)
    # where each message sat in the request (messages the renderer adds point at the list)
    origin = [f"/messages/{i}" for i in range(len(msgs))]
    has_system = msgs[0].get("role") in ("system", "developer")
    if fmt.default_system and not has_system:
        msgs.insert(0, {"role": "system", "content": fmt.default_system})
        origin.insert(0, "/messages")
        has_system = True
    if fmt.system_preamble:
        preamble = tools_preamble + fmt.system_preamble
        first = dict(msgs[0]) if has_system else {"role": "system", "content": ""}
        first["content"] = preamble + _text(first.get("content"), "/messages/0")
        if not has_system:
            origin.insert(0, "/messages")
        msgs[0:1 if has_system else 0] = [first]
        has_system = True
    system_template = fmt.system
    if tools_text:
        if fmt.tools_position == "own_system":  # the template is a whole turn of its own
            out += tools_text
        elif fmt.tools_position == "system_start":
            text = _text(msgs[0].get("content"), "/messages/0") if has_system else ""
            first = {**msgs[0], "content": tools_text + (f"\n\n{text}" if text else "")} \
                if has_system else {"role": "system", "content": tools_text}
            msgs[0:1 if has_system else 0] = [first]
            if not has_system:
                origin.insert(0, "/messages")
        elif fmt.tools_position == "system":
            if has_system:
                first = dict(msgs[0])
                first["content"] = _text(first.get("content"), "/messages/0") + tools_text
                msgs[0] = first
            else:
                msgs.insert(0, {"role": "system", "content": tools_text.lstrip("\n"),
                                "kaname_tools_only": True})
                origin.insert(0, "/messages")
    last_user = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=-1)
    first_user = next((i for i, m in enumerate(msgs) if m.get("role") == "user"), -1)
    # the last assistant turn that answered (no tool calls): Kimi K2 blanks reasoning up to it
    last_answer = max((i for i, m in enumerate(msgs)
                       if m.get("role") == "assistant" and not m.get("tool_calls")), default=-1)
    in_tools = False
    after_tool = False
    pending_system = ""  # system text waiting for the first user turn (Gemma)
    call_names: dict[str, str] = {}  # tool_call_id -> function name, for tool results
    last_call = ""
    for i, m in enumerate(msgs):
        where = origin[i]
        role = m.get("role") if isinstance(m, Mapping) else None
        if in_tools and role != "tool":
            out += fmt.tool_close
            in_tools = False
        if role in ("system", "developer"):
            template = fmt.tools_system if m.get("kaname_tools_only") and fmt.tools_system \
                else system_template
            text = template.format(content=_text(m.get("content"), where))
            if fmt.system_in_first_user:
                pending_system += text
            else:
                out += text
        elif role == "user":
            text = _text(m.get("content"), where)
            content = pending_system + (text.strip() if fmt.trim_content else text)
            if i == first_user and tools_text and fmt.tools_position == "first_user":
                content = tools_text + content
            if i == first_user and tools_text and fmt.tools_position == "before_first_user":
                out += tools_text
            out += fmt.user.format(content=content)
            pending_system = ""
        elif role == "assistant":
            out += _flush(fmt, pending_system)
            pending_system = ""
            keep = fmt.reasoning_history == "keep" or (
                fmt.reasoning_history == "after_last_user" and i > last_user) or (
                fmt.reasoning_history == "after_last_answer" and i > last_answer)
            continuing = fmt.continue_after_tool and after_tool
            out += ("" if continuing else fmt.assistant_prefix) + render_assistant(
                fmt, m, where, with_reasoning=keep, continuing=continuing) + fmt.after_turn
            for call in m.get("tool_calls") or []:
                last_call = (call.get("function") or {}).get("name", "")
                call_names[str(call.get("id", ""))] = last_call
        elif role == "tool":
            if not in_tools:
                out += fmt.tool_open
                in_tools = True
            call_id = m.get("tool_call_id", "")
            out += fmt.tool_result.format(
                content=_text(m.get("content"), where), tool_call_id=call_id,
                name=m.get("name") or call_names.get(str(call_id), last_call))
        else:
            raise ConstraintError(f"unsupported message role {role!r}", pointer=f"{where}/role")
        after_tool = role == "tool"
    if in_tools:
        out += fmt.tool_close
    out += _flush(fmt, pending_system)
    if add_generation_prompt and not (fmt.continue_after_tool and after_tool):
        out += fmt.generation_prompt + turn_opening(fmt, msgs, reasoning)
    return out


def _flush(fmt: ChatFormat, pending_system: str) -> str:
    """System text no user turn followed (a format that writes system text into the next
    user turn, given system text mid-conversation): a user turn of its own, never dropped."""
    return fmt.user.format(content=pending_system) if pending_system else ""


def render_tools(fmt: ChatFormat, tools: Sequence[Tool]) -> str:
    """The tool definitions as the format's tools template writes them."""
    if fmt.tools_renderer is not None:
        body = fmt.tools_renderer(tools)
    elif fmt.tool_template:
        body = "".join(fmt.tool_template.format(
            name=t.name, description=t.description,
            parameters=json.dumps(t.parameters or {}, ensure_ascii=False),
            json=json.dumps(t.to_openai(), ensure_ascii=False),
            json_indent4=json.dumps(t.to_openai(), ensure_ascii=False, indent=4))
            for t in tools)
    else:
        body = _tools_json(fmt, tools)
    return fmt.tools_template.format(tools=body)


def _tools_json(fmt: ChatFormat, tools: Sequence[Tool]) -> str:
    defs = [t.to_openai() for t in tools]
    if fmt.tools_json == "compact_list":
        return json.dumps(defs, ensure_ascii=False, separators=(",", ":"))
    if fmt.tools_json == "list":
        return json.dumps(defs, ensure_ascii=False)
    return "\n".join(json.dumps(d, ensure_ascii=False) for d in defs)
