"""Qwen3-Coder and Qwen3.5: ChatML turns and XML tool calls, one `<parameter=K>` per argument.

After the generation prompt "<|im_start|>assistant\\n" the model writes its content, then (after
"\\n\\n" where there is content) each call as "<tool_call>\\n<function=NAME>\\n" + one
"<parameter=K>\\nV\\n</parameter>\\n" per argument + "</function>\\n</tool_call>", calls separated
by "\\n", then "<|im_end|>". A string value is written raw, any other as JSON (`keyed.py`); the
templates write non-string scalars through Jinja's `string` filter, which spells booleans the
Python way: for a boolean property the grammar takes "True" / "False" as well as JSON's, read
as JSON booleans (as vLLM's qwen3_coder parser reads them); history is written in JSON's.

Qwen3-Coder (Qwen3-Coder-*-Instruct chat_template) does not reason; its tools are listed as XML
in the system turn, after a default system prompt of its own when there is none. Qwen3.5 lists
each tool as JSON before the system text, and reasons: its prompt ends with "<think>\\n" (or an
empty "<think>\\n\\n</think>\\n\\n" with enable_thinking=False), history keeps the reasoning of
turns after the last user message (an empty block where there was none) and drops the block
before it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .qwen3 import HERMES, QWEN3
from .request import Tool
from .spec import ReasoningSyntax, ToolCallSyntax

_CALL_HELP = (
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:"
    "\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\n"
    "value_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second "
    "parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner "
    "<function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your "
    "function call in natural language BEFORE the function call, but NOT after\n- If there is "
    "no function call available, answer the question like normal with your current knowledge "
    "and do not tell the user about function calls\n</IMPORTANT>"
)
_DEFAULT_SYSTEM = ("You are Qwen, a helpful AI assistant that can interact with a computer to "
                   "solve tasks.")


def _jinja_string(value: Any) -> str:
    """A value as the template writes it: objects and lists with `tojson`, anything else
    with Jinja's `string` filter (Python's str)."""
    if isinstance(value, Mapping | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _extra(fields: Any, handled: Sequence[str]) -> str:
    if not isinstance(fields, Mapping):
        return ""
    return "".join(f"\n<{k}>{_jinja_string(v)}</{k}>" for k, v in fields.items()
                   if k not in handled)


def render_xml_tools(tools: Sequence[Tool]) -> str:
    """Qwen3-Coder's tool list: each function as XML, its parameters one by one."""
    out = ""
    for tool in tools:
        out += f"\n<function>\n<name>{tool.name}</name>"
        if tool.description:
            out += f"\n<description>{tool.description.strip()}</description>"
        out += "\n<parameters>"
        params = tool.parameters
        props = params.get("properties") if isinstance(params, Mapping) else None
        if isinstance(props, Mapping):
            for name, fields in props.items():
                out += f"\n<parameter>\n<name>{name}</name>"
                if isinstance(fields, Mapping) and "type" in fields:
                    out += f"\n<type>{_jinja_string(fields['type'])}</type>"
                if isinstance(fields, Mapping) and "description" in fields:
                    out += f"\n<description>{str(fields['description']).strip()}</description>"
                out += _extra(fields, ("name", "type", "description")) + "\n</parameter>"
        out += _extra(params, ("type", "properties")) + "\n</parameters>"
        out += _extra({k: v for k, v in tool.to_openai()["function"].items()},
                      ("type", "name", "description", "parameters")) + "\n</function>"
    return out


_CALLS = ToolCallSyntax(
    layout="per_key", call_begin="<tool_call>\n", call_end="</function>\n</tool_call>",
    separator="\n", after_content="\n\n", name_prefix="<function=", args_begin=">\n",
    key_begin="<parameter=", key_end=">\n", value_end="\n</parameter>\n", python_booleans=True)

# ChatML turns as Qwen3's (hermes: the same without reasoning); calls, tools and tool results
# are the templates' own
QWEN3_CODER = replace(
    HERMES,
    name="qwen3_coder",
    aliases=("qwen3-coder",),
    description="Qwen3-Coder: <tool_call><function=NAME><parameter=K>V</parameter>… XML calls, "
                "ChatML turns, no reasoning",
    source="Qwen3-Coder-*-Instruct chat_template (as llama.cpp carries it, "
           "models/templates/Qwen3-Coder.jinja)",
    tool_open="<|im_start|>user\n",
    tool_result="<tool_response>\n{content}\n</tool_response>\n",
    tools_template="\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>{tools}"
                   "\n</tools>" + _CALL_HELP,
    tools_renderer=render_xml_tools,
    tools_system="<|im_start|>system\n" + _DEFAULT_SYSTEM + "\n\n{content}<|im_end|>\n",
    tool_calls=_CALLS,
)

QWEN35 = replace(
    QWEN3,
    name="qwen35",
    aliases=("qwen3.5", "qwen3_5"),
    description="Qwen3.5: reasoning opened by the prompt, Qwen3-Coder's XML calls, tools as "
                "JSON before the system text",
    source="Qwen3.5 chat_template (as llama.cpp carries it, models/templates/Qwen3.5-4B.jinja)",
    tools_template="# Tools\n\nYou have access to the following functions:\n\n<tools>\n{tools}"
                   "\n</tools>" + _CALL_HELP,
    tools_position="system_start",
    reasoning=ReasoningSyntax(begin="<think>\n", end="</think>\n\n", pad="\n",
                              off="<think>\n\n</think>\n\n", opened_by_prompt=True,
                              off_in_history="kept"),
    trim_content=True,
    tool_calls=_CALLS,
)
