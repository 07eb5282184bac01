"""A conversation as kaname's own typed items, whatever API sent it.

Every item knows where it sat in the body that was sent (`at`, a JSON pointer). Prompts are
rendered from the messages list chat templates are written against (`template_messages`: the
shape of Hugging Face chat templates, which official templates read), built here once.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal

# A custom tool's free-form input travels in the model's call syntax as the one string
# argument `input` (see request.CUSTOM_INPUT).
_CUSTOM_INPUT = "input"


@dataclass(frozen=True)
class Text:
    """System, developer or user text, wherever it stands in the conversation."""

    role: Literal["system", "developer", "user"]
    text: str
    at: str


@dataclass(frozen=True)
class AssistantText:
    text: str
    at: str
    turn_start: bool = False  # begins an assistant turn (else: the stage order decides)


@dataclass(frozen=True)
class Reasoning:
    text: str
    at: str
    turn_start: bool = False


@dataclass(frozen=True)
class ToolCall:
    """An earlier call of the model's. `arguments`: JSON text (a custom tool: its raw input)."""

    id: str
    name: str
    arguments: str
    at: str
    custom: bool = False
    namespace: str | None = None
    turn_start: bool = False


@dataclass(frozen=True)
class ToolResult:
    """What the client's tool returned for call `call_id`."""

    call_id: str
    text: str
    at: str
    name: str | None = None  # the tool's name, where the API says it
    is_error: bool = False
    namespace: str | None = None


Item = Text | AssistantText | Reasoning | ToolCall | ToolResult

def starting_turn(item: Item) -> Item:
    """`item` marked as the first of an assistant turn (APIs that send a turn as one
    message: the message decides, not the order of its parts)."""
    if isinstance(item, AssistantText | Reasoning | ToolCall):
        return dataclasses.replace(item, turn_start=True)
    return item


# The order of a model's turn: reasoning, then text, then calls (an item earlier in this order
# than the one before it starts a new assistant turn).
_STAGE = {Reasoning: 0, AssistantText: 1, ToolCall: 2}


def template_messages(items: tuple[Item, ...] | list[Item]) -> list[dict[str, Any]]:
    """The conversation as chat templates read it: consecutive assistant items (reasoning,
    text, calls, in that order) are one assistant message; a tool result is a `tool`
    message; an error result is marked in its text (templates have no error flag)."""
    out: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None  # the assistant message being assembled
    stage = -1
    for item in items:
        if isinstance(item, Text | ToolResult):
            turn = None
            if isinstance(item, Text):
                out.append({"role": item.role, "content": item.text})
            else:
                text = f"Error: {item.text}" if item.is_error else item.text
                message = {"role": "tool", "tool_call_id": item.call_id, "content": text}
                if item.name:
                    message["name"] = item.name
                out.append(message)
            continue
        s = _STAGE[type(item)]
        if turn is None or item.turn_start or s < stage or s == stage == 1:
            turn = {"role": "assistant", "content": None}
            out.append(turn)
        stage = s
        if isinstance(item, Reasoning):
            turn["reasoning_content"] = turn.get("reasoning_content", "") + item.text
        elif isinstance(item, AssistantText):
            turn["content"] = item.text
        else:
            arguments = json.dumps({_CUSTOM_INPUT: item.arguments}, ensure_ascii=False) \
                if item.custom else item.arguments
            turn.setdefault("tool_calls", []).append({
                "id": item.id, "type": "function",
                "function": {"name": item.name, "arguments": arguments}})
    return out


def resolve_results(items: list[Item]) -> list[Item]:
    """Tool results matched to their calls: a result without a call id (Codex sends some
    with the tool's name instead) takes the id of the latest call of that name (and
    namespace) that no result answered yet."""
    calls: list[ToolCall] = []
    answered: set[str] = set()
    out: list[Item] = []
    for item in items:
        if isinstance(item, ToolCall):
            calls.append(item)
        elif isinstance(item, ToolResult):
            if not item.call_id and item.name:
                match = next((c for c in reversed(calls)
                              if (c.name, c.namespace) == (item.name, item.namespace)
                              and c.id not in answered), None)
                if match is not None:
                    item = dataclasses.replace(item, call_id=match.id)
            answered.add(item.call_id)
        out.append(item)
    return out


# ---- a turn as it streams ---------------------------------------------------------------------

@dataclass(frozen=True)
class TextDelta:
    """More text of the turn's reasoning or content."""

    kind: Literal["reasoning", "content"]
    text: str


@dataclass(frozen=True)
class CallDelta:
    """A tool call as it streams: its first sight carries `id` and `name` (and `fragment`
    ""), later ones more of its arguments (a custom tool's: of its input)."""

    index: int
    fragment: str
    id: str | None = None
    name: str | None = None
    custom: bool = False


Delta = TextDelta | CallDelta
