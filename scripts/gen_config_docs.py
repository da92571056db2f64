"""Render ``agentgym-train``'s config into docs/training/config-reference.md.

    python scripts/gen_config_docs.py           # rewrite the page
    python scripts/gen_config_docs.py --check   # exit 1 if the committed page is stale (CI)

Every key comes from the dataclasses in trainer/config.py: its type, its default and the string
right under the field, the same text ``agentgym-train --help`` prints (one source of truth).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import yaml

from agentgym.trainer.config import TrainConfig, _field_docs

PAGE = Path(__file__).resolve().parents[1] / "docs" / "training" / "config-reference.md"

HEADER = """\
# Config reference

Every key of `agentgym-train`'s config, with its type, its default and what it does. Set a key in
a recipe (YAML) or on the command line: `agentgym-train --config RECIPE section.key=value`
([Config](config.md)). `agentgym-train --help` prints the same text.

This page is generated from `trainer/config.py` by `python scripts/gen_config_docs.py`; do not
edit it by hand (a test fails when it is stale).
"""


def _cell(text: str) -> str:
    """Markdown for one table cell: RST double backticks to code spans, pipes outside code
    escaped (mkdocs' tables never split a cell at a pipe inside a code span)."""
    parts = " ".join(text.replace("``", "`").split()).split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def _code(text: str) -> str:
    return "`" + text + "`"


def _type(text: str) -> str:
    """A field's type as code, one span per member of a union: a pipe inside a code span splits
    the cell on GitHub, and an escaped one shows its backslash on the site."""
    return " \\| ".join(_code(part.strip()) for part in text.split("|"))


def _default(value: Any) -> str:
    return _code(yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip())


def _section(obj: Any, prefix: str, out: list[str]) -> None:
    """One table for the plain fields of ``obj``, then one section per nested dataclass."""
    docs = _field_docs(type(obj))
    fields = dataclasses.fields(obj)
    plain = [f for f in fields if not dataclasses.is_dataclass(getattr(obj, f.name))]
    nested = [f for f in fields if dataclasses.is_dataclass(getattr(obj, f.name))]
    if plain:
        out += ["", f"## `{prefix.rstrip('.')}`" if prefix else "## Top level", "",
                "| key | type | default | what it does |", "|---|---|---|---|"]
        for f in plain:
            out.append(f"| `{prefix}{f.name}` | {_type(str(f.type))} | {_default(getattr(obj, f.name))} "
                       f"| {_cell(docs.get(f.name, ''))} |")
    for f in nested:
        _section(getattr(obj, f.name), f"{prefix}{f.name}.", out)


def render() -> str:
    out = [HEADER.rstrip("\n")]
    _section(TrainConfig(), "", out)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed page is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is stale: run `python scripts/gen_config_docs.py` and commit it", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
