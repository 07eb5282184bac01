"""Llama 3.1: header-token turns, JSON tool calls `{"name": …, "parameters": …}` with no
marker before them, one call per turn, ended by `<|eot_id|>` (or `<|eom_id|>`).

The tool definitions go into the first user message, as the official template does by default
(tools_in_user_message). Where kaname differs from that template: tool results are written
as given (the template JSON-quotes a string result, since a Jinja string "is iterable"; Meta's
prompt-format documentation shows them raw), message text is not trimmed, and a call's
arguments are written as a JSON object (the template double-encodes an OpenAI arguments
string). Since a call has no opening marker, free-text content cannot start with "{" while a
call is allowed, and a turn that is exactly a {"name", "parameters"} object is read as a call.
"""

from .spec import ChatFormat, ToolCallSyntax

_TOOLS = (
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\nRespond in the format "
    '{{"name": function name, "parameters": dictionary of argument name and its value}}.'
    "Do not use variables.\n\n{tools}"
)

LLAMA31 = ChatFormat(
    name="llama31",
    aliases=("llama3.1", "llama3"),
    description='Llama 3.1: {"name": …, "parameters": {…}} calls, <|eot_id|> / <|eom_id|>',
    source="meta-llama/Llama-3.1-8B-Instruct chat_template (JSON tool calling)",
    special_tokens=("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                    "<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<|end_of_text|>"),
    bos="<|begin_of_text|>",
    system="<|start_header_id|>system<|end_header_id|>\n\n{content}<|eot_id|>",
    system_preamble="Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n",
    tools_preamble="Environment: ipython\n",
    user="<|start_header_id|>user<|end_header_id|>\n\n{content}<|eot_id|>",
    assistant_prefix="<|start_header_id|>assistant<|end_header_id|>\n\n",
    end_of_turn="<|eot_id|>",
    end_of_turn_alt=("<|eom_id|>",),
    after_turn="",
    tool_result="<|start_header_id|>ipython<|end_header_id|>\n\n{content}<|eot_id|>",
    generation_prompt="<|start_header_id|>assistant<|end_header_id|>\n\n",
    tools_template=_TOOLS,
    tool_template="{json_indent4}\n\n",
    tools_position="first_user",
    tool_calls=ToolCallSyntax(layout="json", call_begin="", call_end="",
                              args_key="parameters", parallel=False,
                              content_before_calls=False),
)
