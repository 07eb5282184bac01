"""Real model outputs from vLLM's tool-parser tests (tests/data/parser_variants.json): each is
read into the message vLLM's parser reads (unless `differs_from_vllm` says why kaname reads it
otherwise), whole and streamed, or refused with FormatParseError. None is read as another
answer: a call is never returned as content, a value never swallows a missing tag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from streaming import streamed

from kaname.errors import FormatParseError
from kaname.formats import get_format, parse, tools_from_openai

VARIANTS = json.loads((Path(__file__).parent / "data" / "parser_variants.json").read_text())


def _id(v: dict[str, Any]) -> str:
    return f"{v['format']}-{v['source'].rsplit('::', 1)[-1]}"


def _tools(v: dict[str, Any]) -> Any:
    return tools_from_openai(v["tools"]) if v.get("tools") else None


def test_the_variants_cover_the_formats_peers_test():
    assert {v["format"] for v in VARIANTS} >= {"qwen3_coder", "hermes", "glm45", "glm47",
                                              "deepseek_v31", "kimi_k2", "llama31"}
    assert sum("expected" in v for v in VARIANTS) >= 60


@pytest.mark.parametrize("v", [v for v in VARIANTS if "expected" in v], ids=_id)
def test_a_variant_is_read_as_vllm_reads_it(v):
    fmt, tools, want = get_format(v["format"]), _tools(v), v["expected"]
    calls = [(c["name"], c["arguments"]) for c in want["tool_calls"]]
    turn = parse(fmt, v["text"], tools=tools)
    assert (turn.reasoning_content, turn.content) == (want["reasoning_content"], want["content"])
    assert [(c.name, json.loads(c.arguments)) for c in turn.tool_calls] == calls
    for size in (1, 4, 16):
        msg = streamed(fmt, v["text"], size, tools)
        assert (msg["reasoning_content"], msg["content"]) == (want["reasoning_content"],
                                                              want["content"])
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in msg["tool_calls"]] == calls


@pytest.mark.parametrize("v", [v for v in VARIANTS if "refused" in v], ids=_id)
def test_a_variant_kaname_does_not_take_raises(v):
    fmt, tools = get_format(v["format"]), _tools(v)
    with pytest.raises(FormatParseError) as e:
        parse(fmt, v["text"], tools=tools)
    assert str(e.value).startswith(v["refused"])
    with pytest.raises(FormatParseError):
        streamed(fmt, v["text"], 3, tools)
