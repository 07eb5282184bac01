"""kaname's exceptions, all of them (the server's `APIError` included).

    KanameError
     ├── ConstraintError             the constraint a caller gave cannot be enforced (HTTP 400)
     │    ├── InvalidSchemaError     not a valid JSON Schema (names the JSON pointer)
     │    ├── UnsupportedSchemaError valid, but a keyword cannot be enforced under strict mode
     │    ├── InvalidRegexError
     │    ├── InvalidGrammarError    Lark grammar or choice list does not compile
     │    └── GrammarTooComplexError a parser limit was hit while compiling or matching
     ├── RequestError                malformed input, or a field kaname cannot serve (400,
     │                               naming the JSON pointer of the field that was sent)
     ├── UnknownModelError           the request names a model this server does not serve (404)
     ├── ContextLengthError          the prompt does not fit the model's context (400)
     ├── FormatParseError            text that is not a turn of its chat format (only possible
     │                               when the grammar was off: strict_level "off"; 422)
     ├── NotEnforcedError            an upstream's text left the grammar it was sent (502)
     ├── ModelError                  the model could not be found, assembled or loaded
     └── server.errors.APIError      an HTTP answer the server itself decides (401, 413, 429,
                                     504...); the one table that maps the errors above to
                                     (status, code, param) is `server.errors.ERRORS`

Constraint errors carry `keyword` and `pointer` where they apply, so a server can answer
with an OpenAI-shaped 400 that says exactly what to change.
"""

from __future__ import annotations


class KanameError(Exception):
    """Base class of every error kaname raises on purpose."""


class ConstraintError(KanameError, ValueError):
    """The constraint cannot be enforced as given; fix the request."""

    def __init__(self, message: str, *, keyword: str | None = None, pointer: str | None = None):
        super().__init__(message)
        self.message = message
        self.keyword = keyword
        self.pointer = pointer

    def at(self, prefix: str, *, what: str = "") -> ConstraintError:
        """The same error with its pointer moved under `prefix` (where the constraint sat in a
        request, e.g. "/response_format/json_schema/schema"), in the message too; `what`
        names the thing the message is about (e.g. "tool 'search'")."""
        pointer = f"{prefix}{self.pointer or ''}"
        message = self.message
        if self.pointer:
            message = message.replace(f"'{self.pointer}'", f"'{pointer}'")
        return type(self)(f"{what}: {message}" if what else message, keyword=self.keyword,
                          pointer=pointer)


# A client's JSON text (a past call's arguments) nested past what Python's parser reads.
TOO_DEEP = "tool call arguments are nested too deeply to read (past Python's recursion limit)"


class RequestError(KanameError, ValueError):
    """The request is malformed, or asks for something kaname cannot serve; `pointer` is
    where in the body that was sent. `code`: the wire code (invalid_request,
    unsupported_parameter...)."""

    def __init__(self, message: str, *, pointer: str | None = None,
                 code: str = "invalid_request"):
        super().__init__(message)
        self.message = message
        self.pointer = pointer
        self.code = code


class UnknownModelError(KanameError):
    """The request names a model this server does not serve."""

    def __init__(self, model: str, served: str):
        super().__init__(f"The model `{model}` does not exist; this server serves "
                         f"`{served}`.")
        self.model = model


class InvalidSchemaError(ConstraintError):
    """The JSON Schema itself is invalid (fails its metaschema or does not compile)."""


class UnsupportedSchemaError(ConstraintError):
    """The schema uses a keyword the grammar engine cannot enforce; use strict=False to relax."""


class InvalidRegexError(ConstraintError):
    """The regular expression does not parse."""


class InvalidGrammarError(ConstraintError):
    """The Lark grammar (or choice list) does not compile."""


class GrammarTooComplexError(ConstraintError):
    """Compiling or matching the grammar exceeded a parser limit; simplify the constraint."""


class ContextLengthError(KanameError, ValueError):
    """The prompt and the requested completion do not fit the model's context window."""

    def __init__(self, context: int, prompt_tokens: int, max_tokens: int):
        super().__init__(
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages or "
            "the completion.")
        self.context = context
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.param: str | None = None  # the request field to shorten, where a server knows it


class FormatParseError(KanameError):
    """The text is not a turn of this format (possible only when the grammar was off)."""


class NotEnforcedError(KanameError):
    """The upstream's text is not in the language of the grammar it was sent."""


class ModelError(KanameError):
    """The model could not be located, assembled or loaded."""
