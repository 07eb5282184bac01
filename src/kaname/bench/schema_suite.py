"""The official JSON-Schema-Test-Suite as `kaname bench schemas` rows.

The suite (github.com/json-schema-org/JSON-Schema-Test-Suite, MIT) is a directory of
`tests/<draft>/<keyword>.json` files, each a list of cases `{"description", "schema",
"tests": [{"description", "data", "valid"}]}`. The `jsonschema` sdist on PyPI carries a copy
under `json/`, so it can be had from the package registry:

    pip download --no-deps --no-binary :all: jsonschema==4.23.0 -d runs/

`read_suite` reads either a directory (a checkout, or the sdist unpacked) or the sdist tarball
itself. Only the required tests are read (`optional/` is not: those are formats and
behaviours the specification leaves to implementations). Each case becomes one row with
`subset` = the draft and `id` = `draft/file#index`; its schema gets the draft's `$schema` when
it has none, so that every engine and the post-check read the draft the case was written for.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

DRAFTS: dict[str, str] = {
    "draft7": "http://json-schema.org/draft-07/schema#",
    "draft2020-12": "https://json-schema.org/draft/2020-12/schema",
}
DEFAULT_DRAFTS = ("draft2020-12", "draft7")


def read_suite(path: str | Path, drafts: Iterable[str] = DEFAULT_DRAFTS) -> list[dict[str, Any]]:
    """Rows `{"id", "subset", "schema", "tests"}` for every case of the drafts' required
    tests, in draft, then file name, then case order."""
    wanted = list(dict.fromkeys(drafts))
    unknown = [d for d in wanted if d not in DRAFTS]
    if unknown:
        raise ValueError(f"no such draft: {', '.join(unknown)} (known: {', '.join(DRAFTS)})")
    files = dict(_suite_files(Path(path), wanted))
    rows: list[dict[str, Any]] = []
    for draft in wanted:
        names = sorted(n for (d, n) in files if d == draft)
        if not names:
            raise ValueError(f"{path}: no tests/{draft}/*.json in the test suite")
        for name in names:
            try:
                cases = json.loads(files[draft, name])
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: tests/{draft}/{name}: not JSON: {e}") from e
            for i, case in enumerate(cases):
                schema = case["schema"]
                if isinstance(schema, dict) and "$schema" not in schema:
                    schema = {"$schema": DRAFTS[draft], **schema}
                rows.append({"id": f"{draft}/{name}#{i}", "subset": draft, "schema": schema,
                             "description": case.get("description", ""),
                             "tests": [{"description": t.get("description", ""),
                                        "data": t["data"], "valid": bool(t["valid"])}
                                       for t in case["tests"]]})
    return rows


def _suite_files(path: Path, drafts: list[str]) -> Iterator[tuple[tuple[str, str], bytes]]:
    """((draft, file name), contents) of each `tests/<draft>/<name>.json`."""
    if path.is_dir():
        root = path / "tests" if (path / "tests").is_dir() else path / "json" / "tests"
        if not root.is_dir():
            raise ValueError(f"{path}: no tests/ directory (a JSON-Schema-Test-Suite "
                             f"checkout, or jsonschema's sdist with json/tests/)")
        for draft in drafts:
            for file in sorted((root / draft).glob("*.json")):
                yield (draft, file.name), file.read_bytes()
        return
    if not path.is_file():
        raise ValueError(f"--suite: no such file or directory: {path}")
    try:
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                # <anything>/tests/<draft>/<name>.json, not deeper (optional/ is left out)
                if len(parts) >= 3 and parts[-3] == "tests" and parts[-2] in drafts \
                        and parts[-1].endswith(".json") and member.isfile():
                    handle = tar.extractfile(member)
                    if handle is not None:
                        yield (parts[-2], parts[-1]), handle.read()
    except tarfile.TarError as e:
        raise ValueError(f"--suite: {path} is neither a directory nor a tar archive: {e}") \
            from e
