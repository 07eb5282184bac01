"""Kimi K2: section markers, `functions.NAME:IDX` call ids, JSON arguments."""

from .spec import ChatFormat, ReasoningSyntax, ToolCallSyntax

KIMI_K2 = ChatFormat(
    name="kimi_k2",
    description="Kimi K2: <|tool_calls_section_begin|> … functions.NAME:IDX "
                "<|tool_call_argument_begin|>{…}<|tool_call_end|> …",
    source="moonshotai Kimi-K2-Thinking chat_template.jinja",
    special_tokens=("<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>",
                    "<|im_end|>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                    "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
                    "<think>", "</think>"),
    bos="",
    system="<|im_system|>system<|im_middle|>{content}<|im_end|>",
    user="<|im_user|>user<|im_middle|>{content}<|im_end|>",
    assistant_prefix="<|im_assistant|>assistant<|im_middle|>",
    end_of_turn="<|im_end|>",
    after_turn="",
    tool_result="<|im_system|>tool<|im_middle|>## Return of {tool_call_id}\n{content}<|im_end|>",
    generation_prompt="<|im_assistant|>assistant<|im_middle|>",
    tools_template="<|im_system|>tool_declare<|im_middle|>{tools}<|im_end|>",
    tools_position="own_system",
    tools_json="list",
    default_system="You are Kimi, an AI assistant created by Moonshot AI.",
    # Every assistant turn of the template opens with a think block: empty where no reasoning
    # is shown, which is every turn up to the last answer without tool calls.
    reasoning=ReasoningSyntax(begin="<think>", end="</think>", off="<think></think>"),
    reasoning_history="after_last_answer",
    tool_calls=ToolCallSyntax(
        layout="name_args", section_begin="<|tool_calls_section_begin|>",
        section_end="<|tool_calls_section_end|>", call_begin="<|tool_call_begin|>",
        call_end="<|tool_call_end|>", name_prefix="functions.", index_sep=":",
        args_begin="<|tool_call_argument_begin|>"),
)
