"""`kaname bench toolcall`: Moonshot AI's K2 Vendor Verifier (K2VV) tool-call benchmark, run
against any OpenAI-compatible endpoint, scored the way K2VV scores.

Scoring (pure functions, no I/O):

- **Schema accuracy**: among the responses whose `finish_reason` is `"tool_calls"`, the share
  whose every tool call names a tool of that request and whose `json.loads(arguments)` passes
  `jsonschema.validate` against that tool's `parameters`. A `tool_calls` finish with no calls
  fails. Over zero such responses the accuracy is `None` (not 1.0). Each failing response gets
  one category, that of its first failing call (all failing calls are kept in its record):
  `unparsable_arguments`, `unknown_tool`, `schema_violation`, `no_tool_calls`,
  `malformed_tool_call` (a call without a function name, or arguments neither a string nor an
  object) and `invalid_tool_schema` (the tool's `parameters` is not a valid JSON Schema).
  One deliberate difference from K2VV's code: a tool whose `parameters` is absent or `{}` takes
  any JSON object (K2VV's `if not schema: return False` fails every call to such a tool). The
  K2VV data has no such tool, so its figures are unaffected.
- **Trigger similarity** against a reference results file: per request, positive iff
  `finish_reason == "tool_calls"`; TP/FP/FN/TN over the requests of this run that the reference
  has; precision TP/(TP+FP), recall TP/(TP+FN), F1 2PR/(P+R), each 0.0 where it would divide
  by zero. A request that failed (HTTP error, timeout, ...) has no finish reason, so it counts
  as a negative, as in K2VV; the summary says how many did.

Failed requests are counted under `errors` (by kind) and listed in the report; they are never
dropped silently.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FAILURE_CATEGORIES = ("unparsable_arguments", "unknown_tool", "schema_violation",
                      "no_tool_calls", "malformed_tool_call", "invalid_tool_schema")
# What can go wrong with a request; "other" only for failed lines of a results file being
# re-scored (K2VV's own files say "failed" without a kind).
ERROR_KINDS = ("http_error", "timeout", "connection_error", "bad_json", "bad_response", "other")
ANY_OBJECT: dict[str, Any] = {"type": "object"}

# ---------------------------------------------------------------------------------------------
# Scoring: pure functions.


def tool_schemas(tools: Any) -> dict[str, Any]:
    """name -> parameters schema for a request's `tools` (first definition of a name wins;
    absent or empty parameters take any object)."""
    out: dict[str, Any] = {}
    for tool in tools or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        if fn["name"] in out:
            continue
        params = fn.get("parameters")
        out[fn["name"]] = ANY_OBJECT if params is None or params == {} else params
    return out


def check_tool_call(call: Any, schemas: Mapping[str, Any]) -> tuple[str, str] | None:
    """None when the call is valid, else (failure category, detail)."""
    import jsonschema

    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        return "malformed_tool_call", "tool call has no function name"
    name = fn["name"]
    if name not in schemas:
        known = ", ".join(sorted(schemas)) or "none"
        return "unknown_tool", f"unknown tool {name!r} (known: {known})"
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as e:
            return "unparsable_arguments", f"{name}: arguments are not JSON ({e}): {args[:200]!r}"
    elif not isinstance(args, dict):
        return "malformed_tool_call", (f"{name}: arguments are {type(args).__name__}, "
                                       "not a JSON string or object")
    schema = schemas[name]
    try:
        jsonschema.validate(instance=args, schema=schema)
    except jsonschema.ValidationError as e:
        where = "/" + "/".join(str(p) for p in e.absolute_path)
        return "schema_violation", f"{name}: at {where}: {e.message}"
    except jsonschema.SchemaError as e:
        return "invalid_tool_schema", f"{name}: parameters is not a valid JSON Schema: {e.message}"
    return None


def check_tool_calls(tool_calls: Any, tools: Any) -> dict[str, Any] | None:
    """For a `tool_calls` finish: None when every call is valid, else
    {"category", "detail", "call_index", "calls": [{"index", "category", "detail"}, ...]}."""
    if not tool_calls:
        return {"category": "no_tool_calls", "detail": "finish_reason is tool_calls but the "
                "message has no tool calls", "call_index": None, "calls": []}
    if not isinstance(tool_calls, list):
        return {"category": "malformed_tool_call", "detail": "tool_calls is not a list",
                "call_index": None, "calls": []}
    schemas = tool_schemas(tools)
    bad = []
    for i, call in enumerate(tool_calls):
        problem = check_tool_call(call, schemas)
        if problem is not None:
            bad.append({"index": i, "category": problem[0], "detail": problem[1]})
    if not bad:
        return None
    return {"category": bad[0]["category"], "detail": bad[0]["detail"],
            "call_index": bad[0]["index"], "calls": bad}


def first_choice(response: Any) -> dict[str, Any] | None:
    if not isinstance(response, dict):
        return None
    choices = response.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def score_response(response: Any, tools: Any) -> dict[str, Any]:
    """{"finish_reason", "tool_calls_valid", "failure"} for one completion; tool_calls_valid
    and failure are None unless the finish reason is "tool_calls"."""
    choice = first_choice(response) or {}
    finish = choice.get("finish_reason")
    if finish != "tool_calls":
        return {"finish_reason": finish, "tool_calls_valid": None, "failure": None}
    message = choice.get("message")
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    failure = check_tool_calls(calls, tools)
    return {"finish_reason": finish, "tool_calls_valid": failure is None, "failure": failure}


def result_record(data_index: int, tools: Any, response: dict[str, Any] | None,
                  error: Mapping[str, Any] | None = None, duration_ms: int | None = None,
                  attempts: int | None = None) -> dict[str, Any]:
    """One line of results.jsonl, in the reference file's shape (data_index, status,
    finish_reason, response; a failed request has response {"error": message})."""
    rec: dict[str, Any] = {"data_index": data_index}
    if error is not None:
        rec.update(status="failed", finish_reason=None, tool_calls_valid=None, failure=None,
                   response={"error": error.get("message", "")}, error=dict(error))
    else:
        rec.update(status="success", **score_response(response, tools), response=response)
    if duration_ms is not None:
        rec["duration_ms"] = duration_ms
    if attempts is not None:
        rec["attempts"] = attempts
    return rec


def schema_accuracy(valid: int, total: int) -> float | None:
    return valid / total if total else None


def trigger_scores(run: Mapping[int, str | None],
                   reference: Mapping[int, str | None]) -> dict[str, Any]:
    """K2VV's trigger similarity: positive iff finish_reason == "tool_calls", compared per
    data_index over the run's requests that the reference has."""
    tp = fp = fn = tn = 0
    missing = []
    for idx in sorted(run):
        if idx not in reference:
            missing.append(idx)
            continue
        mine = run[idx] == "tool_calls"
        theirs = reference[idx] == "tool_calls"
        if mine and theirs:
            tp += 1
        elif mine:
            fp += 1
        elif theirs:
            fn += 1
        else:
            tn += 1
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"tp": tp, "fp": fp, "fn": fn, "tn": tn, "compared": tp + fp + fn + tn,
            "not_in_reference": missing, "precision": precision, "recall": recall, "f1": f1}


def _percentile(values: Sequence[int], q: float) -> int | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # nearest rank
    return ordered[int(rank) - 1]


def summarize(records: Iterable[Mapping[str, Any]],
              reference: Mapping[int, str | None] | None = None,
              meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """summary.json from result records (see `result_record`) and an optional reference
    (data_index -> finish_reason)."""
    recs = sorted(records, key=lambda r: r["data_index"])
    errors = [r for r in recs if r.get("status") == "failed"]
    error_kinds = Counter((r.get("error") or {}).get("kind", "other") for r in errors)
    finishes = Counter(str(r.get("finish_reason")) for r in recs if r.get("status") != "failed")
    tool_call = [r for r in recs if r.get("finish_reason") == "tool_calls"]
    valid = sum(1 for r in tool_call if r.get("tool_calls_valid"))
    failures = Counter(r["failure"]["category"] for r in tool_call if r.get("failure"))
    latencies = [r["duration_ms"] for r in recs
                 if r.get("status") != "failed" and isinstance(r.get("duration_ms"), int)]
    summary: dict[str, Any] = dict(meta or {})
    summary.update({
        "requests": len(recs),
        "completed": len(recs) - len(errors),
        "errors": len(errors),
        "error_kinds": {k: error_kinds.get(k, 0) for k in ERROR_KINDS}
        | {k: v for k, v in error_kinds.items() if k not in ERROR_KINDS},
        "finish_reasons": dict(sorted(finishes.items())),
        "tool_call_responses": len(tool_call),
        "valid_tool_call_responses": valid,
        "schema_accuracy": schema_accuracy(valid, len(tool_call)),
        "failures": {k: failures.get(k, 0) for k in FAILURE_CATEGORIES},
        "trigger_precision": None, "trigger_recall": None, "trigger_f1": None, "trigger": None,
        "latency_ms": {"p50": _percentile(latencies, 50), "p95": _percentile(latencies, 95),
                       "max": max(latencies) if latencies else None},
    })
    if reference is not None:
        run = {r["data_index"]: r.get("finish_reason") for r in recs}
        t = trigger_scores(run, reference)
        failed = {r["data_index"] for r in errors}
        t["errors_counted_negative"] = sum(1 for i in failed if i in reference)
        t["errors_reference_positive"] = sum(1 for i in failed
                                             if reference.get(i) == "tool_calls")
        summary.update(trigger_precision=t["precision"], trigger_recall=t["recall"],
                       trigger_f1=t["f1"], trigger=t)
    return summary


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def _cell(text: Any) -> str:
    s = " ".join(str(text).split()).replace("|", "\\|")
    return s if len(s) <= 300 else s[:300] + "…"


def render_report(summary: Mapping[str, Any], records: Iterable[Mapping[str, Any]],
                  reference: Mapping[int, str | None] | None = None) -> str:
    """report.md: headline table, failures and errors by request, trigger mismatches."""
    recs = sorted(records, key=lambda r: r["data_index"])
    n_tc, valid = summary["tool_call_responses"], summary["valid_tool_call_responses"]
    lines = ["# K2VV tool-call benchmark", ""]
    for key in ("endpoint", "model", "data", "reference", "results", "started_at", "duration_s"):
        if summary.get(key) is not None:
            lines.append(f"- {key}: `{summary[key]}`")
    lines += ["", "| metric | value |", "|---|---|",
              f"| requests | {summary['requests']} |",
              f"| completed | {summary['completed']} |",
              f"| errors (HTTP, timeout, ...) | {summary['errors']} |",
              "| finish reasons | " + (", ".join(f"{k} {v}" for k, v in
                                                summary["finish_reasons"].items()) or "none")
              + " |",
              f"| tool_calls responses | {n_tc} |",
              f"| valid tool_calls responses | {valid} |",
              f"| **schema accuracy** | **{_pct(summary['schema_accuracy'])}** |"]
    t = summary.get("trigger")
    if t is not None:
        lines += [f"| trigger precision | {_pct(t['precision'])} |",
                  f"| trigger recall | {_pct(t['recall'])} |",
                  f"| **trigger F1** | **{_pct(t['f1'])}** |",
                  f"| TP / FP / FN / TN | {t['tp']} / {t['fp']} / {t['fn']} / {t['tn']} |"]
    lat = summary.get("latency_ms") or {}
    if lat.get("p50") is not None:
        lines.append(f"| latency p50 / p95 / max (ms) | {lat['p50']} / {lat['p95']} / "
                     f"{lat['max']} |")
    lines += ["", "## Schema failures", ""]
    cats = {k: v for k, v in summary["failures"].items() if v}
    if cats:
        lines.append("By category: " + ", ".join(f"{k} {v}" for k, v in cats.items()) + ".")
        lines += ["", "| data_index | category | call | detail |", "|---|---|---|---|"]
        for r in recs:
            f = r.get("failure")
            if r.get("finish_reason") == "tool_calls" and f:
                for c in f["calls"] or [{"index": None, "category": f["category"],
                                         "detail": f["detail"]}]:
                    call = "" if c["index"] is None else c["index"]
                    lines.append(f"| {r['data_index']} | {c['category']} | {call} | "
                                 f"{_cell(c['detail'])} |")
    else:
        lines.append("None." if n_tc else "No response finished with tool_calls.")
    lines += ["", "## Request errors", ""]
    errs = [r for r in recs if r.get("status") == "failed"]
    if errs:
        lines += ["| data_index | kind | message |", "|---|---|---|"]
        for r in errs:
            e = r.get("error") or {}
            lines.append(f"| {r['data_index']} | {e.get('kind', 'other')} | "
                         f"{_cell(e.get('message', ''))} |")
    else:
        lines.append("None.")
    if t is not None and reference is not None:
        fps = [r["data_index"] for r in recs if r["data_index"] in reference
               and r.get("finish_reason") == "tool_calls"
               and reference[r["data_index"]] != "tool_calls"]
        fns = [r["data_index"] for r in recs if r["data_index"] in reference
               and r.get("finish_reason") != "tool_calls"
               and reference[r["data_index"]] == "tool_calls"]
        lines += ["", "## Trigger mismatches against the reference", "",
                  f"- called a tool, reference did not (FP): {fps or 'none'}",
                  f"- reference called a tool, this run did not (FN): {fns or 'none'}"]
        if t["errors_counted_negative"]:
            lines.append(f"- {t['errors_counted_negative']} failed request(s) counted as "
                         f"negatives ({t['errors_reference_positive']} of them FN)")
        if t["not_in_reference"]:
            lines.append(f"- not in the reference (not compared): {t['not_in_reference']}")
    return "\n".join(lines) + "\n"


def summary_text(summary: Mapping[str, Any]) -> str:
    """The few lines printed to stdout."""
    errs = {k: v for k, v in summary["error_kinds"].items() if v}
    out = [f"k2vv toolcall: {summary['requests']} requests, {summary['completed']} completed, "
           f"{summary['errors']} errors" + (" (" + ", ".join(f"{k} {v}" for k, v in errs.items())
                                            + ")" if errs else "")]
    out.append("finish reasons: " + (", ".join(f"{k} {v}" for k, v in
                                              summary["finish_reasons"].items()) or "none"))
    cats = {k: v for k, v in summary["failures"].items() if v}
    out.append(f"schema accuracy: {_pct(summary['schema_accuracy'])} "
               f"({summary['valid_tool_call_responses']}/{summary['tool_call_responses']} "
               "tool_calls responses valid"
               + ("; " + ", ".join(f"{k} {v}" for k, v in cats.items()) if cats else "") + ")")
    t = summary.get("trigger")
    if t is not None:
        out.append(f"trigger vs reference: precision {_pct(t['precision'])}, recall "
                   f"{_pct(t['recall'])}, F1 {_pct(t['f1'])} (TP {t['tp']} FP {t['fp']} "
                   f"FN {t['fn']} TN {t['tn']})")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Files.


def _jsonl(path: Path, what: str) -> Iterable[tuple[int, Any]]:
    if not path.is_file():
        raise ValueError(f"{what}: no such file: {path}")
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield line_no, json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{what}: {path} line {line_no}: invalid JSON: {e}") from e


def load_requests(path: Path, limit: int | None = None) -> list[tuple[int, dict[str, Any]]]:
    """(data_index, request body): data_index is the 1-based line number, as in K2VV."""
    out = []
    for line_no, obj in _jsonl(path, "--data"):
        if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
            raise ValueError(f"--data: {path} line {line_no}: expected a chat-completions "
                             "request object with a messages list")
        out.append((line_no, obj))
        if limit is not None and len(out) >= limit:
            break
    return out


def load_results(path: Path, what: str) -> dict[int, dict[str, Any]]:
    """data_index -> result line (K2VV's results files and ours); a later line wins."""
    out = {}
    for line_no, obj in _jsonl(path, what):
        if not isinstance(obj, dict) or not isinstance(obj.get("data_index"), int):
            raise ValueError(f"{what}: {path} line {line_no}: expected an object with an "
                             "integer data_index")
        out[obj["data_index"]] = obj
    return out


def finish_reason_of(line: Mapping[str, Any]) -> str | None:
    if "finish_reason" in line:
        return line["finish_reason"]
    return (first_choice(line.get("response")) or {}).get("finish_reason")


def rescore_line(data_index: int, tools: Any, line: Mapping[str, Any]) -> dict[str, Any]:
    """A result record from a line of an existing results file, validated afresh."""
    response = line.get("response")
    if line.get("status") == "failed" or first_choice(response) is None:
        err = line.get("error") if isinstance(line.get("error"), dict) else None
        if err is None:
            msg = response.get("error") if isinstance(response, dict) else None
            err = {"kind": "other", "message": str(msg if msg is not None else "no response")}
        return result_record(data_index, tools, None, err, line.get("duration_ms"))
    return result_record(data_index, tools, response, None, line.get("duration_ms"))


def write_outputs(out: Path, summary: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
                  reference: Mapping[int, str | None] | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, ensure_ascii=False, indent=2) + "\n",
                                      encoding="utf-8")
    (out / "report.md").write_text(render_report(summary, records, reference), encoding="utf-8")
    with (out / "results.jsonl").open("w", encoding="utf-8") as f:
        for r in sorted(records, key=lambda r: r["data_index"]):
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------------------------
# Running.


def run_endpoint(requests: Sequence[tuple[int, dict[str, Any]]], config: Any,
                 progress: bool = True, partial: Path | None = None) -> list[dict[str, Any]]:
    """Send every request; one result record per request, failed ones included. With
    `partial`, each record is also appended there as it arrives (an interrupted run keeps
    what it got)."""
    import asyncio

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from .toolcall_client import Outcome, prepare_request, run_requests

    tools = {i: raw.get("tools") for i, raw in requests}
    items = [(i, prepare_request(raw, config, i)) for i, raw in requests]
    records: list[dict[str, Any]] = []
    counts: Counter[str] = Counter()
    bar = Progress(TextColumn("[bold]toolcall"), BarColumn(bar_width=16), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("{task.fields[info]}"),
                   console=Console(stderr=True), disable=not progress, transient=False)

    def info() -> str:
        return (f"calls {counts['tool_calls']} (bad {counts['invalid']}) · "
                f"other {counts['other']} · err {counts['errors']}")

    sink = None
    if partial is not None:
        partial.parent.mkdir(parents=True, exist_ok=True)
        sink = partial.open("w", encoding="utf-8")
    with bar:
        task = bar.add_task("requests", total=len(items), info=info())

        def done(o: Outcome) -> None:
            err = o.error.to_json() if o.error is not None else None
            rec = result_record(o.data_index, tools[o.data_index], o.response, err,
                                o.duration_ms, o.attempts)
            records.append(rec)
            if sink is not None:
                sink.write(json.dumps(rec, ensure_ascii=False) + "\n")
                sink.flush()
            if err is not None:
                counts["errors"] += 1
            elif rec["finish_reason"] == "tool_calls":
                counts["tool_calls"] += 1
                counts["invalid"] += not rec["tool_calls_valid"]
            else:
                counts["other"] += 1
            bar.update(task, advance=1, info=info())

        try:
            asyncio.run(run_requests(items, config, done))
        finally:
            if sink is not None:
                sink.close()
    return records


def cli_main(args: argparse.Namespace) -> int:
    """`kaname bench toolcall`; bad input raises ValueError (the CLI exits 2 with one line)."""
    from .toolcall_client import ClientConfig

    if (args.endpoint is None) == (args.results is None):
        raise ValueError("give exactly one of --endpoint (run the requests) and --results "
                         "(score an existing results file)")
    for name in ("concurrency", "limit", "max_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    if args.timeout <= 0:
        raise ValueError("--timeout must be > 0")
    if args.retries < 0:
        raise ValueError("--retries must be >= 0")
    if args.endpoint is not None and not args.endpoint.startswith(("http://", "https://")):
        raise ValueError(f"--endpoint: expected an http:// or https:// URL, got {args.endpoint!r}")
    requests = load_requests(Path(args.data), args.limit)
    reference = None
    if args.reference:
        reference = {i: finish_reason_of(line)
                     for i, line in load_results(Path(args.reference), "--reference").items()}
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    if args.results:
        lines = load_results(Path(args.results), "--results")
        records = []
        for i, raw in requests:
            if i in lines:
                records.append(rescore_line(i, raw.get("tools"), lines[i]))
            else:
                records.append(result_record(i, raw.get("tools"), None, {
                    "kind": "other", "message": "no line for this request in --results"}))
    else:
        config = ClientConfig(endpoint=args.endpoint,
                              api_key=args.api_key or os.environ.get("OPENAI_API_KEY"),
                              model=args.model, max_tokens=args.max_tokens, stream=args.stream,
                              concurrency=args.concurrency, timeout=args.timeout,
                              retries=args.retries, seed=args.seed,
                              strict_tools=args.strict_tools)
        records = run_endpoint(requests, config, progress=not args.no_progress,
                               partial=Path(args.out) / "results.jsonl")
    meta: dict[str, Any] = {"benchmark": "k2vv-toolcall", "endpoint": args.endpoint,
                            "model": args.model, "data": args.data,
                            "reference": args.reference, "results": args.results,
                            "limit": args.limit}
    if args.endpoint is not None:
        meta.update(concurrency=args.concurrency, timeout_s=args.timeout,
                    max_tokens=args.max_tokens, stream=args.stream, retries=args.retries,
                    seed=args.seed, strict_tools=args.strict_tools)
    meta.update(started_at=started.isoformat(timespec="seconds"),
                duration_s=round(time.perf_counter() - t0, 3))
    summary = summarize(records, reference, meta)
    out = Path(args.out)
    write_outputs(out, summary, records, reference)
    print(summary_text(summary))
    print(f"wrote {out / 'summary.json'}, {out / 'report.md'}, {out / 'results.jsonl'}",
          file=sys.stderr)
    return 0
