"""Errors point into the request that was sent: pydantic locations read against the body,
each API's fields carrying their own pointers into the one pipeline (no table of moves),
message pointers past inserted turns."""

from __future__ import annotations

import pytest

from kaname.chat import prepare
from kaname.edges import chat, messages, responses
from kaname.errors import ConstraintError
from kaname.formats import get_format, render_prompt, tools_from_openai
from kaname.grammar import GrammarCompiler
from kaname.runtimes.synthetic import synthetic_tokenizer

BODY = {"tools": [{"type": "function"}], "messages": [{"role": "user", "content": {"a": 1}}],
        "tool_choice": "x"}


@pytest.mark.parametrize(("loc", "pointer"), [
    (("tools", 0, "ToolDef", "function"), "/tools/0/function"),  # a union member's name
    (("messages", 0, "content", "str"), "/messages/0/content"),  # a type tag
    (("tool_choice", "literal['none','auto','required']"), "/tool_choice"),
    (("model",), "/model"),  # missing: the pointer ends at the absent key
    (("tools", 3, "function"), "/tools"),  # an index the body does not have
])
def test_pointer_of_keeps_only_steps_in_the_body(loc, pointer):
    from kaname.edges.common import pointer_of

    assert pointer_of(loc, BODY) == pointer


STRICT = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True,
                                                    "items": {"type": "string"}}},
          "required": ["tags"], "additionalProperties": False}
ASK = [{"role": "user", "content": "x"}]


def _turn_error(edge_turn):
    fmt = get_format("qwen3")
    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    with pytest.raises(ConstraintError) as info:
        prepare(fmt, edge_turn, tok, GrammarCompiler(tok))
    return info.value


@pytest.mark.parametrize(("turn", "pointer"), [
    (lambda: chat.turn_from_chat({"model": "m", "messages": ASK, "tools": [
        {"type": "function", "function": {"name": "f", "strict": True,
                                          "parameters": STRICT}}]}),
     "/tools/0/function/parameters/properties/tags/uniqueItems"),
    (lambda: chat.turn_from_chat({"model": "m", "messages": ASK, "response_format": {
        "type": "json_schema", "json_schema": {"name": "r", "strict": True, "schema": STRICT}}}),
     "/response_format/json_schema/schema/properties/tags/uniqueItems"),
    (lambda: messages.to_turn(messages.MessagesRequest.model_validate({
        "model": "m", "max_tokens": 9, "messages": ASK, "tools": [
            {"name": "f", "input_schema": STRICT, "strict": True}]})),
     "/tools/0/input_schema/properties/tags/uniqueItems"),
    (lambda: messages.to_turn(messages.MessagesRequest.model_validate({
        "model": "m", "max_tokens": 9, "messages": ASK,
        "output_config": {"format": {"type": "json_schema", "schema": STRICT}}})),
     "/output_config/format/schema/properties/tags/uniqueItems"),
    (lambda: responses.to_turn(responses.ResponsesRequest.model_validate({
        "model": "m", "input": "x", "tools": [{"type": "namespace", "name": "ns", "tools": [
            {"type": "function", "name": "f", "parameters": STRICT}]}]}), ()),
     "/tools/0/tools/0/parameters/properties/tags/uniqueItems"),
    (lambda: responses.to_turn(responses.ResponsesRequest.model_validate({
        "model": "m", "input": "x", "text": {"format": {
            "type": "json_schema", "name": "r", "strict": True, "schema": STRICT}}}), ()),
     "/text/format/schema/properties/tags/uniqueItems"),
])
def test_each_api_names_its_own_pointer(turn, pointer):
    """A strict schema kaname cannot enforce: the error names the keyword where the caller's
    API put it, from the pointer the edge gave the field."""
    e = _turn_error(turn())
    assert e.pointer == pointer and e.keyword == "uniqueItems"


def test_history_pointers_count_the_requests_messages():
    """qwen3 puts tools in a system turn it inserts: pointers still count the request's."""
    fmt = get_format("qwen3")
    tools = tools_from_openai([{"type": "function", "function": {"name": "f"}}])
    messages = [{"role": "user", "content": "x"},
                {"role": "assistant", "tool_calls": [{"id": "1", "type": "function",
                                                      "function": {"name": "f",
                                                                   "arguments": "{bad"}}]}]
    with pytest.raises(ConstraintError) as info:
        render_prompt(fmt, messages, tools)
    assert info.value.pointer == "/messages/1/tool_calls/0/function/arguments"
    with pytest.raises(ConstraintError) as info:
        render_prompt(fmt, [{"role": "user", "content": [{"type": "image_url"}]}], tools)
    assert info.value.pointer == "/messages/0/content/0"
