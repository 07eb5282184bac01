"""DeepSeek V3.1: `<think>` reasoning opened by the prompt (the template's generation prompt
ends with "<think>" in thinking mode, with "</think>" otherwise, its default), fullwidth-bar
tool-call markers, and a turn that goes on after tool results.

The official template does not read `tools`; the model card asks for this tool description
after the system prompt ("{system prompt}\\n\\n{tool_description}"), which kaname writes. The
template never shows reasoning in the history: earlier turns start with `</think>`. After tool
results there is no assistant header and no generation prompt: the model continues its turn
(non-thinking, as the model card says tool calls are).
"""

from .spec import ChatFormat, ReasoningSyntax, ToolCallSyntax

_TOOLS = (
    "\n\n## Tools\nYou have access to the following tools:\n\n{tools}"
    "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments"
    "<｜tool▁call▁end｜>{{{{additional_tool_calls}}}}<｜tool▁calls▁end｜>\n\n"
    "Where:\n- `tool_call_name` must be an exact match to one of the available tools\n"
    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters "
    "Schema\n- For multiple tool calls, chain them directly without separators or spaces"
)

DEEPSEEK_V31 = ChatFormat(
    name="deepseek_v31",
    aliases=("deepseek_v3.1", "deepseek"),
    description="DeepSeek V3.1: <think>…</think> or </think>, <｜tool▁calls▁begin｜> "
                "<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜> … calls",
    source="deepseek-ai/DeepSeek-V3.1 chat_template (turns) and model card (tool description)",
    special_tokens=("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>",
                    "<｜Assistant｜>", "<think>", "</think>", "<｜tool▁calls▁begin｜>",
                    "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
                    "<｜tool▁sep｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"),
    bos="<｜begin▁of▁sentence｜>",
    system="{content}",
    user="<｜User｜>{content}",
    assistant_prefix="<｜Assistant｜>",
    end_of_turn="<｜end▁of▁sentence｜>",
    after_turn="",
    tool_result="<｜tool▁output▁begin｜>{content}<｜tool▁output▁end｜>",
    generation_prompt="<｜Assistant｜>",
    tools_template=_TOOLS,
    tool_template="### {name}\nDescription: {description}\n\nParameters: {parameters}\n\n",
    tools_position="system",
    reasoning=ReasoningSyntax(begin="<think>", end="</think>", off="</think>",
                              opened_by_prompt=True, prompt_default="closed"),
    reasoning_history="drop",
    continue_after_tool=True,
    tool_calls=ToolCallSyntax(
        layout="name_args", section_begin="<｜tool▁calls▁begin｜>",
        section_end="<｜tool▁calls▁end｜>", call_begin="<｜tool▁call▁begin｜>",
        call_end="<｜tool▁call▁end｜>", args_begin="<｜tool▁sep｜>"),
)
