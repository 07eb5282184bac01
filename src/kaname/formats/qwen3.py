"""Qwen3 / Hermes: `<think>` reasoning, `<tool_call>{"name", "arguments"}</tool_call>` calls."""

from .spec import ChatFormat, ReasoningSyntax, ToolCallSyntax

_TOOLS = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{tools}\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)

QWEN3 = ChatFormat(
    name="qwen3",
    aliases=("hermes",),
    description="Qwen3 / Hermes: <think> reasoning, <tool_call> JSON calls, ChatML turns",
    source="Qwen3 chat_template (Qwen3-0.6B; the Qwen3 family shares it)",
    special_tokens=("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
                    "</tool_call>", "<tool_response>", "</tool_response>", "<|endoftext|>"),
    bos="",
    system="<|im_start|>system\n{content}<|im_end|>\n",
    user="<|im_start|>user\n{content}<|im_end|>\n",
    assistant_prefix="<|im_start|>assistant\n",
    end_of_turn="<|im_end|>",
    tool_open="<|im_start|>user",
    tool_result="\n<tool_response>\n{content}\n</tool_response>",
    tool_close="<|im_end|>\n",
    generation_prompt="<|im_start|>assistant\n",
    tools_template=_TOOLS,
    tools_position="system",
    reasoning=ReasoningSyntax(begin="<think>\n", end="</think>\n\n", pad="\n"),
    tool_calls=ToolCallSyntax(layout="json", call_begin="<tool_call>\n",
                              call_end="\n</tool_call>", separator="\n",
                              after_content="\n"),
    reasoning_history="after_last_user",
)
