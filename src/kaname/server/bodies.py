"""A POST route's body, read, parsed and validated into its request model: inline when small,
on a worker (workers.py) under the request's deadline when large.

FastAPI parses a body declared in a route's signature (`req: Model`) on the event loop: a
3.7 MB body of 60,000 one-part messages costs ~0.16 s of `json.loads` and ~0.6 s of
validation there, during which /health and every stream stall. The routes read it here
instead, and every answer stays FastAPI's: the same content-type rule (JSON only under
`application/json` or `+json`; anything else is validated as raw bytes and refused), and the
same errors, `RequestValidationError`s located under "body" that the app's handler renders in
the API's shape (`json_invalid`, `missing`, the model's own, the lone-surrogate check
included), or the 400 "There was an error parsing the body" (the 413 of limits.py where the
body was too large).

A worker shares the GIL with the event loop, which gets it back only between Python steps.
Two things would hold it long on a large body: `json.loads`, one C call (~90 ms for that body),
so a worker's parse calls back into Python for every object (`_object`: ~15% slower, the loop
waits ~20 ms at most); and Python's cyclic garbage collector, which the hundreds of thousands
of new objects trigger again and again, each time walking the whole heap (~75% of the
validation's time, in pauses of ~0.1 s), paused while a large body is built: JSON values and
request models hold no cycles to collect.
"""

from __future__ import annotations

import email.message
import gc
import json
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from .turn import Turns

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

# Bodies below this are parsed on the event loop. Measured: the hop to a worker and back costs
# ~0.1 ms, as much as parsing 32 KiB of one long text; 32 KiB of many small values costs
# ~0.8 ms (text parts) to ~1.5 ms (one-part messages, the costliest shape). Below it the loop
# is held ~1 ms at most, and the hop would cost a text body more than its parse
# (docs/benchmarks.md, "Parsing request bodies off the event loop").
INLINE_BELOW = 32 * 1024

_UNREADABLE = "There was an error parsing the body"  # FastAPI's words


async def read_body(request: Request, model: type[M], turns: Turns) -> M:
    """`request`'s body as a `model`, or the 400 (413) FastAPI would have answered for it."""
    try:
        raw = await request.body()
    except Exception as e:  # too large (limits.py flags it: a 413), the client gone
        raise HTTPException(400, _UNREADABLE) from e
    content_type = request.headers.get("content-type")
    if len(raw) < INLINE_BELOW:
        return parse(model, raw, content_type)
    return await turns.off_loop(turns.deadline(request), lambda: _uncollected(
        lambda: parse(model, raw, content_type, loads=_loads_yielding)))


def parse(model: type[M], raw: bytes, content_type: str | None,
          loads: Callable[[bytes], Any] = json.loads) -> M:
    """`raw` as a `model`, as FastAPI reads a body parameter (fastapi/routing.py's request
    handler, its `strict_content_type` on): errors located under "body". `loads`: JSON's
    parser, `json.loads` or one that gives the GIL back as it goes."""
    if not raw:
        raise RequestValidationError(
            [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    body: Any = raw  # not JSON by its content type: validated as bytes, and refused
    if _is_json(content_type):
        try:
            body = loads(raw)
        except json.JSONDecodeError as e:
            raise RequestValidationError(
                [{"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error",
                  "input": {}, "ctx": {"error": e.msg}}], body=e.doc) from e
        except Exception as e:  # not UTF-8/16/32 text, nested too deep
            raise HTTPException(400, _UNREADABLE) from e
    try:
        return model.model_validate(body, from_attributes=True)
    except ValidationError as e:
        raise RequestValidationError(
            [{**error, "loc": ("body", *error["loc"])} for error in e.errors(include_url=False)],
            body=body) from e


def _uncollected(work: Callable[[], T]) -> T:
    """`work()` with the cyclic garbage collector paused (process-wide: a concurrent parse
    that ends first turns it back on, which costs the other time, nothing else). An exception
    at any instruction (workers.py's `Abandoned`) leaves it on."""
    was_on = gc.isenabled()
    try:
        gc.disable()
        return work()
    finally:
        if was_on:
            gc.enable()


def _loads_yielding(raw: bytes) -> Any:
    """`json.loads(raw)`, the same values, with a Python call per object: a point where a
    thread waiting for the GIL (the event loop's) gets it."""
    return json.loads(raw, object_pairs_hook=_object)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(pairs)  # the last of repeated keys wins, as in json.loads' own objects


def _is_json(content_type: str | None) -> bool:
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json"))
