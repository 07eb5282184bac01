"""Errors point into the request that was sent: pydantic locations read against the body,
chat pointers moved into another API's request, message pointers past inserted turns."""

from __future__ import annotations

import pytest

from kaname.errors import ConstraintError
from kaname.formats import get_format, render_prompt, tools_from_openai
from kaname.server.errors import APIError
from kaname.server.turn import Pointers

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
    from kaname.server.errors import pointer_of

    assert pointer_of(loc, BODY) == pointer


def test_pointers_move_slashed_and_bare_params():
    where = Pointers((("/messages/2", "/input/1"), ("/messages", "/input"),
                      ("/response_format/json_schema/schema", "/text/format/schema"),
                      ("/reasoning_effort", "/reasoning/effort")))
    assert where("/messages/2/content/0") == "/input/1/content/0"
    assert where("/messages/20") == "/input/20"  # a prefix ends at a segment boundary
    assert where("reasoning_effort") == "reasoning/effort"
    assert where("/tools/0") == "/tools/0"
    e = where.error(ConstraintError("bad 'x' at /response_format/json_schema/schema/x",
                                    keyword="x", pointer="/response_format/json_schema/schema/x"))
    assert isinstance(e, ConstraintError) and e.pointer == "/text/format/schema/x"
    assert "/text/format/schema/x" in e.message and "response_format" not in e.message
    api = where.error(APIError(400, "reasoning_effort: no", param="reasoning_effort"))
    assert isinstance(api, APIError) and api.param == "reasoning/effort"
    assert api.message == "reasoning/effort: no"


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
