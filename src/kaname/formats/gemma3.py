"""Gemma 3, the embedded model. Its template has no tool syntax, so kaname chooses one that the
template can carry as plain text: a fenced ```tool_call block holding {"name", "arguments"}
JSON, one block per call. System messages are folded into the first user turn, as Gemma's
template does."""

from .spec import ChatFormat, ToolCallSyntax

GEMMA3 = ChatFormat(
    name="gemma3",
    description="Gemma 3 turns; tool calls as ```tool_call fenced JSON (kaname's convention)",
    source="google/gemma-3-270m-it chat_template (turns); tool syntax chosen by kaname",
    special_tokens=("<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>"),
    bos="<bos>",
    system="{content}\n\n",
    system_in_first_user=True,
    trim_content=True,
    user="<start_of_turn>user\n{content}<end_of_turn>\n",
    assistant_prefix="<start_of_turn>model\n",
    end_of_turn="<end_of_turn>",
    tool_result="<start_of_turn>user\n```tool_output\n{content}\n```<end_of_turn>\n",
    generation_prompt="<start_of_turn>model\n",
    tools_template="You can call these tools:\n{tools}\nTo call one, answer with "
                   '```tool_call\n{{"name": ..., "arguments": {{...}}}}\n```',
    tools_position="system",
    tool_calls=ToolCallSyntax(layout="json", call_begin="```tool_call\n", call_end="\n```",
                              separator="\n"),
)
