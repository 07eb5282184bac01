"""The token budget of a request (server/admission.py): what it asked for within the server's
limit and the model's context, or a ContextLengthError / 400 before anything is generated."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaname.errors import ContextLengthError
from kaname.server.admission import token_budget
from kaname.server.errors import api_error


@given(prompt=st.integers(0, 5000), asked=st.none() | st.integers(1, 200_000),
       default=st.integers(1, 2048), limit=st.integers(1, 8192),
       n_ctx=st.none() | st.integers(1, 4096))
def test_budget_fits_or_says_why(prompt, asked, default, limit, n_ctx):
    """A budget is served up to what fits (the server's limit, the context left); only a
    prompt that leaves no room at all is refused."""
    wanted = default if asked is None else asked
    try:
        value = token_budget(prompt, asked, default=default, limit=limit, n_ctx=n_ctx,
                             param="/messages")
    except ContextLengthError as e:
        assert n_ctx is not None and prompt >= n_ctx and e.prompt_tokens == prompt
        err = api_error(e)
        assert (err.status, err.code, err.param) == (400, "context_length_exceeded",
                                                     "/messages")
        return
    room = limit if n_ctx is None else min(limit, n_ctx - prompt)
    assert value == min(wanted, room) and value >= 1


def test_prompt_alone_over_the_context():
    with pytest.raises(ContextLengthError, match="maximum context length is 4096 tokens"):
        token_budget(5001, None, default=16, limit=4096, n_ctx=4096, param="prompt")
