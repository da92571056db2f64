"""mkdocs hooks (mkdocs.yml ``hooks:``): bench/RESULTS.md is published as the page ``results.md``.

The measured numbers live in one file, bench/RESULTS.md, next to the scripts that produce them;
the docs pages link to ``results.md`` instead of repeating them. RESULTS.md links to the docs as
``../docs/PAGE.md`` (right on GitHub); on the site the page sits beside them, so those become
``PAGE.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "RESULTS.md"


def on_files(files: Files, config: Any) -> Files:
    files.append(File.generated(config, "results.md", content=RESULTS.read_text(encoding="utf-8").replace("](../docs/", "](")))
    return files
