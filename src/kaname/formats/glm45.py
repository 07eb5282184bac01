"""GLM-4.5: `<think>` reasoning, per-key `<arg_key>`/`<arg_value>` tool calls, and no
end-of-turn token: a turn ends where the next one starts, `<|observation|>` after tool calls
(tool results follow) or `<|user|>` otherwise.

After the assistant header the model writes "\\n<think>…</think>" ("\\n<think></think>" when
not thinking), then "\\n" + content, then "\\n<tool_call>NAME\\n" with one
"<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n" per argument and "</tool_call>" per call. A
string value is written raw, any other as JSON (see `keyed.py` for what the grammar enforces).
The template strips reasoning and content; kaname renders them as given. GLM-4.6's template
(llama.cpp's models/templates/GLM-4.6.jinja) renders the same prompt and calls (aliases
`glm46`, `glm4.6`); GLM-4.7 drops the newlines (`glm47`).
"""

from .spec import ChatFormat, ReasoningSyntax, ToolCallSyntax

_TOOLS = (
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query."
    "\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{tools}\n</tools>\n\nFor each function call, output the function name and arguments "
    "within the following XML format:\n<tool_call>{{function-name}}\n<arg_key>{{arg-key-1}}"
    "</arg_key>\n<arg_value>{{arg-value-1}}</arg_value>\n<arg_key>{{arg-key-2}}</arg_key>\n"
    "<arg_value>{{arg-value-2}}</arg_value>\n...\n</tool_call>"
)

GLM45 = ChatFormat(
    name="glm45",
    aliases=("glm4.5", "glm", "glm46", "glm4.6"),
    description="GLM-4.5: <think> reasoning, <tool_call>NAME <arg_key>K</arg_key>"
                "<arg_value>V</arg_value> … </tool_call>, turns end on <|observation|> / <|user|>",
    source="zai-org/GLM-4.5 chat_template (as embedded in its GGUFs)",
    special_tokens=("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
                    "<|observation|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
                    "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
                    "<tool_response>", "</tool_response>"),
    bos="[gMASK]<sop>",
    system="<|system|>\n{content}",
    user="<|user|>\n{content}",
    assistant_prefix="<|assistant|>",
    end_of_turn="<|user|>",
    history_end="",
    after_turn="",
    tool_result="\n<tool_response>\n{content}\n</tool_response>",
    generation_prompt="<|assistant|>",
    tools_template=_TOOLS,
    tools_position="own_system",
    reasoning=ReasoningSyntax(begin="\n<think>", end="</think>\n", off="\n<think></think>\n"),
    reasoning_history="after_last_user",
    tool_calls=ToolCallSyntax(
        layout="per_key", call_begin="<tool_call>", call_end="</tool_call>", separator="\n",
        after_content="\n", args_begin="\n", key_begin="<arg_key>", key_end="</arg_key>\n",
        value_begin="<arg_value>", value_end="</arg_value>\n", end_of_turn="<|observation|>"),
)
