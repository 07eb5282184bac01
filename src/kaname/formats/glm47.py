"""GLM-4.7 (and GLM-4.7-Flash): GLM-4.5's markers and per-key calls, written without the
newlines, and reasoning opened by the generation prompt.

The official template (zai-org/GLM-4.7 chat_template.jinja) ends the prompt with
"<|assistant|><think>" ("</think>" with enable_thinking=False), so the model's turn starts
inside the reasoning block: reasoning text, "</think>", then content and calls, each
"<tool_call>NAME" + "<arg_key>K</arg_key><arg_value>V</arg_value>" per argument +
"</tool_call>", calls back to back, "<|observation|>" after them (tool results follow) or
"<|user|>". A string value is written raw, any other as JSON (`keyed.py`). With reasoning off
the prompt ends with a bare "</think>", as the template's non-thinking prompt does.
History turns are written as the template writes them: "<think>R</think>" for reasoning kept
(turns after the last user message), a bare "</think>" otherwise; tool results as
"<|observation|><tool_response>…</tool_response>", consecutive ones under one marker. The
template strips reasoning and content; kaname renders them as given.

GLM-4.6's template (as llama.cpp carries it, models/templates/GLM-4.6.jinja) still writes
GLM-4.5's newlines: it is `glm45`.
"""

from .glm45 import GLM45
from .spec import ChatFormat, ReasoningSyntax, ToolCallSyntax

_TOOLS = (
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query."
    "\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{tools}\n</tools>\n\nFor each function call, output the function name and arguments "
    "within the following XML format:\n<tool_call>{{function-name}}<arg_key>{{arg-key-1}}"
    "</arg_key><arg_value>{{arg-value-1}}</arg_value><arg_key>{{arg-key-2}}</arg_key>"
    "<arg_value>{{arg-value-2}}</arg_value>...</tool_call>"
)

GLM47 = ChatFormat(
    name="glm47",
    aliases=("glm4.7",),
    description="GLM-4.7: reasoning opened by the prompt, <tool_call>NAME<arg_key>K</arg_key>"
                "<arg_value>V</arg_value></tool_call> without newlines",
    source="zai-org/GLM-4.7 chat_template.jinja (GLM-4.7-Flash's is the same)",
    special_tokens=GLM45.special_tokens,
    bos="[gMASK]<sop>",
    system="<|system|>{content}",
    user="<|user|>{content}",
    assistant_prefix="<|assistant|>",
    end_of_turn="<|user|>",
    history_end="",
    after_turn="",
    tool_result="<tool_response>{content}</tool_response>",
    generation_prompt="<|assistant|>",
    tools_template=_TOOLS,
    tools_position="own_system",
    reasoning=ReasoningSyntax(begin="<think>", end="</think>", off="</think>",
                              opened_by_prompt=True),
    reasoning_history="after_last_user",
    tool_calls=ToolCallSyntax(
        layout="per_key", call_begin="<tool_call>", call_end="</tool_call>",
        key_begin="<arg_key>", key_end="</arg_key>", value_begin="<arg_value>",
        value_end="</arg_value>", end_of_turn="<|observation|>"),
)
