"""Which model names a server answers to (`ServerConfig.served_names`, `accepts_model`) and
how `kaname serve`'s options set them."""

from __future__ import annotations

import pytest

from kaname.cli import build_parser
from kaname.server import ServerConfig


@pytest.mark.parametrize("config, names", [
    (ServerConfig(), ["gemma-3-270m"]),
    (ServerConfig(model="random"), ["random"]),
    (ServerConfig(model="scripted:tests/data/script.json"), ["scripted"]),
    (ServerConfig(model="/models/Qwen3-8B-Q4_K_M.gguf"), ["Qwen3-8B-Q4_K_M"]),
    (ServerConfig(upstream="http://u/v1", upstream_model="qwen3"), ["qwen3"]),
    (ServerConfig(served_model_names=("claude-sonnet-4-5", "gpt-5", "claude-sonnet-4-5")),
     ["claude-sonnet-4-5", "gpt-5"]),
])
def test_served_names_start_with_the_id(config, names):
    assert config.served_names() == names
    assert config.model_id() == names[0]


def test_every_served_name_and_default_are_accepted():
    config = ServerConfig(served_model_names=("a", "b"))
    assert all(config.accepts_model(n) for n in ("a", "b", "default"))
    assert not config.accepts_model("gemma-3-270m")  # the names given replace the own one
    assert not config.accepts_model("c")


def test_any_model_name_accepts_every_name():
    config = ServerConfig(any_model_name=True)
    assert config.accepts_model("claude-opus-4-1") and config.accepts_model("")
    assert config.served_names() == ["gemma-3-270m"]  # /v1/models still lists its own


def test_serve_options_set_the_names():
    from kaname.cli import _server_config

    args = build_parser().parse_args(["serve", "--model", "random", "--served-model-name",
                                      "m1", "m2", "--any-model-name"])
    config = _server_config(args)
    assert config.served_names() == ["m1", "m2"] and config.any_model_name
    config = _server_config(build_parser().parse_args(["serve", "--model", "random"]))
    assert config.served_names() == ["random"] and not config.any_model_name


def _ask(config: ServerConfig, names: list[str]) -> tuple[list[str], list[int]]:
    """(the ids /v1/models lists, the status of a chat request naming each of `names`)."""
    from fastapi.testclient import TestClient

    from kaname.cli import _runtime_for_format
    from kaname.server import build_app

    with TestClient(build_app(config, _runtime_for_format)) as client:
        ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
        statuses = [client.post("/v1/chat/completions", json={
            "model": name, "max_tokens": 2,
            "messages": [{"role": "user", "content": "hi"}]}).status_code for name in names]
    return ids, statuses


def test_the_server_answers_the_names_it_serves():
    config = ServerConfig(model="random", format="qwen3", served_model_names=("m1", "m2"))
    assert _ask(config, ["m1", "m2", "default", "random", "claude-x"]) == (
        ["m1"], [200, 200, 200, 404, 404])
    config = ServerConfig(model="random", format="qwen3", any_model_name=True)
    assert _ask(config, ["claude-x", "gpt-5", "random"]) == (["random"], [200, 200, 200])
