"""Issue 20: real coding agents work against `kaname serve` unchanged.

Two suites:

- **replay**: every request Claude Code, Codex CLI and the Claude Agent SDK sent in one recorded
  turn (tests/data/agent_requests, written by scripts/record_agents.py) is posted as it is to
  `kaname serve --model random` (qwen3 and hermes formats, served as the model name the agents
  were given): each must be answered 200 with a well-formed answer in its API's shape (the SSE
  event grammar of Messages / Responses, tool calls of offered tools with arguments valid for
  their schemas, structured output valid for its schema). No npm needed: runs everywhere.
- **end to end** (`agents` marker): each installed agent (`bash scripts/agents.sh install`) runs
  one turn in a throwaway git repository against `kaname serve --model scripted:FILE`, whose
  script writes the read-only tool call of that agent and then "done"; the agent must exit 0,
  have run the tool (hello.txt's content is in a later request, seen by a recording proxy in
  front of the server) and print "done". Sandboxes and permission checks stay as they come.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from coding_agents import (
    DATA_DIR,
    HELLO,
    KINDS,
    Agent,
    RecordingProxy,
    installed_agents,
    require_agents,
    run_agent,
)
from serverproc import ServerProcess

SERVED = "kaname-test"  # the model name the agents were given when recorded (and here)
FORMATS = ("qwen3", "hermes")
REQUESTS = sorted(DATA_DIR.glob("*/[0-9][0-9]-*.json"))
MESSAGES_STOP = {"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"}
AGENT_TIMEOUT_S = 90.0  # one turn takes ~2 s against a scripted model


# ---------------------------------------------------------------- wire checks


def sse_events(text: str) -> list[tuple[str | None, dict[str, Any]]]:
    """(event name, data) of each SSE event; data that is not JSON fails the test."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            joined = "\n".join(data)
            if joined == "[DONE]":
                continue
            try:
                events.append((name, json.loads(joined)))
            except ValueError:
                pytest.fail(f"SSE data that is not JSON: {joined[:300]!r}")
    return events


def validate(instance: Any, schema: Any, what: str) -> None:
    if not isinstance(schema, dict):
        return
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    errors = sorted(cls(schema).iter_errors(instance), key=lambda e: list(e.path))
    assert not errors, f"{what}: {instance!r} is not valid for its schema: {errors[0].message}"


def check_message(body: dict[str, Any], message: dict[str, Any]) -> None:
    """A whole Messages answer: role, model, content blocks, stop reason, usage."""
    tools = {t["name"]: t for t in body.get("tools") or [] if "name" in t}
    assert message.get("type") == "message" and message.get("role") == "assistant", message
    assert message.get("model") == body["model"], message.get("model")
    assert message.get("stop_reason") in MESSAGES_STOP, message.get("stop_reason")
    usage = message.get("usage") or {}
    assert isinstance(usage.get("input_tokens"), int), usage
    assert isinstance(usage.get("output_tokens"), int), usage
    content = message.get("content")
    assert isinstance(content, list), content
    ids = set()
    for block in content:
        kind = block.get("type")
        assert kind in ("text", "tool_use", "thinking", "redacted_thinking"), block
        if kind == "text":
            assert isinstance(block.get("text"), str), block
        elif kind == "thinking":
            assert isinstance(block.get("thinking"), str), block
            assert isinstance(block.get("signature"), str), block
        elif kind == "tool_use":
            assert block.get("name") in tools, \
                f"a call of {block.get('name')!r}, which the request does not offer"
            assert isinstance(block.get("id"), str) and block["id"] not in ids, block
            ids.add(block["id"])
            assert isinstance(block.get("input"), dict), block
            validate(block["input"], tools[block["name"]].get("input_schema"),
                     f"input of {block['name']}")
    calls = [b for b in content if b["type"] == "tool_use"]
    assert (message["stop_reason"] == "tool_use") == bool(calls), \
        (message["stop_reason"], [b["name"] for b in calls])
    fmt = (body.get("output_config") or {}).get("format")
    if fmt and fmt.get("type") == "json_schema" and message["stop_reason"] == "end_turn":
        text = "".join(b["text"] for b in content if b["type"] == "text")
        try:
            value = json.loads(text)
        except ValueError:
            pytest.fail(f"output_config.format asks for JSON; the answer is {text[:300]!r}")
        validate(value, fmt.get("schema"), "the structured output")


def check_messages_stream(body: dict[str, Any], text: str) -> None:
    """Anthropic's event grammar: message_start, then per block content_block_start, deltas of
    the block's kind, content_block_stop (indices from 0 in order), message_delta with the
    stop reason, message_stop; ping anywhere, error nowhere. The blocks it adds up to must
    form a well-formed message (check_message)."""
    events = sse_events(text)
    for name, data in events:
        assert name is None or name == data.get("type"), (name, data)
        assert data.get("type") != "error", f"an error event: {data}"
    events = [d for _, d in events if d.get("type") != "ping"]
    assert events and events[0]["type"] == "message_start", [d["type"] for d in events[:3]]
    assert events[-1]["type"] == "message_stop", [d["type"] for d in events[-3:]]
    message = dict(events[0]["message"])
    message["content"] = []
    partial: dict[int, str] = {}
    open_index = None
    delta_seen = False
    for data in events[1:-1]:
        kind = data["type"]
        assert not delta_seen, f"{kind} after message_delta"
        if kind == "content_block_start":
            assert open_index is None, f"block {data['index']} starts inside {open_index}"
            assert data["index"] == len(message["content"]), data
            open_index = data["index"]
            block = dict(data["content_block"])
            message["content"].append(block)
            if block["type"] == "tool_use":
                partial[open_index] = ""
        elif kind == "content_block_delta":
            assert data["index"] == open_index, data
            block, delta = message["content"][open_index], data["delta"]
            expected = {"text": ("text_delta",), "tool_use": ("input_json_delta",),
                        "thinking": ("thinking_delta", "signature_delta")}.get(block["type"], ())
            assert delta["type"] in expected, (block["type"], delta)
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = block.get("signature", "") + delta["signature"]
            else:
                partial[open_index] += delta["partial_json"]
        elif kind == "content_block_stop":
            assert data["index"] == open_index, data
            if open_index in partial:
                raw = partial[open_index] or "{}"
                try:
                    message["content"][open_index]["input"] = json.loads(raw)
                except ValueError:
                    pytest.fail(f"tool input that is not JSON: {raw[:300]!r}")
            open_index = None
        elif kind == "message_delta":
            assert open_index is None, "message_delta inside a block"
            message.update(data["delta"])
            message["usage"] = {**message.get("usage", {}), **(data.get("usage") or {})}
            delta_seen = True
        else:
            pytest.fail(f"an event Messages does not define: {kind}")
    assert delta_seen, "no message_delta"
    check_message(body, message)


def _responses_tools(body: dict[str, Any]) -> dict[tuple[str | None, str], dict[str, Any]]:
    """(namespace, name) -> tool, for the function and custom tools a request offers."""
    found: dict[tuple[str | None, str], dict[str, Any]] = {}
    for tool in body.get("tools") or []:
        if tool.get("type") in ("function", "custom"):
            found[None, tool["name"]] = tool
        elif tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                found[tool["name"], inner["name"]] = inner
    return found


def check_response(body: dict[str, Any], response: dict[str, Any]) -> None:
    """A whole Responses answer: status, model, output items, usage."""
    tools = _responses_tools(body)
    assert response.get("object") == "response", response
    assert response.get("status") in ("completed", "incomplete"), \
        (response.get("status"), response.get("error"))
    assert response.get("model") == body["model"], response.get("model")
    usage = response.get("usage") or {}
    assert isinstance(usage.get("input_tokens"), int), usage
    assert isinstance(usage.get("output_tokens"), int), usage
    call_ids = set()
    for item in response.get("output") or []:
        kind = item.get("type")
        assert kind in ("message", "reasoning", "function_call", "custom_tool_call"), item
        if kind == "message":
            assert item.get("role") == "assistant", item
            for part in item.get("content") or []:
                assert part.get("type") in ("output_text", "refusal"), part
        elif kind in ("function_call", "custom_tool_call"):
            key = (item.get("namespace"), item.get("name"))
            assert key in tools, f"a call of {key}, which the request does not offer"
            assert isinstance(item.get("call_id"), str) and item["call_id"] not in call_ids, item
            call_ids.add(item["call_id"])
            if kind == "custom_tool_call":
                assert isinstance(item.get("input"), str), item
                continue
            try:
                arguments = json.loads(item.get("arguments"))
            except (TypeError, ValueError):
                pytest.fail(f"arguments that are not JSON: {item.get('arguments')!r}")
            assert isinstance(arguments, dict), arguments
            validate(arguments, tools[key].get("parameters"), f"arguments of {key}")


def check_responses_stream(body: dict[str, Any], text: str) -> None:
    """OpenAI's event grammar: sequence numbers 0, 1, 2, …; response.created first,
    response.completed / incomplete last (never failed or error); each output item added
    before its deltas and done after them, at increasing output indices; the final response's
    output is the items as done (check_response)."""
    events = sse_events(text)
    for n, (name, data) in enumerate(events):
        assert name is None or name == data.get("type"), (name, data)
        assert data.get("type") not in ("error", "response.failed"), f"{data}"
        assert data.get("sequence_number") == n, (n, data.get("type"), data.get("sequence_number"))
    kinds = [d["type"] for _, d in events]
    assert kinds and kinds[0] == "response.created", kinds[:3]
    assert kinds[-1] in ("response.completed", "response.incomplete"), kinds[-3:]
    added: dict[int, dict[str, Any]] = {}
    done: dict[int, dict[str, Any]] = {}
    parts: set[tuple[int, int]] = set()
    for _, data in events[1:-1]:
        kind = data["type"]
        if kind == "response.output_item.added":
            assert data["output_index"] == len(added), data
            assert all(i in done for i in added), f"item {data['output_index']} opens early"
            added[data["output_index"]] = data["item"]
        elif kind == "response.output_item.done":
            i = data["output_index"]
            assert i in added and i not in done, data
            assert data["item"].get("id") == added[i].get("id"), (added[i], data["item"])
            assert data["item"]["type"] == added[i]["type"], (added[i], data["item"])
            done[i] = data["item"]
        elif "output_index" in data:
            i = data["output_index"]
            assert i in added and i not in done, f"{kind} outside its item"
            if "item_id" in data:
                assert data["item_id"] == added[i].get("id"), data
            if kind == "response.content_part.added":
                parts.add((i, data["content_index"]))
            elif "content_index" in data:
                assert (i, data["content_index"]) in parts, f"{kind} before its content part"
    assert sorted(done) == sorted(added), "an item added and never done"
    final = events[-1][1]["response"]
    assert final.get("output") == [done[i] for i in sorted(done)], \
        "the final response's output differs from the items as done"
    check_response(body, final)


# ---------------------------------------------------------------- replay


@pytest.fixture(scope="module", params=FORMATS)
def replay_server(request):
    with ServerProcess("--model", "random", "--format", request.param,
                       "--served-model-name", SERVED) as s:
        yield s


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def test_recordings_present():
    """Every agent has its recorded requests (scripts/record_agents.py), and each is one JSON
    object {method, path, headers, body}."""
    assert {p.parent.name.rpartition("-")[0] for p in REQUESTS} == set(KINDS)
    for path in REQUESTS:
        data = json.loads(path.read_text())
        assert set(data) == {"method", "path", "headers", "body"}, path


def check_answer(method: str, path: str, body: Any, status: int, text: str) -> None:
    """One exchange: 200 and an answer in the shape of the API its path names."""
    assert status == 200, f"{method} {path} answered {status}: {text[:1000]}"
    route = path.split("?")[0]
    if route.endswith("/models"):
        assert SERVED in [m.get("id") for m in json.loads(text).get("data", [])], text[:500]
    elif route.endswith("/count_tokens"):
        assert isinstance(json.loads(text).get("input_tokens"), int), text[:500]
    elif route.endswith("/messages"):
        if body.get("stream"):
            check_messages_stream(body, text)
        else:
            check_message(body, json.loads(text))
    elif route.endswith("/responses"):
        if body.get("stream"):
            check_responses_stream(body, text)
        else:
            check_response(body, json.loads(text))
    else:
        pytest.fail(f"a route this test does not know: {route}")


@pytest.mark.parametrize("path", REQUESTS, ids=_id)
def test_replay(replay_server, path: Path):
    """The request as the agent sent it: 200 and an answer in its API's shape."""
    rec = json.loads(path.read_text())
    body = rec["body"]
    r = httpx.request(rec["method"], replay_server.url + rec["path"], headers=rec["headers"],
                      json=body if rec["method"] != "GET" else None, timeout=300)
    if body and body.get("stream") and r.status_code == 200:
        assert r.headers["content-type"].startswith("text/event-stream"), r.headers
    check_answer(rec["method"], rec["path"], body, r.status_code, r.text)


SIDE_REQUESTS = [p for p in REQUESTS if "-side-" in p.name]


@pytest.mark.parametrize("format_", FORMATS)
def test_side_requests_under_a_scripted_turn(format_: str, tmp_path: Path):
    """A side request (the SDK's title, asked as output_config.format JSON) is a fresh
    conversation, so the scripted model of the end-to-end suite offers it the first turn: a
    tool call the request's grammar (JSON for the title, no tools) must mask into a valid
    answer. What the agents meet in every end-to-end run, here without npm."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [_call("Read", {"file_path": "/tmp/hello.txt"}),
                                            "done"]}))
    with ServerProcess("--model", f"scripted:{script}", "--format", format_,
                       "--served-model-name", SERVED, startup_timeout=60) as server:
        for path in SIDE_REQUESTS:
            rec = json.loads(path.read_text())
            for stream in (True, False):  # Claude Code falls back to non-streaming
                body = {**rec["body"], "stream": stream}
                r = httpx.post(server.url + rec["path"], headers=rec["headers"], json=body,
                               timeout=120)
                try:
                    check_answer("POST", rec["path"], body, r.status_code, r.text)
                except AssertionError as e:
                    raise AssertionError(f"{_id(path)} stream={stream}: {e}") from e


# ---------------------------------------------------------------- end to end

# What each agent's model writes, in hermes / qwen3 syntax (the same <tool_call> JSON; qwen3
# reasons first, so the agents get a thinking / reasoning item back too): turn 1 calls the
# agent's read-only tool on hello.txt, turn 2 says "done". A turn is the text after the
# generation prompt, without the end-of-turn token.
def _call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def script_for(agent: Agent, workdir: Path, format_: str) -> dict[str, Any]:
    if agent.kind == "codex":
        first = _call("exec_command", {"cmd": "cat hello.txt"})
    else:  # Claude Code and the SDK: Read takes an absolute path
        first = _call("Read", {"file_path": str(workdir / "hello.txt")})
    last = "done"
    if format_ == "qwen3":
        first = "<think>\nhello.txt is in the working directory: read it.\n</think>\n\n" + first
        last = "<think>\nThe tool answered; say so.\n</think>\n\n" + last
    return {"turns": [first, last]}


def tool_results(body: Any) -> list[Any]:
    """The tool results a request carries back: Messages tool_result blocks, Responses
    *_call_output items."""
    if not isinstance(body, dict):
        return []
    found = [block for m in body.get("messages") or [] if isinstance(m.get("content"), list)
             for block in m["content"] if block.get("type") == "tool_result"]
    if isinstance(body.get("input"), list):
        found += [item for item in body["input"]
                  if str(item.get("type", "")).endswith("_call_output")]
    return found


def _agent_id(agent: Agent) -> str:
    return agent.name


# Every installed version; with none installed, one placeholder per kind that skips saying why.
E2E = installed_agents() or [pytest.param(kind, id=kind) for kind in KINDS]


@pytest.mark.agents
@pytest.mark.parametrize("format_", FORMATS)
@pytest.mark.parametrize("agent", E2E, ids=_agent_id)
def test_agent_turn(agent, format_: str, tmp_path: Path):
    """One turn of a real agent against kaname serve with a scripted model: exit 0, the tool
    ran (its output reached the server), the final text printed."""
    if isinstance(agent, str):
        require_agents(agent)
        return
    workdir = tmp_path / "work"  # where run_agent puts hello.txt
    script = tmp_path / "script.json"
    script.write_text(json.dumps(script_for(agent, workdir, format_)))
    with ServerProcess("--model", f"scripted:{script}", "--format", format_,
                       "--served-model-name", SERVED, startup_timeout=60) as server, \
            RecordingProxy(server.url) as proxy:
        run = run_agent(agent, proxy.url, model=SERVED, tmp=tmp_path, timeout=AGENT_TIMEOUT_S)
        log = server.log()
    sent = [f"{r['method']} {r['path']} -> {r.get('status')}" for r in proxy.requests]
    why = f"{run.describe()}\nrequests: {sent}\nserver log: {log[-1500:]}"
    assert run.returncode == 0, why
    for r in proxy.requests:  # every answer kaname gave the agent is well-formed
        if not r.get("aborted"):
            try:
                check_answer(r["method"], r["path"], r["body"], r["status"], r["answer"])
            except AssertionError as e:
                raise AssertionError(f"{r['method']} {r['path']} "
                                     f"({json.dumps(r['body'])[:200]}...): {e}\n{why}") from e
    assert any(HELLO in json.dumps(result) for r in proxy.requests
               for result in tool_results(r["body"])), \
        f"no tool result holding hello.txt's content reached the server: the tool did not " \
        f"run\n{why}"
    if agent.kind == "claude-agent-sdk":
        result = json.loads(run.stdout.strip().splitlines()[-1])
        assert result.get("result") == "done", why
    else:
        assert run.stdout.strip().endswith("done"), why
