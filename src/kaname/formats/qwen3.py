"""Qwen3 and Hermes: `<tool_call>{"name", "arguments"}</tool_call>` calls in ChatML turns;
Qwen3 reasons in `<think>`, Hermes-style models (Qwen2.5, SmolLM2, Hermes 2/3) do not."""

from dataclasses import replace

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
    # enable_thinking=False: the prompt writes an empty block, which history turns never show
    reasoning=ReasoningSyntax(begin="<think>\n", end="</think>\n\n", pad="\n",
                              off="<think>\n\n</think>\n\n", closed_by_prompt=True,
                              off_in_history="never"),
    tool_calls=ToolCallSyntax(layout="json", call_begin="<tool_call>\n",
                              call_end="\n</tool_call>", separator="\n",
                              after_content="\n"),
    reasoning_history="after_last_user",
)

# The same turns and call syntax without a reasoning block: a model that was never trained to
# reason must not be offered `<think>` (SmolLM2 under vLLM wrote one and spent its whole budget
# there). Qwen2.5's template is Qwen3's without the reasoning parts (and with a default system
# prompt of Qwen's own, not written here); vLLM's `hermes` parser reads these calls.
HERMES = replace(
    QWEN3,
    name="hermes",
    description="Hermes / Qwen2.5: <tool_call> JSON calls, ChatML turns, no reasoning",
    source="Qwen2.5 chat_template (Qwen3's without <think>); vLLM's hermes tool parser",
    special_tokens=tuple(t for t in QWEN3.special_tokens if "think" not in t),
    reasoning=None,
    reasoning_history="keep",
)

# Qwen3-2507 Thinking models reason on every turn: their template's generation prompt ends
# with "<think>\n" (the model card: "it is normal for the model's output to contain only
# </think> without an explicit opening <think> tag"), so the grammar starts inside the block
# and the turn cannot be switched to not reasoning.
QWEN3_THINKING = replace(
    QWEN3,
    name="qwen3_thinking",
    aliases=("qwen3-2507-thinking", "qwen3_2507_thinking"),
    description="Qwen3-2507 Thinking: Qwen3's turns and calls, the prompt opens <think>",
    source="Qwen3-2507 Thinking chat_template (Qwen3's, generation prompt ending in <think>)",
    reasoning=replace(QWEN3.reasoning, opened_by_prompt=True, closed_by_prompt=False, off="")
    if QWEN3.reasoning else None,
)
