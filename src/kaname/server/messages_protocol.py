"""The request bodies of Anthropic's Messages API, as pydantic models (they also make the OpenAPI
schema of /v1/messages).

Content blocks stay plain dicts here: each is read by its own model in messages_api (`BLOCKS`),
so that an error points at the block (`/messages/0/content/1/...`) without the tags pydantic
writes into the location of a union. Unknown fields are ignored, as on the OpenAI side.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


def _as_blocks(value: Any) -> Any:
    """A string is one text block (Anthropic takes either for message and system content)."""
    return [{"type": "text", "text": value}] if isinstance(value, str) else value


def _invalid(message: str) -> PydanticCustomError:
    # (a ValueError's message would read "Value error, ...")
    return PydanticCustomError("value_error", message)


# ---- content blocks (read one at a time, see messages_api._block) ---------------------------

class TextBlockIn(_Loose):
    type: Literal["text"]
    text: str


class ThinkingBlockIn(_Loose):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None  # kaname's own are not checked: it has nothing to verify


class RedactedThinkingBlockIn(_Loose):
    type: Literal["redacted_thinking"]
    data: str = ""


class ToolUseBlockIn(_Loose):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class ToolResultBlockIn(_Loose):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: list[dict[str, Any]] = Field(default_factory=list)
    is_error: bool = False

    @field_validator("content", mode="before")
    @classmethod
    def _blocks(cls, v: Any) -> Any:
        return _as_blocks(v)


class ToolIn(_Loose):
    """A client tool (`type` absent or "custom"); server tools (web search, bash, ...) are
    refused by messages_api before this model reads them."""

    type: Literal["custom"] | None = None
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    input_schema: dict[str, Any]
    strict: bool | None = None

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, v: dict[str, Any]) -> dict[str, Any]:
        # a tool's input is an object (tool_use.input); Anthropic refuses anything else too
        if v.get("type", "object") != "object":
            raise _invalid('input_schema must have type "object"')
        return v


# ---- the request ---------------------------------------------------------------------------

class MessageIn(_Loose):
    role: Literal["user", "assistant"]
    content: list[dict[str, Any]]

    @field_validator("content", mode="before")
    @classmethod
    def _blocks(cls, v: Any) -> Any:
        return _as_blocks(v)


class ToolChoiceIn(_Loose):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _named(self) -> ToolChoiceIn:
        if self.type == "tool" and not self.name:
            raise _invalid('tool_choice of type "tool" needs the tool\'s name')
        return self


class ThinkingIn(_Loose):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=1)
    display: Literal["summarized", "omitted"] | None = None

    @model_validator(mode="after")
    def _budget(self) -> ThinkingIn:
        if self.type == "enabled" and self.budget_tokens is None:
            raise _invalid('thinking of type "enabled" needs budget_tokens')
        return self


class OutputFormatIn(_Loose):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")
    # kaname's: Anthropic's structured outputs are always strict (a schema that cannot be
    # enforced fully is a 400); false enforces what can be and post-checks the rest
    strict: bool = True


class OutputConfigIn(_Loose):
    format: OutputFormatIn | None = None
    effort: str | None = None  # accepted, ignored (reported in kaname.ignored)


class CountTokensRequest(_Loose):
    """`POST /v1/messages/count_tokens`: a Messages request without max_tokens."""

    model: str
    messages: list[MessageIn] = Field(min_length=1)
    system: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoiceIn | None = None
    thinking: ThinkingIn | None = None
    output_config: OutputConfigIn | None = None
    output_format: OutputFormatIn | None = None  # the structured-outputs beta's spelling
    # kaname's extensions, with their chat-completions meaning
    strict_level: Literal["full", "names", "off"] | None = None
    allow_unenforced: bool = False
    kaname: dict[str, Any] | None = None

    @field_validator("system", mode="before")
    @classmethod
    def _blocks(cls, v: Any) -> Any:
        return _as_blocks(v)


class MessagesRequest(CountTokensRequest):
    """`POST /v1/messages`."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)  # accepted, ignored: kaname samples without
    metadata: dict[str, Any] | None = None
    stream: bool = False
    seed: int | None = None  # kaname's (Anthropic has none): the same seed, the same answer
    mcp_servers: list[Any] | None = None  # Anthropic's MCP connector: refused when given
