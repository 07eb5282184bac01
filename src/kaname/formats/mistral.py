"""Mistral (tokenizer v13, e.g. Magistral / Devstral 2507+): `[THINK]` reasoning,
`[TOOL_CALLS]NAME[ARGS]{…}` per call, `</s>` at the end of every assistant turn.

Syntax of mistral-common's chat template for v13 (with thinking): tools as one JSON list in
`[AVAILABLE_TOOLS]` before the first user message, no call ids, results as
`[TOOL_RESULTS]…[/TOOL_RESULTS]`, no generation prompt. Tokenizer v11 (Mistral Small 3.2)
writes `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{…}`, results `[TOOL_RESULTS]ID[TOOL_CONTENT]…`, and
its tools before the last user message; v3/v7 models (Nemo, Small 3.1) write
`[TOOL_CALLS][{"name", "arguments", "id"}]`. Neither is this format.
"""

from .spec import ChatFormat, ReasoningSyntax, ToolCallSyntax

MISTRAL = ChatFormat(
    name="mistral",
    aliases=("mistral_v13", "magistral", "devstral"),
    description="Mistral tokenizer v13: [THINK] reasoning, [TOOL_CALLS]NAME[ARGS]{…} calls, "
                "</s>",
    source="mistralai/mistral-common chat template v13 (think)",
    special_tokens=("<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
                    "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[ARGS]",
                    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[THINK]", "[/THINK]",
                    "[CALL_ID]"),  # never written; a call header holding it is refused
    bos="<s>",
    system="[SYSTEM_PROMPT]{content}[/SYSTEM_PROMPT]",
    user="[INST]{content}[/INST]",
    assistant_prefix="",
    end_of_turn="</s>",
    after_turn="",
    tool_result="[TOOL_RESULTS]{content}[/TOOL_RESULTS]",
    generation_prompt="",
    tools_template="[AVAILABLE_TOOLS]{tools}[/AVAILABLE_TOOLS]",
    tools_json="list",
    tools_position="before_first_user",
    reasoning=ReasoningSyntax(begin="[THINK]", end="[/THINK]"),
    tool_calls=ToolCallSyntax(layout="name_args", call_begin="[TOOL_CALLS]", call_end="",
                              args_begin="[ARGS]"),
)
