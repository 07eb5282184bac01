"""PLaMo 3 (the seed talk's format): special-token reasoning and tool requests, ```json content."""

from .spec import ChatFormat, ReasoningSyntax, ToolCallSyntax


def _t(name: str) -> str:
    return f"<|plamo:{name}:plamo|>"


PLAMO3 = ChatFormat(
    name="plamo3",
    description="PLaMo 3: <|plamo:begin_think:plamo|> reasoning, <|plamo:begin_tool_requests:"
                "plamo|> calls with name and constrained JSON arguments, ```json content",
    # Output syntax as vLLM's and SGLang's PLaMo 3 parsers read it (the "trained format"). No
    # public chat template was found: the system/user/tool turn markers below are kaname's
    # placeholders and must not be taken as PLaMo's.
    source="vLLM plamo3 reasoning and tool parsers; turn markers unverified",
    # Tags are split into "<|plamo:begin_" / "<|plamo:end_", the name, ":plamo|>"; only these
    # pieces and the three markers below are single special tokens.
    special_tokens=("<|plamo:begin_", "<|plamo:end_", ":plamo|>", "<|plamo:tag|>",
                    "<|plamo:constrain|>", "<|plamo:msg|>"),
    bos="",
    system=_t("begin_system") + "{content}" + "<|plamo:tag|>",
    user=_t("begin_user") + "{content}" + "<|plamo:tag|>",
    assistant_prefix=_t("begin_assistant"),
    end_of_turn="<|plamo:tag|>",
    after_turn="",
    tool_result=_t("begin_tool_result") + "{content}" + "<|plamo:tag|>",
    generation_prompt=_t("begin_assistant"),
    tools_template="\n\n# Tools\n{tools}",
    tools_position="system",
    reasoning=ReasoningSyntax(begin=_t("begin_think"), end=_t("end_think")),
    tool_calls=ToolCallSyntax(
        layout="name_args", section_begin=_t("begin_tool_requests"),
        section_end=_t("end_tool_requests"), call_begin=_t("begin_tool_request"),
        call_end=_t("end_tool_arguments") + _t("end_tool_request"),
        name_prefix=_t("begin_tool_name"),
        args_begin=_t("end_tool_name") + _t("begin_tool_arguments") + "<|plamo:constrain|>"
        + "json<|plamo:msg|>"),
    json_prefix="```json\n",
    json_suffix="\n```",
)
