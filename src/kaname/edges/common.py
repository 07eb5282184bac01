"""What every edge reads the same way: kaname's own request options, sampling, the field
policy's "ignored" list and its refused fields, the checks every body passes (valid Unicode,
tool names as the real APIs allow them), and pydantic errors as a pointer into the body that
was sent."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from ..decoding.generation import Usage
from ..errors import RequestError
from ..formats.request import CUSTOM_INPUT, Ignored, Sampling, Tool
from ..grammar import Guards, Lark, Regex, Text

M = TypeVar("M", bound=BaseModel)


class Loose(BaseModel):
    """A wire model: fields the API defines that kaname does not read are kept (extra) so the
    edge can list them in `kaname.ignored`, never refuse them."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


# Tool names as the real APIs validate them: OpenAI's (chat and Responses function and custom
# tools, namespaces) and Anthropic's Messages API (its answer to a bad name: "tools.16.custom.
# name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'"). A name is echoed into
# tool_calls and into prompts: NUL, newlines or escapes there are never a tool's name.
OPENAI_TOOL_NAME = r"^[a-zA-Z0-9_-]{1,64}$"
ANTHROPIC_TOOL_NAME = r"^[a-zA-Z0-9_-]{1,128}$"
OpenAIToolName = Annotated[str, Field(pattern=OPENAI_TOOL_NAME)]
AnthropicToolName = Annotated[str, Field(pattern=ANTHROPIC_TOOL_NAME)]


def check_tool_name(name: Any, at: str) -> str:
    """`name` (at the pointer `at`) where it is an OpenAI tool name; a 400 otherwise (for
    bodies read by hand rather than by a pydantic model)."""
    if not isinstance(name, str) or not re.fullmatch(OPENAI_TOOL_NAME.strip("^$"), name):
        raise RequestError(f"a tool name matches the pattern '{OPENAI_TOOL_NAME}'",
                           pointer=at)
    return name


def escape_pointer(step: str | int) -> str:
    """One step of a JSON pointer (RFC 6901)."""
    return str(step).replace("~", "~0").replace("/", "~1")


def lone_surrogate(body: Any) -> tuple[str, str] | None:
    """(pointer, what) of the first string in `body` (keys included) holding a lone UTF-16
    surrogate (`"\\ud800"` is valid JSON, but not Unicode text a tokenizer can read); None
    where there is none. Whether there is one is asked of the C encoder; only a body that has
    one is walked, to name it (scripts/bench_surrogate_check.py)."""
    try:
        text = _dumps(body)
    except (TypeError, ValueError):  # not JSON data (Python callers): walk it all
        return _find_surrogate(body, 0)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _find_surrogate(body, 4 * len(text))
    return None


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, check_circular=False)


def _find_surrogate(body: Any, budget: int) -> tuple[str, str] | None:
    """Breadth first, iterative (no depth limit); each entry is (value, its parent's entry,
    its key), and a pointer is built only for the string found. A wide container is first
    narrowed by asking the C encoder which slice of it holds the surrogate, while `budget`
    (characters encoded) lasts: a body of 800k small values is named in a fraction of the
    time of a walk over every value."""
    entries: list[tuple[Any, int, str | int]] = [(body, -1, "")]
    i = 0
    while i < len(entries):
        node = entries[i][0]
        keys: Sequence[str | int] = ()
        values: Sequence[Any] = ()
        if isinstance(node, str):
            if _has_surrogate(node):
                return _pointer(entries, i), "the string"
        elif isinstance(node, Mapping):
            if any(isinstance(key, str) and _has_surrogate(key) for key in node):
                return _pointer(entries, i), "a key of the object"
            keys, values = list(node), list(node.values())
        elif isinstance(node, list | tuple):
            keys, values = range(len(node)), node
        start, stop = 0, len(values)
        if stop > 16 and budget > 0:
            step = max(16, math.isqrt(stop))
            for k in range(0, stop, step):
                try:
                    text = _dumps(values[k:k + step])
                except (TypeError, ValueError):  # not JSON data: cannot say, walk it
                    start, stop = k, k + step
                    break
                budget -= len(text)
                if _has_surrogate(text):
                    start, stop = k, k + step  # the first slice that holds it
                    break
            else:
                start = stop  # none below this node
        entries += [(values[k], i, keys[k]) for k in range(start, min(stop, len(values)))]
        i += 1
    return None


def _pointer(entries: Sequence[tuple[Any, int, str | int]], i: int) -> str:
    steps = []
    while entries[i][1] >= 0:
        steps.append(escape_pointer(entries[i][2]))
        i = entries[i][1]
    return "/" + "/".join(reversed(steps)) if steps else "/"


def _has_surrogate(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class Refused:
    """A field the API defines whose meaning kaname cannot serve and that would change what
    the client gets back (logprobs, several choices, an echoed prompt...): a 400
    `unsupported_parameter` naming it, unless its value is one that asks for nothing."""

    def __init__(self, name: str, why: str, fine: tuple[Any, ...] = (None, False)):
        self.name, self.why, self.fine = name, why, fine

    def check(self, body: BaseModel, at: str = "") -> None:
        value = getattr(body, self.name, None)  # declared, or kept as an extra
        if not any(value is f or (type(value) is type(f) and value == f) for f in self.fine):
            raise RequestError(self.why, pointer=f"{at}/{self.name}",
                               code="unsupported_parameter")


def refuse(body: BaseModel, refused: Sequence[Refused], at: str = "") -> None:
    """A 400 for the first field of `refused` that `body` sets to something kaname cannot
    serve."""
    for r in refused:
        r.check(body, at)


class RequestBody(Loose):
    """A whole request body (every API's): its text must be Unicode (no lone surrogates),
    checked once, before any field is read."""

    @model_validator(mode="before")
    @classmethod
    def _unicode(cls, data: Any) -> Any:
        found = lone_surrogate(data)
        if found is not None:
            pointer, what = found
            raise PydanticCustomError(
                "lone_surrogate", "{what} at {pointer} holds a lone UTF-16 surrogate (an "
                "unpaired \\ud800-\\udfff escape), which is not Unicode text; send valid text",
                {"pointer": pointer, "what": what.capitalize()})
        return data


@dataclass(frozen=True)
class DocumentedAs:
    """`Annotated[T, DocumentedAs(D)]`: a field validated as `T` and documented (in
    /openapi.json) as `D`. For fields an edge reads by hand, so that its errors name the exact
    pointer and agents' bodies are not refused by a stricter union, while clients and fuzzers
    still see the shape the API defines."""

    doc: Any

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> CoreSchema:
        doc = handler.generate_schema(self.doc)
        return core_schema.no_info_after_validator_function(
            lambda v: v, handler(source),
            metadata={"pydantic_js_annotation_functions": [lambda _c, h: h(doc)]},
            # keeps `doc` in the schema tree, so its models land in the document's components
            serialization=core_schema.wrap_serializer_function_ser_schema(
                lambda v, _h: v, schema=doc))


class GuardsIn(BaseModel):
    """Runaway guards for this request (kaname's; see Guards). Unset fields keep the server's
    defaults; null turns a guard off."""

    model_config = ConfigDict(extra="forbid")

    separators: tuple[str, str] | None = None
    max_whitespace: int | None = Field(default=None, ge=0, le=64)
    separator_space: int | None = Field(default=None, ge=0, le=4)
    max_integer_digits: int | None = Field(default=None, ge=1, le=308)
    max_fraction_digits: int | None = Field(default=None, ge=0, le=300)
    max_string_length: int | None = Field(default=None, ge=1)
    max_array_items: int | None = Field(default=None, ge=1)
    max_depth: int | None = Field(default=None, ge=1, le=32)
    max_parallel_calls: int | None = Field(default=None, ge=1, le=1024)

    @field_validator("separators")
    @classmethod
    def _json_separators(cls, v: tuple[str, str] | None) -> tuple[str, str] | None:
        # anything else would make the output not JSON
        if v is not None and not (re.fullmatch(r"[ \t\n\r]*,[ \t\n\r]*", v[0])
                                  and re.fullmatch(r"[ \t\n\r]*:[ \t\n\r]*", v[1])):
            raise ValueError('separators are [",", ":"] with optional JSON whitespace around')
        return v

    def over(self, default: Guards) -> Guards:
        return dataclasses.replace(default, **self.model_dump(exclude_unset=True))


class KanameOptions(BaseModel):
    """The request's `kaname` object (every API)."""

    model_config = ConfigDict(extra="forbid")

    guards: GuardsIn | None = None
    # false: decode this request one token per model call (drafts never change the answer;
    # this is for measuring, or distrust)
    draft: bool = True

    def guard_overrides(self) -> dict[str, Any]:
        return self.guards.model_dump(exclude_unset=True) if self.guards is not None else {}


class StreamOptions(Loose):
    include_usage: bool = False


# vLLM's truncations, which OpenAI's APIs lack (vLLM takes them on all three): top_k 0 or -1
# keeps every token, else the k likeliest; min_p keeps the tokens at least min_p times as
# likely as the likeliest.
TopK = Annotated[int | None, Field(ge=-1)]
MinP = Annotated[float | None, Field(ge=0.0, le=1.0)]


class SamplingFields(RequestBody):
    """What OpenAI's chat and (legacy) completions requests share: model, budget, sampling,
    streaming, and kaname's own options."""

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: TopK = None
    min_p: MinP = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int | None = Field(default=None, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    kaname: KanameOptions | None = None

    def to_sampling(self) -> Sampling:
        return sampling(self.temperature, self.top_p, self.seed, self.stop, top_k=self.top_k,
                        min_p=self.min_p)


def read(model: type[M], raw: Any, at: str = "") -> M:
    """`raw` read by `model`; a RequestError naming the pointer (under `at`) of what failed."""
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        pointer = at + (error_pointer(first, raw) or "")
        message = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
        if pointer and pointer in message:
            raise RequestError(message, pointer=pointer) from None
        raise RequestError(f"{message} at {pointer or '/'}", pointer=pointer or None) from None


def error_pointer(error: Mapping[str, Any], body: Any) -> str | None:
    """The JSON pointer of one pydantic error into `body`: the one a check named itself (its
    context's `pointer`), else where the error's location leads."""
    named = (error.get("ctx") or {}).get("pointer")
    if isinstance(named, str):
        return named
    return pointer_of(error.get("loc", ()), body)


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}  # pydantic's union tags


def pointer_of(loc: Sequence[Any], body: Any) -> str | None:
    """The JSON pointer into `body` of a pydantic error location. Pydantic puts the names of
    union members and validators into locations (`tools/0/ToolDef/function`); only the steps
    that exist in the body are kept."""
    parts: list[str] = []
    node = body
    for step in loc:
        if isinstance(node, Mapping) and isinstance(step, str) and step in node:
            node = node[step]
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            node = node[step]
        elif isinstance(node, Mapping | list):
            # a key the body lacks (a missing required field) ends the pointer there
            if isinstance(step, str) and step.isidentifier() and step[:1].islower() \
                    and step not in _TYPE_TAGS and isinstance(node, Mapping):
                parts.append(step)
                break
            continue
        else:
            break
        parts.append(escape_pointer(step))
    return "/" + "/".join(parts) if parts else None


def extras(model: BaseModel, at: str = "") -> list[Ignored]:
    """The fields of `model` kaname does not read, as the field policy reports them."""
    return [Ignored(f"{at}/{name}", "not used by kaname") for name in model.model_extra or {}]


def sampling(temperature: float | None, top_p: float | None, seed: int | None,
             stop: str | Sequence[str] | None, *, top_k: int | None = None,
             min_p: float | None = None) -> Sampling:
    """Sampling as the APIs default it (temperature 1, no truncation; top_k -1 is 0, off).
    Any integer is a seed (OpenAI takes negative ones); numpy wants 0 <= seed < 2**64."""
    stops = [] if stop is None else [stop] if isinstance(stop, str) else list(stop)
    return Sampling(1.0 if temperature is None else temperature, top_p or 1.0,
                    max(top_k or 0, 0), min_p or 0.0, None if seed is None else seed % 2**64,
                    tuple(s for s in stops if s))


# A custom tool is shown to the model as a function of one string argument (`CUSTOM_INPUT`).
_CUSTOM_PARAMETERS: dict[str, Any] = {
    "type": "object", "properties": {CUSTOM_INPUT: {"type": "string"}},
    "required": [CUSTOM_INPUT], "additionalProperties": False}


def custom_tool(name: str, description: str | None, syntax: str | None,
                definition: str | None, at: str) -> Tool:
    """OpenAI's custom tool: free text (`syntax` None), or text in a Lark or regex grammar;
    `at`: where its format sat."""
    grammar: Lark | Regex | Text
    text = description or ""
    if syntax is None:
        grammar, schema_at = Text(), at
    else:
        if definition is None:
            raise RequestError("a grammar format needs its definition", pointer=at)
        grammar = Lark(definition) if syntax == "lark" else Regex(definition)
        schema_at = f"{at}/definition"
        # prompts show the tool as a function of its one string argument: the model learns
        # the input's grammar from the description
        text = (f"{text}\n\n" if text else "") + (
            f"`{CUSTOM_INPUT}` is text in this {syntax} grammar:\n{definition}")
    return Tool(name, _CUSTOM_PARAMETERS, text, strict=True, grammar=grammar,
                schema_at=schema_at)


# ---- what every edge's answer carries (documented in /openapi.json) --------------------------

class Wire(BaseModel):
    """A body (or event) the server sends, as /openapi.json documents it. The edges build their
    answers as dicts; tests/test_openapi_conformance.py holds the two together. Open: new
    fields may appear, as in the APIs kaname follows."""

    model_config = ConfigDict(extra="allow")


class DraftCounts(Wire):
    """kaname's extension of every API's usage: how the output was decoded."""

    forced_tokens: int  # the grammar forced them (the model still chose each)
    draft_tokens: int  # proposed as drafts (forced bytes, prompt n-grams) and checked
    draft_accepted: int  # of those, chosen by the model: produced without a step each


def draft_counts(u: Usage) -> dict[str, int]:
    """The `DraftCounts` of a usage, for every API's usage object."""
    return {"forced_tokens": u.forced_tokens, "draft_tokens": u.draft_tokens,
            "draft_accepted": u.draft_accepted}


class NotEnforcedOut(Wire):
    """A schema keyword the grammar does not enforce (post-checked instead)."""

    keyword: str
    pointer: str


class IgnoredOut(Wire):
    """A field the API defines that kaname accepted without acting on it."""

    pointer: str
    reason: str


class CallVerdict(Wire):
    """The post-check of one tool call's arguments (None: nothing checked)."""

    id: str | None
    name: str | None
    valid: bool | None


class BudgetOut(Wire):
    """The output budget the request asked for, and the one served."""

    asked: int | None
    served: int


class TurnReport(Wire):
    """The `kaname` object of a turn's answer (chat, Responses, Messages): what was enforced
    and what the post-checks found."""

    format: str
    strict_level: Literal["full", "names", "off"]
    not_enforced: list[NotEnforcedOut]
    guards: dict[str, Any] | None
    content_valid: bool | None
    tool_calls_valid: list[CallVerdict]
    ignored: list[IgnoredOut]
    enforced: bool
    not_enforced_reason: str | None
    grammar_hash: str
    budget: BudgetOut
    reasoning_tokens: int
