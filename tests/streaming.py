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
