"""A model's own Jinja chat template, rendered as transformers renders it.

`render_template` takes an OpenAI messages list (and tools) and a template string;
`chat_template_from_gguf` reads `tokenizer.chat_template` from a GGUF file's metadata (None when
the file has none, as the embedded Gemma GGUF: the format's spec renders the prompt then).
The environment matches transformers' `apply_chat_template`: a sandbox, `trim_blocks` and
`lstrip_blocks`, `loopcontrols`, `{% generation %}` blocks, `tojson` keeping key order with
`json.dumps`' default separators, `raise_exception` and `strftime_now`; message keys whose value
is None are dropped and `reasoning_content` is also offered as `thinking` (gpt-oss reads it).
"""

from __future__ import annotations

import datetime
import functools
import json
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import ConstraintError, ModelError
from .request import Tool


def render_template(template: str, messages: Sequence[Mapping[str, Any]],
                    tools: Sequence[Tool | Mapping[str, Any]] = (), *,
                    add_generation_prompt: bool = True, bos_token: str = "",
                    eos_token: str = "", **kwargs: Any) -> str:
    """The prompt `template` makes of `messages` (extra template variables in `kwargs`).

    A template that rejects the conversation (`raise_exception`, or a Jinja error) raises
    ConstraintError with the template's message."""
    import jinja2

    msgs = []
    for m in messages:
        msg = {k: v for k, v in m.items() if v is not None}
        if "reasoning_content" in msg and "thinking" not in msg:
            msg["thinking"] = msg["reasoning_content"]
        msgs.append(msg)
    tool_defs = [t.to_openai() if isinstance(t, Tool) else dict(t) for t in tools] or None
    try:
        return _compile(template).render(
            messages=msgs, tools=tool_defs, add_generation_prompt=add_generation_prompt,
            bos_token=bos_token, eos_token=eos_token, **kwargs)
    except (jinja2.TemplateError, TypeError, ValueError, AttributeError, KeyError,
            IndexError) as e:
        # a template's own failure on a conversation it was not written for (Hermes-2-Pro's
        # iterates over `tools` without a check: TypeError with none) is the template's
        # answer to this request, not a server error
        raise ConstraintError(f"the chat template refused the conversation: {e}",
                              pointer="/messages") from e


def check_template(template: str) -> None:
    """ConstraintError where `template` does not parse as Jinja."""
    _compile(template)


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> Any:
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """`{% generation %}…{% endgeneration %}` marks assistant text for training masks;
        rendering keeps the body."""

        tags = {"generation"}  # noqa: RUF012 - jinja2 types it as a plain set[str]

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body).set_lineno(lineno)

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as e:
        raise ConstraintError(f"the chat template does not parse: {e}") from e


# GGUF metadata value types (gguf.GGUFValueType)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def chat_template_from_gguf(path: str | Path, name: str = "tokenizer.chat_template"
                            ) -> str | None:
    """`tokenizer.chat_template` (or another string key) from a GGUF's metadata; None if the
    file has none. Reads the header only, not the weights."""
    return gguf_strings(path, (name,)).get(name)


def gguf_strings(path: str | Path, names: Sequence[str]) -> dict[str, str]:
    """The string values of the metadata keys `names` that a GGUF's header holds."""
    wanted, found = set(names), {}
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                raise ModelError(f"{path} is not a GGUF file")
            version, _tensors, count = struct.unpack("<IQQ", f.read(20))
            if version < 2:
                raise ModelError(f"{path}: GGUF version {version} is not supported")
            for _ in range(count):
                key = _string(f)
                kind = _unpack(f, "<I")
                if key in wanted and kind == _STRING:
                    found[key] = _string(f)
                    if len(found) == len(wanted):
                        break
                else:
                    _skip(f, kind)
    except (OSError, struct.error, UnicodeDecodeError) as e:
        raise ModelError(f"cannot read the GGUF metadata of {path}: {e}") from e
    return found


def _unpack(f: BinaryIO, fmt: str) -> Any:
    return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]


def _string(f: BinaryIO) -> str:
    return f.read(_unpack(f, "<Q")).decode("utf-8")


def _skip(f: BinaryIO, kind: int) -> None:
    if kind in _SCALARS:
        f.seek(struct.calcsize(_SCALARS[kind]), 1)
    elif kind == _STRING:
        f.seek(_unpack(f, "<Q"), 1)
    elif kind == _ARRAY:
        item, n = struct.unpack("<IQ", f.read(12))
        if item in _SCALARS:
            f.seek(n * struct.calcsize(_SCALARS[item]), 1)
        else:
            for _ in range(n):
                _skip(f, item)
    else:
        raise ModelError(f"unknown GGUF metadata type {kind}")
