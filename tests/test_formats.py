"""Chat formats: one spec → prompt, grammar and parser, held together by a contract suite."""

from __future__ import annotations

import datetime
import json
import random

import jsonschema
import numpy as np
import pytest

from kaname.decoding import SamplingParams, decode
from kaname.errors import ConstraintError
from kaname.formats import (
    FORMATS,
    StreamParser,
    Tool,
    TurnRequest,
    build_grammar,
    get_format,
    keyed,
    merge_deltas,
    parse,
    render_assistant,
    render_prompt,
    tools_from_openai,
)
from kaname.formats.items import CallDelta
from kaname.formats.tool_checks import check_tools, not_enforced
from kaname.grammar import GrammarCompiler, Guards, JsonObject, JsonSchema, Lark
from kaname.runtimes.random_logits import RandomLogitsRuntime
from kaname.runtimes.scripted import token_pieces
from kaname.runtimes.synthetic import synthetic_tokenizer

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
MESSAGES = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Tokyo?"},
    {"role": "assistant", "reasoning_content": "Need weather.", "content": "",
     "tool_calls": [{"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 20}'},
]

# Rendered with each model's official chat template (transformers' Jinja settings: tojson with
# default separators and key order kept), for MESSAGES + TOOLS with add_generation_prompt.
OFFICIAL_PROMPTS = {
    "qwen3": (
        "<|im_start|>system\nYou are helpful.\n\n# Tools\n\nYou may call one or more functions to"
        " assist with the user query.\n\nYou are provided with function signatures within "
        "<tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": "
        "\"get_weather\", \"description\": \"Get weather\", \"parameters\": {\"type\": \"object\","
        " \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n"
        "</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather in Tokyo?<|im_end|>\n<|im_start|>assistant\n<think>\n"
        "Need weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Tokyo\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
        "{\"temp\": 20}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"),
    "kimi_k2": (
        "<|im_system|>tool_declare<|im_middle|>[{\"type\": \"function\", \"function\": "
        "{\"name\": \"get_weather\", \"description\": \"Get weather\", \"parameters\": "
        "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
        "\"required\": [\"city\"]}}}]<|im_end|><|im_system|>system<|im_middle|>You are helpful."
        "<|im_end|><|im_user|>user<|im_middle|>Weather in Tokyo?<|im_end|><|im_assistant|>"
        "assistant<|im_middle|><think>Need weather.</think><|tool_calls_section_begin|>"
        "<|tool_call_begin|>call_1<|tool_call_argument_begin|>{\"city\": \"Tokyo\"}"
        "<|tool_call_end|><|tool_calls_section_end|><|im_end|><|im_system|>tool<|im_middle|>"
        "## Return of call_1\n{\"temp\": 20}<|im_end|><|im_assistant|>assistant<|im_middle|>"),
    # The official template ignores `tools`; rendered with the model card's tool description
    # appended to the system prompt ("{system prompt}\n\n{tool_description}"). After a tool
    # result there is no generation prompt: the model continues its turn.
    "deepseek_v31": (
        "<｜begin▁of▁sentence｜>You are helpful.\n\n## Tools\nYou have access to the following "
        "tools:\n\n### get_weather\nDescription: Get weather\n\nParameters: {\"type\": "
        "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
        "[\"city\"]}\n\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments"
        "<｜tool▁call▁end｜>{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\nWhere:\n- "
        "`tool_call_name` must be an exact match to one of the available tools\n- "
        "`tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters "
        "Schema\n- For multiple tool calls, chain them directly without separators or spaces"
        "<｜User｜>Weather in Tokyo?<｜Assistant｜></think><｜tool▁calls▁begin｜>"
        "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Tokyo\"}<｜tool▁call▁end｜>"
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>{\"temp\": 20}"
        "<｜tool▁output▁end｜>"),
    # The template iterates `arguments.items()`: rendered with the arguments as a dict.
    "glm45": (
        "[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions to assist with "
        "the user query.\n\nYou are provided with function signatures within <tools></tools> "
        "XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": "
        "\"get_weather\", \"description\": \"Get weather\", \"parameters\": {\"type\": "
        "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
        "[\"city\"]}}}\n</tools>\n\nFor each function call, output the function name and "
        "arguments within the following XML format:\n<tool_call>{function-name}\n<arg_key>"
        "{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n<arg_key>{arg-key-2}"
        "</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call><|system|>\nYou "
        "are helpful.<|user|>\nWeather in Tokyo?<|assistant|>\n<think>Need weather.</think>\n"
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Tokyo</arg_value>\n"
        "</tool_call><|observation|>\n<tool_response>\n{\"temp\": 20}\n</tool_response>"
        "<|assistant|>"),
    # zai-org/GLM-4.7's chat_template.jinja (transformers' Jinja settings, enable_thinking
    # undefined), read from public copies of it: no newlines in calls, and the prompt opens
    # the reasoning block. Arguments as a dict, as for glm45.
    "glm47": (
        "[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions to assist with "
        "the user query.\n\nYou are provided with function signatures within <tools></tools> "
        "XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": "
        "\"get_weather\", \"description\": \"Get weather\", \"parameters\": {\"type\": "
        "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
        "[\"city\"]}}}\n</tools>\n\nFor each function call, output the function name and "
        "arguments within the following XML format:\n<tool_call>{function-name}<arg_key>"
        "{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value><arg_key>{arg-key-2}"
        "</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call><|system|>You are "
        "helpful.<|user|>Weather in Tokyo?<|assistant|><think>Need weather.</think><tool_call>"
        "get_weather<arg_key>city</arg_key><arg_value>Tokyo</arg_value></tool_call>"
        "<|observation|><tool_response>{\"temp\": 20}</tool_response><|assistant|><think>"),
    # mistral-common's v13 template with thinking (tools before the first user message).
    "mistral": (
        "<s>[SYSTEM_PROMPT]You are helpful.[/SYSTEM_PROMPT][AVAILABLE_TOOLS][{\"type\": "
        "\"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get "
        "weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
        "{\"type\": \"string\"}}, \"required\": [\"city\"]}}}][/AVAILABLE_TOOLS][INST]"
        "Weather in Tokyo?[/INST][THINK]Need weather.[/THINK][TOOL_CALLS]get_weather[ARGS]"
        "{\"city\": \"Tokyo\"}</s>[TOOL_RESULTS]{\"temp\": 20}[/TOOL_RESULTS]"),
}
# Byte-exact only up to the first assistant turn: Llama 3.1's template JSON-quotes a string
# tool result (a Jinja string "is iterable") and double-encodes an OpenAI arguments string;
# kaname writes both as given (Meta's prompt-format docs show raw results). MESSAGES[:2].
OFFICIAL_PROMPT_PREFIXES = {
    "llama31": (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are helpful."
        "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, "
        "please respond with a JSON for a function call with its proper arguments that best "
        "answers the given prompt.\n\nRespond in the format {\"name\": function name, "
        "\"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n"
        + json.dumps(TOOLS[0], indent=4) + "\n\nWeather in Tokyo?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"),
}
# What the model itself emits for that assistant turn, per the official templates.
OFFICIAL_TURNS = {
    "qwen3": ("<think>\nNeed weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
              "\"arguments\": {\"city\": \"Tokyo\"}}\n</tool_call><|im_end|>"),
    "kimi_k2": ("<think>Need weather.</think><|tool_calls_section_begin|><|tool_call_begin|>"
                "functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Tokyo\"}"
                "<|tool_call_end|><|tool_calls_section_end|><|im_end|>"),
    # no public template: the output grammar of vLLM's PLaMo 3 parsers
    "plamo3": ("<|plamo:begin_think:plamo|>Need weather.<|plamo:end_think:plamo|>"
               "<|plamo:begin_tool_requests:plamo|><|plamo:begin_tool_request:plamo|>"
               "<|plamo:begin_tool_name:plamo|>get_weather<|plamo:end_tool_name:plamo|>"
               "<|plamo:begin_tool_arguments:plamo|><|plamo:constrain|>json<|plamo:msg|>"
               "{\"city\": \"Tokyo\"}<|plamo:end_tool_arguments:plamo|>"
               "<|plamo:end_tool_request:plamo|><|plamo:end_tool_requests:plamo|><|plamo:tag|>"),
    # non-thinking, as the official prompt asks (tool calls are non-thinking in V3.1)
    "deepseek_v31": ("</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                     "{\"city\": \"Tokyo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
                     "<｜end▁of▁sentence｜>"),
    "glm45": ("\n<think>Need weather.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>"
              "\n<arg_value>Tokyo</arg_value>\n</tool_call><|observation|>"),
    # after the prompt's "<think>"
    "glm47": ("<think>Need weather.</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>"
              "Tokyo</arg_value></tool_call><|observation|>"),
    "llama31": '{"name": "get_weather", "parameters": {"city": "Tokyo"}}<|eot_id|>',
    "mistral": ("[THINK]Need weather.[/THINK][TOOL_CALLS]get_weather[ARGS]{\"city\": \"Tokyo\"}"
                "</s>"),
    "gpt_oss": ("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions."
                "get_weather<|channel|>commentary json<|message|>{\"city\": \"Tokyo\"}<|call|>"),
}
# Not byte-exact to a template revision (they differ in the tools-only channel line, in
# JSON-quoting string arguments and results, and fail on a parameter without a description):
# harmony's documented layout, which kaname writes.
HARMONY_PROMPT = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: {date}\n\nReasoning: medium\n\n# Valid channels: "
    "analysis, commentary, final. Channel must be included for every message.\nCalls to these "
    "tools must go to the commentary channel: 'functions'.<|end|><|start|>developer<|message|>"
    "# Instructions\n\nYou are helpful.\n\n# Tools\n\n## functions\n\nnamespace functions {{\n\n"
    "// Get weather\ntype get_weather = (_: {{\ncity: string,\n}}) => any;\n\n}} // namespace "
    "functions<|end|><|start|>user<|message|>Weather in Tokyo?<|end|><|start|>assistant"
    "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions."
    "get_weather<|channel|>commentary json<|message|>{{\"city\": \"Tokyo\"}}<|call|><|start|>"
    "functions.get_weather to=assistant<|channel|>commentary<|message|>{{\"temp\": 20}}<|end|>"
    "<|start|>assistant")


@pytest.mark.parametrize("name", sorted(OFFICIAL_PROMPTS))
def test_prompt_matches_official_template(name):
    fmt = get_format(name)
    assert render_prompt(fmt, MESSAGES, tools_from_openai(TOOLS)) == OFFICIAL_PROMPTS[name]


@pytest.mark.parametrize("name", sorted(OFFICIAL_PROMPT_PREFIXES))
def test_prompt_prefix_matches_official_template(name):
    fmt = get_format(name)
    assert render_prompt(fmt, MESSAGES[:2], tools_from_openai(TOOLS)) \
        == OFFICIAL_PROMPT_PREFIXES[name]


def test_harmony_prompt_layout():
    prompt = render_prompt(get_format("gpt_oss"), MESSAGES, tools_from_openai(TOOLS))
    assert prompt == HARMONY_PROMPT.format(date=datetime.date.today().isoformat())


@pytest.mark.parametrize("name", sorted(OFFICIAL_TURNS))
def test_grammar_accepts_the_official_turn_and_parser_reads_it(name):
    fmt = get_format(name)
    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    tools = tools_from_openai(TOOLS)
    req = TurnRequest(tools=tools, reasoning="on")
    compiled = GrammarCompiler(tok).compile(Lark(build_grammar(fmt, req, tok)))
    text = OFFICIAL_TURNS[name]  # the whole turn: what the prompt wrote of it first
    opening = req.opening_in(fmt)
    assert text.startswith(opening)
    m = compiled.new_matcher()
    assert m.accept_tokens(tok.tokenize_str(text[len(opening):], parse_special=True)), \
        m.error()
    assert m.is_accepting()
    turn = parse(fmt, text, tools=tools)
    assert turn.reasoning_content == ("Need weather." if "Need weather." in text else None)
    assert turn.content is None
    assert [(c.name, json.loads(c.arguments)) for c in turn.tool_calls] == [
        ("get_weather", {"city": "Tokyo"})]
    # and the history renders the turn the way the model wrote it (the prompt's part too)
    assert render_assistant(fmt, turn.to_message(), "/messages/2") == text


def test_markers_are_tokens_where_the_vocabulary_has_them():
    fmt = get_format("kimi_k2")
    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    lark = build_grammar(fmt, TurnRequest(tools=tools_from_openai(TOOLS)), tok)
    assert "<|tool_call_begin|>" not in lark and "<[" in lark  # by id, not by spelling
    gemma_like, _ = synthetic_tokenizer(())
    lark = build_grammar(fmt, TurnRequest(tools=tools_from_openai(TOOLS)), gemma_like)
    assert '"<|tool_calls_section_begin|>' in lark  # no such token: spelled out


def test_bad_requests():
    with pytest.raises(ConstraintError, match="unknown tool"):
        TurnRequest(tools=tools_from_openai(TOOLS), tool_choice="nope")
    with pytest.raises(ConstraintError, match="at least one tool"):
        TurnRequest(tool_choice="required")
    with pytest.raises(ConstraintError) as e:
        tools_from_openai([{"type": "function", "function": {"parameters": {}}}])
    assert e.value.pointer == "/tools/0/function"
    with pytest.raises(ConstraintError, match="unknown chat format"):
        get_format("nope")


def test_unsupported_tool_schema_names_the_tool_pointer():
    """OpenAI's strict per function: a strict tool is enforced fully or refused; any other is
    enforced where it can be, and what is not is named (then post-checked per call)."""
    fmt = get_format("qwen3")
    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    params = {"type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}}
    compiler = GrammarCompiler(tok)
    strict = (Tool("a", {"type": "object"}), Tool("b", params, strict=True))
    with pytest.raises(ConstraintError) as e:
        build_grammar(fmt, TurnRequest(tools=strict), tok, compiler=compiler)
    assert e.value.pointer == "/tools/1/function/parameters/properties/x/uniqueItems"
    assert e.value.keyword == "uniqueItems"
    req = TurnRequest(tools=(Tool("a", {"type": "object"}), Tool("b", params)))
    checks = check_tools(fmt, req, compiler)
    assert not_enforced(checks) == [{
        "keyword": "uniqueItems",
        "pointer": "/tools/1/function/parameters/properties/x/uniqueItems"}]
    lark = build_grammar(fmt, req, tok, compiler=compiler)
    assert _accepts_lark(fmt, lark, tok, '<tool_call>\n{"name": "b", "arguments": {"x": [1, 1]}}'
                         '\n</tool_call><|im_end|>')  # not enforced by the grammar...
    assert checks["b"].verdict('{"x": [1, 1]}') is False  # ...but post-checked
    assert checks["b"].verdict('{"x": [1, 2]}') is True


# ---- what each new format's grammar does and does not allow ---------------------------------

WEATHER = Tool("weather", {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city"]})


def _accepts_lark(fmt, lark: str, tok, text: str) -> bool:
    m = GrammarCompiler(tok).compile(Lark(lark)).new_matcher()
    return m.accept_tokens(tok.tokenize_str(text, parse_special=True)) and m.is_accepting()


def _accepts(name: str, req: TurnRequest, text: str) -> bool:
    """Token by token, `text` being the whole turn (what the prompt wrote of it first)."""
    fmt = get_format(name)
    opening = req.opening_in(fmt)
    if not text.startswith(opening):
        return False
    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    m = GrammarCompiler(tok).compile(Lark(build_grammar(fmt, req, tok))).new_matcher()
    rest = text[len(opening):]
    return m.accept_tokens(tok.tokenize_str(rest, parse_special=True)) and m.is_accepting()


def _model_turn(fmt, req: TurnRequest, message: dict) -> str:
    """A turn as the model writes it after the prompt: history renders it, and where history
    leaves out what the prompt opens the turn with (Qwen3's empty block with reasoning off), the
    opening goes first."""
    text = render_assistant(fmt, message, "")
    opening = req.opening_in(fmt)
    return text if text.startswith(opening) else opening + text


def _always_reasons(fmt) -> bool:
    """The format's prompt opens the reasoning block on every turn (Qwen3-2507 Thinking)."""
    try:
        fmt.opening("off")
    except ConstraintError:
        return True
    return False


def _glm_call(*pairs: tuple[str, str]) -> str:
    args = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in pairs)
    return f"\n<think></think>\n<tool_call>weather\n{args}</tool_call><|observation|>"


def test_glm_binds_each_key_to_its_property_schema():
    req = TurnRequest(tools=(WEATHER,), tool_choice="required")
    ok = _glm_call(("city", "12"), ("days", "3"), ("unit", "c"))
    assert _accepts("glm45", req, ok)
    turn = parse(get_format("glm45"), ok, tools=req.tools)
    assert json.loads(turn.tool_calls[0].arguments) == {"city": "12", "days": 3, "unit": "c"}
    # without the tools a value is read as JSON when it parses: "12" would be a number
    assert json.loads(parse(get_format("glm45"), ok).tool_calls[0].arguments)["city"] == 12
    assert _accepts("glm45", req, _glm_call(("city", "New York")))
    for bad in ([("days", "3")],                      # required key missing
                [("city", "a"), ("days", "x")],       # not an integer
                [("city", "a"), ("unit", "k")],       # not in the enum
                [("days", "3"), ("city", "a")],       # not in property order
                [("city", "a"), ("city", "b")],       # a declared key twice
                [("zone", "b"), ("city", "a")],       # undeclared keys come after declared
                [("city", "a</arg_value>b")]):        # raw text ends at the end marker
        assert not _accepts("glm45", req, _glm_call(*bad)), bad


def test_glm_refuses_what_raw_strings_cannot_carry():
    # a format without a regex for raw text (date, uuid, email, ... have one: see below)
    params = {"type": "object", "properties": {"d": {"type": "string", "format": "hostname"}}}
    fmt = get_format("glm45")
    tok, _ = synthetic_tokenizer(fmt.special_tokens)
    with pytest.raises(ConstraintError) as e:
        build_grammar(fmt, TurnRequest(tools=(Tool("ok"), Tool("t", params, strict=True))), tok)
    assert e.value.pointer == "/tools/1/function/parameters/properties/d/format"
    build_grammar(fmt, TurnRequest(tools=(Tool("t", params, strict=True),),
                                   strict_level="names"), tok)
    # not strict: the raw string is not bound to its format, which is said
    req = TurnRequest(tools=(Tool("ok"), Tool("t", params)))
    build_grammar(fmt, req, tok)
    assert not_enforced(check_tools(fmt, req, GrammarCompiler(tok))) == [
        {"keyword": "format", "pointer": "/tools/1/function/parameters/properties/d/format"}]


def test_llama_calls_are_bare_json_and_content_cannot_start_like_one():
    req = TurnRequest(tools=(WEATHER,))
    call = '{"name": "weather", "parameters": {"city": "Oslo"}}'
    assert _accepts("llama31", req, call + "<|eom_id|>")
    assert _accepts("llama31", req, call + "<|eot_id|>")
    assert not _accepts("llama31", req, call + call + "<|eot_id|>")  # one call per turn
    assert not _accepts("llama31", req, "{not a call}<|eot_id|>")
    assert _accepts("llama31", req, "It is {sunny}.<|eot_id|>")
    assert _accepts("llama31", TurnRequest(tools=(WEATHER,), tool_choice="none"),
                    "{not a call}<|eot_id|>")
    fmt = get_format("llama31")
    assert parse(fmt, "{not a call}<|eot_id|>").content == "{not a call}"
    assert parse(fmt, call + "<|eom_id|>").tool_calls[0].name == "weather"


def test_deepseek_goes_on_after_tool_results():
    fmt = get_format("deepseek_v31")
    prompt = render_prompt(fmt, MESSAGES)
    assert prompt.endswith("<｜tool▁output▁end｜>")  # no generation prompt: the turn goes on
    answered = render_prompt(fmt, [*MESSAGES, {"role": "assistant", "content": "20C."},
                                   {"role": "user", "content": "Thanks"}])
    # a new turn's prompt ends as the template's default (not thinking) does
    assert answered.endswith(
        "<｜tool▁output▁end｜>20C.<｜end▁of▁sentence｜><｜User｜>Thanks<｜Assistant｜></think>")
    # going on after tool results the prompt wrote nothing of the turn: "</think>" may open
    # it, "<think>" may not
    req = TurnRequest(opening="")
    assert _accepts("deepseek_v31", req, "</think>20C.<｜end▁of▁sentence｜>")
    assert _accepts("deepseek_v31", req, "20C.<｜end▁of▁sentence｜>")
    assert not _accepts("deepseek_v31", req, "<think>hm</think>20C.<｜end▁of▁sentence｜>")
    assert parse(fmt, "</think>20C.<｜end▁of▁sentence｜>").content == "20C."


def test_content_then_calls_glue_is_not_content():
    fmt = get_format("qwen3")
    call = '<tool_call>\n{"name": "weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    text = f"Checking.\n{call}<|im_end|>"
    # reasoning on: the model may skip the block (off, the prompt would write an empty one)
    assert _accepts("qwen3", TurnRequest(tools=(WEATHER,), reasoning="on"), text)
    turn = parse(fmt, text)
    assert (turn.content, [c.name for c in turn.tool_calls]) == ("Checking.", ["weather"])
    assert render_assistant(fmt, turn.to_message(), "") == text


def test_harmony_answer_and_call_are_exclusive():
    req = TurnRequest(tools=(WEATHER,), reasoning="on")
    final = "<|channel|>final<|message|>Sunny.<|return|>"
    call = (' to=functions.weather<|channel|>commentary json<|message|>{"city": "Oslo"}'
            "<|call|>")
    for text in (final, call, "<|channel|>analysis<|message|>hm<|end|><|start|>assistant" + call):
        assert _accepts("gpt_oss", req, text), text
    assert not _accepts("gpt_oss", req, final[:-len("<|return|>")] + call)
    turn = parse(get_format("gpt_oss"), final)
    assert (turn.content, turn.tool_calls) == ("Sunny.", [])


# ---- the contract suite: every format, random requests, random-logits generation ----------

def _tool_pool(schema_sample):
    pool = []
    for row in schema_sample:
        if row["subset"] in ("Glaiveai2K", "MCPspec") and isinstance(row["schema"], dict) \
                and row["schema"].get("type") == "object":
            pool.append(row["schema"])
    return pool


def _random_request(rng: random.Random, pool, compiler, fmt) -> TurnRequest:
    tools = []
    keyed_args = fmt.tool_calls is not None and fmt.tool_calls.layout == "per_key"
    for i in range(rng.randint(0, 3)):
        params = rng.choice(pool)
        try:
            compiler.compile(JsonSchema(params))
            if keyed_args:  # what raw string arguments cannot carry is refused
                keyed.check(params, "")
        except ConstraintError:
            params = {"type": "object", "properties": {"q": {"type": "string"}},
                      "required": ["q"]}
        tools.append(Tool(f"tool_{i}", params))
    choices = ["auto", "none"] + (["required", tools[0].name] if tools else [])
    rf = rng.choice([None, {"type": "json_object"}, {"type": "json_schema", "json_schema": {
        "name": "answer", "schema": {"type": "object", "properties": {
            "answer": {"type": "string"}}, "required": ["answer"]}}}])
    choice, parallel = rng.choice(choices), rng.random() < 0.5
    reasoning = rng.choice(["off", "on", "required"])  # drawn always: the same sequence
    if reasoning == "off" and _always_reasons(fmt):
        reasoning = "on"
    return TurnRequest(tools=tuple(tools), tool_choice=choice, parallel_tool_calls=parallel,
                       response_format=rf, reasoning=reasoning if fmt.reasoning else "off")


def _check_contract(fmt, req: TurnRequest, text: str) -> None:
    # JSON content is read as the pipeline reads it (chat.PreparedTurn.json_content): a
    # marker spelled inside one of its strings is text
    json_content = isinstance(req.content, JsonSchema | JsonObject)
    turn = parse(fmt, text, tools=req.tools, json_content=json_content)
    by_name = {t.name: t for t in req.tools}
    for call in turn.tool_calls:
        assert call.name in {t.name for t in req.callable_tools}, call.name
        params = by_name[call.name].parameters
        jsonschema.validate(json.loads(call.arguments), params or {"type": "object"})
    n = len(turn.tool_calls)
    if req.tool_choice == "none" or not req.tools:
        assert n == 0
    if req.tool_choice not in ("none", "auto") and req.tools:
        assert n >= 1
    if not req.parallel_tool_calls:
        assert n <= 1
    r = fmt.reasoning
    if req.reasoning == "required" and r is not None:
        # a block the prompt opened (GLM-4.7) is closed by the turn
        assert r.end in text if r.opened_by_prompt else text.startswith(r.begin)
    if req.reasoning == "off" and r is not None and (r.opened_by_prompt or r.closed_by_prompt):
        assert text.startswith(r.off)  # the prompt wrote the no-reasoning marker
    if req.reasoning == "off":
        assert turn.reasoning_content is None
    if req.response_format and req.response_format.get("type") != "text" and turn.content:
        json.loads(turn.content)
    # streaming equals non-streaming under seeded random chunkings
    for seed in range(100 if len(text) < 400 else 20):
        r = random.Random(seed)
        sp = StreamParser(fmt, tools=req.tools, json_content=json_content)
        deltas, i = [], 0
        while i < len(text):
            step = r.randint(1, 12)
            deltas += sp.feed(text[i:i + step])
            i += step
        _, rest = sp.finish()
        merged = merge_deltas(deltas + rest)
        assert merged["content"] == turn.content
        assert merged["reasoning_content"] == turn.reasoning_content
        assert [(c["id"], c["function"]) for c in merged["tool_calls"]] == [
            (c.id, c.to_openai()["function"]) for c in turn.tool_calls]


class _WantsToEnd:
    """A random model that, after `patience` tokens of its own, wants its turn to end: it
    prefers the format's end markers and EOS, then its other special tokens (what ends a
    reasoning block or a call), then tokens that close a JSON string, then a structure. A
    random model alone ends a turn only where it happens to pick those (18 of 40 qwen35 turns
    on the vendored sample, fewer than another sample's 20): with this one every turn ends
    where the grammar bounds what is open, so the contract is checked on every turn, and a
    turn that cannot be ended within the budget is a finding, not bad luck."""

    def __init__(self, random_model: RandomLogitsRuntime, fmt, patience: int):
        self._model = random_model
        self._patience = patience
        self._seen = 0
        tok = random_model.tokenizer
        bias = np.zeros(tok.vocab_size, dtype=np.float32)
        for i in range(tok.vocab_size):
            piece = tok.decode_bytes([i]).strip()
            if tok.is_special_token(i):
                bias[i] = 20.0
            elif piece and not piece.strip(b'"}]'):
                bias[i] = 10.0 if piece.startswith(b'"') else 5.0  # in a string, ] is text
        pieces = token_pieces(tok)
        ends = [pieces[m.encode()] for m in fmt.end_markers if m.encode() in pieces]
        bias[[*random_model.eos_token_ids, *ends]] = 30.0
        self._bias = bias
        self.tokenizer, self.n_vocab = tok, random_model.n_vocab
        self.eos_token_ids, self.n_ctx = random_model.eos_token_ids, None

    def tokenize(self, text: str) -> list[int]:
        return self._model.tokenize(text)

    def start(self, prompt):
        self._seen = 0
        return self._model.start(prompt)

    def advance(self, tokens):
        self._seen += len(tokens)
        row = self._model.advance(tokens)
        return row + self._bias if self._seen >= self._patience else row

    exact_batch = None
    exact_cells = None
    answers_only = False

    def evaluate(self, tokens, logits_at, only=None):  # full rows: always a valid answer
        rows = []
        for i, t in enumerate(tokens):  # one token at a time, as the inner model counts
            self._seen += 1
            row = self._model.evaluate([t], [0])[0]
            if i in logits_at:
                rows.append(row + self._bias if self._seen >= self._patience else row)
        return np.stack(rows)

    def rollback(self, n):
        self._seen -= n
        self._model.rollback(n)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_format_contract_synthetic_vocab(name, schema_sample):
    """40 random turns, each driven to its end after 400 random tokens: every one ends, and
    every one keeps the contract."""
    fmt = get_format(name)
    tok, eos = synthetic_tokenizer(fmt.special_tokens)
    stops = _run_contract(fmt, tok, eos, schema_sample, n=40, patience=400)
    assert stops == 40


# DeepSeek's markers contain "▁" (U+2581), which the Gemma vocabulary, SentencePiece-style,
# reads as a space: llguidance's forced tokens for a spelled-out marker then do not match the
# grammar. A DeepSeek vocabulary has the markers as tokens; the synthetic run covers it, so
# the combination is left out here (not skipped: it is not a combination anyone serves).
# qwen3_thinking's every turn starts inside its reasoning block, which only a spelled-out
# "</think>" ends: a random model almost never writes that within the run's budget (no turn
# of 24 ended), so its spelled-out runs say nothing; the synthetic run covers it, and qwen3
# covers the same markers spelled out. qwen35 likewise (3 of 24 turns ended with reasoning on):
# qwen3 and qwen3_coder cover its markers spelled out.
_SPELLED_OUT = [n for n in sorted(FORMATS)
                if n not in ("deepseek_v31", "qwen3_thinking", "qwen35")]


@pytest.mark.parametrize("name", _SPELLED_OUT)
def test_format_contract_gemma_vocab(name, gemma, schema_sample):
    """With Gemma's vocabulary most markers are spelled out: the lazy text path."""
    # A random model rarely spells a 20-character marker by chance, so fewer turns end.
    # At least 24 turns, and as many more (up to 96) as it takes for 4 to end: how many end
    # depends on the sample and the sampler's draws, not on the contract checked.
    stops = _run_contract(get_format(name), gemma.tokenizer, gemma.eos_token_ids,
                          schema_sample, n=96, enough=(24, 4))
    assert stops >= 4


def _run_contract(fmt, tok, eos, schema_sample, n, patience=None, enough=None) -> int:
    """Check the contract on each of `n` random turns that ends within the budget (400 random
    tokens; with `patience`, that many random tokens, then 600 of wanting to end); the number
    that ended."""
    pool = _tool_pool(schema_sample)
    assert pool
    # A per-key format whose key and value ends are plain text (Qwen3-Coder's ">\n",
    # "\n</parameter>\n") ends a raw key or value only where a random model spells that out,
    # which it seldom does (14 of 40 turns ended on the vendored sample): with a string cap the
    # end is forced at the cap, and with few undeclared arguments a call ends within the budget.
    s = fmt.tool_calls
    spelled = s is not None and s.layout == "per_key" \
        and s.value_end.strip() not in fmt.special_tokens
    guards = Guards(max_string_length=24, max_array_items=2) if spelled else Guards()
    compiler = GrammarCompiler(tok, guards=guards)
    model = RandomLogitsRuntime(tok, eos_token_ids=eos)
    runtime = model if patience is None else _WantsToEnd(model, fmt, patience)
    rng = random.Random(fmt.name)
    stops = 0
    for i in range(n):
        if enough is not None and i >= enough[0] and stops >= enough[1]:
            break  # `enough`: (turns, ended turns) after which more would check nothing new
        req = _random_request(rng, pool, compiler, fmt)
        compiled = compiler.compile(Lark(build_grammar(fmt, req, tok, compiler=compiler,
                                                       guards=guards)))
        model.seed = i
        d = decode(runtime, [0], compiled.new_matcher(), SamplingParams(),
                   max_tokens=400 if patience is None else patience + 600)
        if d.finish_reason == "stop":
            stops += 1
            _check_contract(fmt, req, req.opening_in(fmt) + d.text)  # the whole turn
    return stops


# Llama 3.1's calls have no opener: text is known to be a call only at its end marker.
@pytest.mark.parametrize("name", ["qwen3", "gemma3"])
def test_json_layout_arguments_stream_as_they_are_written(name):
    """Calls written as {"name", "arguments"} JSON stream their arguments in fragments, not as
    one delta at the end; the fragments add up to the parsed arguments."""
    fmt = get_format(name)
    s = fmt.tool_calls
    args = '{"city": "Tokyo", "days": [1, 2, 3], "unit": "c"}'
    call = f'{{"{s.name_key}": "get_weather", "{s.args_key}": {args}}}'
    text = s.section_begin + s.call_begin + call + s.call_end + s.section_end + fmt.calls_end
    sp = StreamParser(fmt)
    deltas = [d for i in range(0, len(text), 4) for d in sp.feed(text[i:i + 4])]
    turn, rest = sp.finish()
    fragments = [d.fragment for d in deltas + rest if isinstance(d, CallDelta) and d.id is None]
    assert len(fragments) > 3
    assert "".join(fragments) == turn.tool_calls[0].arguments == args


def test_kimi_blanks_reasoning_up_to_the_last_answer():
    """Kimi K2-Thinking's template: every assistant turn opens with a think block, empty up to
    the last answer without tool calls, the reasoning after it (the current tool chain) kept.
    Expected text written from the official template (llama.cpp's copy)."""
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "reasoning_content": "Greet.", "content": "Hello!"},
        {"role": "user", "content": "Weather in Tokyo?"},
        {"role": "assistant", "reasoning_content": "Need weather.", "content": "",
         "tool_calls": [{"id": "functions.get_weather:0", "type": "function",
                         "function": {"name": "get_weather",
                                      "arguments": '{"city": "Tokyo"}'}}]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": '{"temp": 20}'},
    ]
    assert render_prompt(get_format("kimi_k2"), messages) == (
        "<|im_system|>system<|im_middle|>You are helpful.<|im_end|>"
        "<|im_user|>user<|im_middle|>Hi<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think></think>Hello!<|im_end|>"
        "<|im_user|>user<|im_middle|>Weather in Tokyo?<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think>Need weather.</think>"
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        "<|tool_call_argument_begin|>{\"city\": \"Tokyo\"}<|tool_call_end|>"
        "<|tool_calls_section_end|><|im_end|>"
        "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\n{\"temp\": 20}"
        "<|im_end|><|im_assistant|>assistant<|im_middle|>")


def test_gemma3_prompt_matches_official_template():
    """Gemma 3's template (google/gemma-3-270m-it): the system text opens the first user turn,
    message text is trimmed, the assistant is "model". Written from the official template;
    it has no tool role, so tools are kaname's convention and not part of this fixture."""
    messages = [{"role": "system", "content": "You are helpful."},
                {"role": "user", "content": "  Hi \n"},
                {"role": "assistant", "content": "Hello!\n"},
                {"role": "user", "content": "Weather in Tokyo?"}]
    assert render_prompt(get_format("gemma3"), messages) == (
        "<bos><start_of_turn>user\nYou are helpful.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nWeather in Tokyo?<end_of_turn>\n<start_of_turn>model\n")


# (qwen3_thinking: Qwen3's calls, checked there; its turns cannot be without reasoning)
@pytest.mark.parametrize("name", [n for n, f in FORMATS.items()
                                  if f.tool_calls is not None and f.tool_calls.parallel
                                  and not _always_reasons(f)])
def test_named_tool_choice_is_exactly_one_call(name):
    """OpenAI: a named tool_choice makes the model call that function, once. A grammar that
    allowed more let Gemma repeat the forced call until max_tokens."""
    fmt = get_format(name)
    call = {"type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    required = TurnRequest(tools=(WEATHER,), tool_choice="required")
    named = TurnRequest(tools=(WEATHER,), tool_choice="weather")
    one = _model_turn(fmt, named, {"role": "assistant", "tool_calls": [call]})
    two = _model_turn(fmt, named, {"role": "assistant", "tool_calls": [call, call]})
    assert _accepts(name, required, two) and _accepts(name, named, one)
    assert not _accepts(name, named, two)


@pytest.mark.parametrize("name", [n for n, f in FORMATS.items()
                                  if f.tool_calls is not None and not _always_reasons(f)])
def test_a_tool_without_parameters_takes_no_arguments(name):
    """OpenAI: omitting `parameters` defines a function with an empty parameter list."""
    fmt = get_format(name)
    req = TurnRequest(tools=(Tool("now"),), tool_choice="required")

    def call(arguments: str) -> str:
        return _model_turn(fmt, req, {"role": "assistant", "tool_calls": [
            {"type": "function", "function": {"name": "now", "arguments": arguments}}]})

    assert _accepts(name, req, call("{}"))
    assert not _accepts(name, req, call('{"currentTime": "noon"}'))
    # below strict level full the arguments are any object, as documented
    names = TurnRequest(tools=(Tool("now"),), tool_choice="required", strict_level="names")
    assert _accepts(name, names, call('{"currentTime": "noon"}'))


@pytest.mark.parametrize("name", [n for n, f in FORMATS.items() if f.tool_calls is not None
                                  and f.tool_calls.layout == "json" and not _always_reasons(f)])
def test_json_layout_arguments_keep_the_parameters_root(name):
    """Where name and arguments are one JSON object, the parameters' root keywords (dialect,
    definitions) become the object's: a draft 4 tool (llguidance reads no `const` there)
    still pins its name, and a `$ref` key inside a `const` value is data, left as it is."""
    fmt = get_format(name)
    draft4 = Tool("lookup", {"$schema": "http://json-schema.org/draft-04/schema#",
                             "type": "object", "properties": {"q": {"type": "string"}}},
                  strict=True)
    pinned = Tool("pin", {"type": "object", "properties": {"ref": {"const": {"$ref": "#/x"}}},
                          "required": ["ref"], "additionalProperties": False}, strict=True)
    req = TurnRequest(tools=(draft4, pinned), tool_choice="required")

    def call(tool: str, arguments: dict) -> str:
        return _model_turn(fmt, req, {"role": "assistant", "tool_calls": [
            {"type": "function", "function": {"name": tool, "arguments": json.dumps(arguments)}}]})

    assert _accepts(name, req, call("lookup", {"q": "a"}))
    assert not _accepts(name, req, call("pin", {"q": "a"}))
    assert _accepts(name, req, call("pin", {"ref": {"$ref": "#/x"}}))


def test_hermes_is_qwen3_without_reasoning():
    """SmolLM2 under vLLM, offered qwen3's optional <think>, wrote one and spent its whole
    budget there: a model that does not reason gets a format without the block."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Tokyo?"}]
    tools = [WEATHER]
    assert render_prompt(get_format("hermes"), messages, tools) == \
        render_prompt(get_format("qwen3"), messages, tools)
    call = '<tool_call>\n{"name": "weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>'
    think = "<think>\nhm\n</think>\n\n"
    req = TurnRequest(tools=(WEATHER,), tool_choice="required")
    assert _accepts("hermes", req, call) and not _accepts("hermes", req, think + call)
    assert _accepts("qwen3", TurnRequest(tools=(WEATHER,), tool_choice="required",
                                         reasoning="on"), think + call)
    assert not _accepts("qwen3", req, think + call)  # qwen3 with reasoning off
    tok, _ = synthetic_tokenizer(get_format("hermes").special_tokens)
    with pytest.raises(ConstraintError, match="no reasoning block"):
        build_grammar(get_format("hermes"), TurnRequest(reasoning="required"), tok)


def _calls_turn(fmt, req: TurnRequest, n: int) -> str:
    calls = [{"id": f"functions.weather:{i}", "type": "function", "function": {  # Kimi's ids
        "name": "weather", "arguments": json.dumps({"city": f"C{i}"})}} for i in range(n)]
    return _model_turn(fmt, req, {"role": "assistant", "content": None, "tool_calls": calls})


# (formats whose turns always open with reasoning write the same calls after it: qwen3's case)
@pytest.mark.parametrize("name", [n for n, f in FORMATS.items() if f.tool_calls is not None
                                  and f.tool_calls.parallel and not _always_reasons(f)])
def test_parallel_calls_are_capped_by_the_guard(name):
    """max_parallel_calls bounds a turn's calls in the grammar (a repeating base model stops
    there, not at max_tokens); off, any number; one where parallel calls are not allowed."""
    fmt = get_format(name)
    tok, _ = synthetic_tokenizer(fmt.special_tokens)

    def accepts(req: TurnRequest, n: int, guards: Guards) -> bool:
        text = _calls_turn(fmt, req, n)
        opening = req.opening_in(fmt)
        lark = build_grammar(fmt, req, tok, guards=guards)
        m = GrammarCompiler(tok).compile(Lark(lark)).new_matcher()
        ids = tok.tokenize_str(text[len(opening):], parse_special=True)
        return m.accept_tokens(ids) and m.is_accepting()

    req = TurnRequest(tools=(WEATHER,), tool_choice="required", reasoning="off")
    assert accepts(req, 3, Guards(max_parallel_calls=3))
    assert not accepts(req, 4, Guards(max_parallel_calls=3))
    assert accepts(req, 12, Guards(max_parallel_calls=None))
    assert not accepts(req, 9, Guards())  # the default: 8
    one = TurnRequest(tools=(WEATHER,), tool_choice="required", reasoning="off",
                      parallel_tool_calls=False)
    assert accepts(one, 1, Guards()) and not accepts(one, 2, Guards(max_parallel_calls=None))
    with pytest.raises(ValueError, match="max_parallel_calls"):
        Guards(max_parallel_calls=0)
