"""Streaming a turn through the parser in fixed-size chunks, as a client reassembles it."""

from __future__ import annotations

from typing import Any

from kaname.formats import ChatFormat, StreamParser, Tool, merge_deltas


def streamed(fmt: ChatFormat, text: str, size: int,
             tools: tuple[Tool, ...] | list[Tool] | None = None) -> dict[str, Any]:
    """The message the deltas of `text`, fed `size` characters at a time, add up to."""
    parser = StreamParser(fmt, tools=tools)
    deltas = [d for i in range(0, len(text), size) for d in parser.feed(text[i:i + size])]
    return merge_deltas(deltas + parser.finish()[1])


def merge_chat_chunks(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """The message a chat completions stream's `delta`s (as the wire carries them) add up to,
    reassembled as an OpenAI client does."""
    msg: dict[str, Any] = {"reasoning_content": None, "content": None, "tool_calls": []}
    for d in deltas:
        for key in ("reasoning_content", "content"):
            if d.get(key) is not None:
                msg[key] = (msg[key] or "") + d[key]
        for tc in d.get("tool_calls") or []:
            calls = msg["tool_calls"]
            if tc["index"] == len(calls):
                kind = tc.get("type", "function")
                calls.append({"id": tc["id"], "type": kind, kind: {
                    "name": tc[kind]["name"], "input" if kind == "custom" else "arguments": ""}})
            call = calls[tc["index"]]
            if call["type"] == "custom":
                call["custom"]["input"] += (tc.get("custom") or {}).get("input", "")
            else:
                call["function"]["arguments"] += (tc.get("function") or {}).get("arguments", "")
    return msg
