"""Walking a compiled constraint over a value, as the instance tests of several suites do."""

from __future__ import annotations

import json
from typing import Any


def accepts(tokenizer: Any, compiled: Any, value: Any) -> bool:
    """Whether the matcher takes `json.dumps(value)` (kaname's layout) token by token and
    may stop there."""
    m = compiled.new_matcher()
    text = json.dumps(value, ensure_ascii=False)
    return bool(m.accept_tokens(tokenizer.tokenize_str(text)) and m.is_accepting())
