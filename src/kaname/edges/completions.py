"""OpenAI's (legacy) completions at the edge: a raw prompt and one constraint, in whichever
spelling the request uses (OpenAI's response_format, vLLM's structured_outputs or guided_*,
SGLang's ebnf). Not a chat turn: the text comes back as generated."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ..errors import ConstraintError, RequestError
from ..grammar import Constraint, to_constraint
from .chat import ResponseFormat
from .common import (
    BudgetOut,
    DraftCounts,
    Loose,
    NotEnforcedOut,
    Refused,
    SamplingFields,
    Wire,
    refuse,
)

# Fields that would change what the client gets back, which kaname does not serve (README,
# "Field policy"): a 400 naming them, unless they ask for nothing.
REFUSED = (
    Refused("n", "several choices are not served; send n requests", (None, 1)),
    Refused("best_of", "several candidates are not generated; leave best_of unset or 1",
            (None, 1)),
    Refused("echo", "the prompt is not echoed back by this server"),
    Refused("suffix", "insertion (text after the completion) is not supported", (None, "")),
    Refused("logprobs", "log probabilities are not returned by this server"),
    Refused("logit_bias", "token biases are not applied by this server", (None, {})),
)


class StructuredOutputs(Loose):
    """vLLM's `structured_outputs` (one of them)."""

    json_: dict[str, Any] | str | bool | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None


class CompletionRequest(SamplingFields):
    prompt: str | list[str] = ""
    response_format: ResponseFormat | dict[str, Any] | None = None
    structured_outputs: StructuredOutputs | None = None
    # vLLM's older spelling of the same thing
    guided_grammar: str | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    # SGLang's name for a grammar (llguidance reads Lark or GBNF from it)
    ebnf: str | None = None
    # vLLM's: each choice (each streamed chunk) also carries the ids of its tokens
    return_token_ids: bool = False
    allow_unenforced: bool = False

    def refuse(self) -> None:
        """A 400 naming the first field set to something kaname does not serve."""
        refuse(self, REFUSED)

    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise RequestError("exactly one prompt per request", pointer="/prompt")
        return self.prompt[0]

    def constraint(self) -> tuple[Constraint, str]:
        """The one constraint this request gives, in whichever spelling it uses (OpenAI's
        response_format, vLLM's structured_outputs or guided_*, SGLang's ebnf), and the
        pointer of the field it came from ("" where none is given); errors point there."""
        given: list[tuple[str, Any]] = []
        rf = self.response_format
        if rf is not None:
            given.append(("response_format", rf.model_dump(by_alias=True, exclude_none=True)
                          if isinstance(rf, BaseModel) else rf))
        so = self.structured_outputs
        if so is not None:
            for name, kind, value in (("json", None, so.json_), ("regex", "regex", so.regex),
                                      ("choice", "choice", so.choice),
                                      ("grammar", "grammar", so.grammar)):
                if value is not None:
                    given.append((f"structured_outputs/{name}",
                                  value if kind is None else {"type": kind, kind: value}))
            if so.json_object:
                given.append(("structured_outputs/json_object", {"type": "json_object"}))
        for name, kind in (("guided_json", None), ("guided_regex", "regex"),
                           ("guided_choice", "choice"), ("guided_grammar", "grammar"),
                           ("ebnf", "grammar")):
            value = getattr(self, name)
            if value is not None:
                given.append((name, value if kind is None else {"type": kind, kind: value}))
        if len(given) > 1:
            raise ConstraintError("give one constraint: " + ", ".join(n for n, _ in given),
                                  pointer=f"/{given[1][0]}")
        if not given:
            return to_constraint(None), ""
        name, value = given[0]
        try:
            return to_constraint(value), f"/{name}"
        except ConstraintError as e:
            raise e.at(f"/{name}") from e


# ---- the answer's shape, as /openapi.json documents it ---------------------------------------

class CompletionChoice(Wire):
    index: int
    text: str
    finish_reason: Literal["stop", "length"] | None  # None in a stream's chunks before the last
    logprobs: None
    token_ids: list[int] | None = None  # with return_token_ids


class CompletionUsage(DraftCounts):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionReport(Wire):
    """The `kaname` object of a completion: its one constraint, and what was enforced."""

    grammar_hash: str
    constraint: str
    not_enforced: list[NotEnforcedOut]
    caps: dict[str, Any]
    budget: BudgetOut
    enforced: bool


class Completion(Wire):
    """The body of a completion (`stream` false)."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage
    kaname: CompletionReport


class CompletionChunk(Wire):
    """One event of a streamed completion: text, then the finish, then usage (no choices)
    where `stream_options.include_usage` asked for it."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage | None = None
