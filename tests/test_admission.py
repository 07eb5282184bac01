"""The token budget of a request (server/admission.py): what it asked for within the server's
limit and the model's context, or a ContextLengthError / 400 before anything is generated."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kaname.errors import ContextLengthError
from kaname.server.admission import token_budget
from kaname.server.errors import APIError, api_error


@given(prompt=st.integers(0, 5000), asked=st.none() | st.integers(1, 9000),
       default=st.integers(1, 2048), limit=st.integers(1, 8192),
       n_ctx=st.none() | st.integers(1, 4096))
def test_budget_fits_or_says_why(prompt, asked, default, limit, n_ctx):
    wanted = default if asked is None else asked
    try:
        value = token_budget(prompt, asked, default=default, limit=limit, n_ctx=n_ctx,
                             param="messages")
    except APIError as e:  # over the server's own limit
        assert wanted > limit and e.status == 400 and e.param == "max_tokens"
        return
    except ContextLengthError as e:
        assert wanted <= limit and n_ctx is not None
        assert e.prompt_tokens + e.max_tokens > n_ctx and e.prompt_tokens == prompt
        assert e.max_tokens == (asked if asked is not None else 1)  # unset: nothing left
        err = api_error(e)
        assert (err.status, err.code, err.param) == (400, "context_length_exceeded", "messages")
        return
    assert 1 <= value <= limit
    if n_ctx is not None:
        assert prompt + value <= n_ctx
    if asked is not None:
        assert value == asked
    else:  # unset: the default, or what is left of the context
        assert value == (default if n_ctx is None else min(default, n_ctx - prompt))


def test_prompt_alone_over_the_context():
    with pytest.raises(ContextLengthError, match="maximum context length is 4096 tokens"):
        token_budget(5001, None, default=16, limit=4096, n_ctx=4096, param="prompt")
