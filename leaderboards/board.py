"""``agentgym leaderboard build``: the board, from the submissions that survive replay.

Every file under ``ROOT/submissions/SUITE/`` (``*.jsonl`` or ``*.jsonl.gz``) is verified against
the current ``ROOT/suites/SUITE.yaml``; only verified ones are ranked, by the recomputed overall
score (ties: name). Outputs:

* ``ROOT/LEADERBOARD.md``: one Markdown table per suite; committed, and ``--check`` fails when
  it is not exactly what the submissions give (CI runs that);
* ``ROOT/board/site/index.html`` (+ ``transcripts/*.js``): a static page that works opened from
  a file, offline (no server, no network): sortable table with intervals and cost columns, and
  every episode of every submission as a readable transcript. Not committed: it is rebuilt.

Both go under ``out`` (default: ``ROOT``). An installed copy of the package (a wheel in
site-packages) is never written to: :func:`default_out` picks ``./leaderboard`` there, so a
build never replaces the packaged board with one made from whatever submissions are at hand.
"""

from __future__ import annotations

import json
import re
import shutil
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError
from agentgym.leaderboards.submission import load_tokenizer
from agentgym.leaderboards.suite import SUITES_DIR, Suite, list_suites, load_suite
from agentgym.leaderboards.transcript import episode_transcript
from agentgym.leaderboards.verify import VerifyReport, verify_submission

__all__ = ["DEFAULT_ROOT", "BuildResult", "Entry", "build_board", "default_out", "render_markdown"]

DEFAULT_ROOT = Path(__file__).parent
SITE_SRC = Path(__file__).parent / "site"
BOARD_MD = "LEADERBOARD.md"


def default_out(root: Path) -> Path:
    """Where a build writes: ``root`` in a source checkout (the committed board), else
    ``./leaderboard`` (the packaged copy of an installed wheel stays as shipped)."""
    installed = root.resolve() == DEFAULT_ROOT.resolve() and not (DEFAULT_ROOT.parent / "pyproject.toml").exists()
    return Path.cwd() / "leaderboard" if installed else root


@dataclass
class Entry:
    """One verified submission on the board."""

    suite: Suite
    file: str  # path relative to the root, with forward slashes
    report: VerifyReport

    @property
    def id(self) -> str:
        stem = Path(self.file).name.split(".")[0]
        return re.sub(r"[^A-Za-z0-9_-]+", "-", f"{self.suite.name}-{stem}")

    def row(self) -> dict[str, Any]:
        sub = self.report.header["submission"]
        n = max(len(self.report.episodes), 1)
        cost = {k: self.report.cost[k] / n for k in ("input_tokens", "output_tokens", "turns", "wall_s")}
        brief = {k: v for k, v in self.report.overall.items() if k in ("mean", "ci95", "pass_k")}
        return {"id": self.id, "name": sub["name"], "policy": sub["policy"],
                "model": str(sub["describe"].get("model", sub["policy"])),
                "engine": str(sub["describe"].get("engine", "")), "date": sub["date"],
                "agentgym_version": sub["agentgym_version"], "file": self.file,
                "episodes": len(self.report.episodes), "overall": brief,
                "envs": {e: {k: s[k] for k in ("mean", "ci95", "pass_k")} for e, s in self.report.scores.items()},
                "cost_per_episode": cost, "describe": sub["describe"], "hardware": sub.get("hardware", {}),
                "tokenizer": sub["tokenizer"], "notes": sub.get("notes", ""),
                "verify_s": round(self.report.seconds, 1), "provenance": self.provenance,
                "trials_scored": self.report.trials}

    @property
    def provenance(self) -> str:
        """``checked`` when the build re-scored the actions under the named weights (``--model``) or
        re-ran the scripted policy the header names, else ``claimed``: replay proves the scores,
        not which policy chose the actions."""
        prov = self.report.provenance
        return "checked" if (prov is not None and prov.ok) or self.report.scripted else "claimed"


@dataclass
class BuildResult:
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    markdown: Path | None = None
    site: Path | None = None

    def format(self) -> str:
        lines = [f"board: {len(self.entries)} verified submissions" + ("" if self.ok else ", PROBLEMS:")]
        lines += [f"  - {p}" for p in self.problems]
        if self.markdown:
            lines.append(f"  markdown: {self.markdown}")
        if self.site:
            lines.append(f"  web page: {self.site / 'index.html'} (open it from the file, no server needed)")
        return "\n".join(lines)


def _submissions(root: Path, suite: Suite) -> list[Path]:
    d = root / "submissions" / suite.name
    return sorted(p for p in d.glob("*.jsonl*") if p.name.endswith((".jsonl", ".jsonl.gz")))


def _cell(s: dict[str, Any]) -> str:
    return f"{s['mean']:.3f} [{s['ci95'][0]:.2f}, {s['ci95'][1]:.2f}]"


def _md(text: str) -> str:
    """Submitted text as inert Markdown: no table breaks, links, images or HTML from a submission."""
    out = str(text).replace("\n", " ")
    for ch in "\\|[]()<>`*_!":
        out = out.replace(ch, "\\" + ch)
    return out


def render_markdown(suites: list[Suite], entries: list[Entry]) -> str:
    """The committed board: deterministic (no build time), one table per suite."""
    out = ["# agentgym leaderboard", "",
           "Generated by `agentgym leaderboard build` from the submissions under `leaderboards/submissions/`, "
           "each re-scored by replaying every episode against the environments (`agentgym leaderboard verify`). "
           "Do not edit by hand: CI fails when this file is not what the submissions give.", "",
           "Scores are mean task outcomes (sparse reward) with 95% intervals (Wilson, at the effective sample "
           "size of the per-task means); pass^k is the share of tasks solved in all k trials. Token counts are "
           "recomputed by replay; wall time per episode is reported by the submitter. The web page with every "
           "transcript: `agentgym leaderboard build`, then open `leaderboards/board/site/index.html`.", "",
           "A model marked *(claimed)* is the submitter's word: replay proves the scores, not which policy chose "
           "the actions. *(checked)* means the build re-scored a sample of the actions under those weights "
           "(`agentgym leaderboard build --model PATH`), or re-ran the scripted policy the entry names. "
           "Deterministic entries (greedy or scripted) are scored on one trial per task: their pass^k cell reads "
           "*(1 trial)*. Trials of a sampling entry that are copies of one episode are refused, and every file is "
           "read within fixed limits (size, line length, nesting, integer size): see docs/leaderboards.md.", ""]
    for suite in suites:
        rows = [e for e in entries if e.suite.name == suite.name]
        k = suite.trials
        envs = [e.id for e in suite.envs]
        out += [f"## Suite `{suite.ref}`", "", " ".join(suite.description.split()), ""]
        if not rows:
            out += ["No verified submissions yet.", ""]
            continue
        head = (["#", "Submission", "Model", "Overall"] + [e.split("/")[-1] for e in envs]
                + [f"pass^{k}", "Tokens in/ep", "Tokens out/ep", "Turns/ep", "Wall s/ep", "Date", "File"])
        out += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        for rank, e in enumerate(rows, 1):
            r = e.row()
            c = r["cost_per_episode"]
            one = " *(1 trial)*" if r["trials_scored"] < k else ""
            cells = ([str(rank), _md(r["name"]), f"{_md(r['model'])} *({r['provenance']})*", _cell(r["overall"])]
                     + [_cell(r["envs"][env]) for env in envs]
                     + [f"{r['overall']['pass_k']:.3f}{one}", f"{c['input_tokens']:.0f}", f"{c['output_tokens']:.0f}",
                        f"{c['turns']:.1f}", f"{c['wall_s']:.2f}", r["date"],
                        f"[{Path(r['file']).name}]({r['file']})"])
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def _transcripts(entry: Entry) -> dict[str, Any]:
    from agentgym.harmony import HarmonyCodec

    codec = HarmonyCodec(load_tokenizer(entry.report.header["submission"]["tokenizer"]))
    shared: dict[str, list[dict[str, Any]]] = {}
    episodes = []
    for r in sorted(entry.report.episodes, key=lambda r: r.line):
        env_id = r.spec.env.id
        head, tr = episode_transcript(codec, r.truth, shared.get(env_id))
        if env_id not in shared:  # the env's first episode sets what is shared, and is folded like the rest
            shared[env_id] = head
            head, tr = episode_transcript(codec, r.truth, head)
        if not tr["shared_prefix"] and head != shared[env_id]:
            tr["prompt"] = head + tr["prompt"]
        episodes.append({"env": env_id, "task": r.spec.task, "trial": r.spec.trial, "options": r.spec.options,
                         "score": r.record["score"], "cost": r.record["cost"], **tr})
    return {"shared": shared, "episodes": episodes}


def _json_for_html(obj: Any) -> str:
    # Inside <script type="application/json">: "</" must not appear, nor U+2028/9 (ensure_ascii covers).
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).replace("</", "<\\/")


def _write_site(site: Path, suites: list[Suite], entries: list[Entry]) -> None:
    if site.exists():
        shutil.rmtree(site)
    (site / "transcripts").mkdir(parents=True)
    data = {"suites": [{"name": s.name, "ref": s.ref, "description": s.description, "trials": s.trials,
                        "envs": [e.id for e in s.envs]} for s in suites],
            "rows": {s.name: [e.row() for e in entries if e.suite.name == s.name] for s in suites}}
    for e in entries:
        payload = json.dumps(_transcripts(e), ensure_ascii=True, separators=(",", ":"))
        (site / "transcripts" / f"{e.id}.js").write_text(
            "window.AGENTGYM_TRANSCRIPTS = window.AGENTGYM_TRANSCRIPTS || {};\n"
            f"window.AGENTGYM_TRANSCRIPTS[{json.dumps(e.id)}] = {payload};\n")
    html = (SITE_SRC / "index.html").read_text()
    html = (html.replace("/*BOARD_CSS*/", (SITE_SRC / "board.css").read_text())
                .replace("/*BOARD_JS*/", (SITE_SRC / "board.js").read_text())
                .replace("BOARD_DATA_JSON", _json_for_html(data)))
    (site / "index.html").write_text(html)


def _models_by_digest(models: list[str]) -> dict[str, str]:
    from agentgym.leaderboards.engine_policy import resolve_model_dir, weights_digest

    out = {}
    for m in models:
        digest = weights_digest(resolve_model_dir(m))
        if digest is None:
            raise ConfigError(f"--model {m!r}: no *.safetensors weights there to check provenance against")
        out[digest] = m
    return out


def _weights_of(path: Path) -> str | None:
    """The weights digest a submission's header names (None for none, or an unreadable header)."""
    from agentgym.leaderboards.limits import MAX_LINE_BYTES, LineError, parse_line
    from agentgym.leaderboards.submission import open_text

    try:
        with open_text(path) as f:
            header = parse_line(f.readline(MAX_LINE_BYTES).rstrip("\n"))
        digest = header["submission"]["describe"].get("weights_sha256")
    except (OSError, EOFError, UnicodeDecodeError, LineError, KeyError, TypeError, AttributeError, zlib.error):
        return None
    return digest if isinstance(digest, str) else None


def build_board(root: Path = DEFAULT_ROOT, *, site_dir: Path | None = None, check: bool = False,
                workers: int = 4, progress: bool = False, suites_dir: Path | None = None,
                out: Path | None = None, models: list[str] | None = None) -> BuildResult:
    """Verify every submission under ``root`` and write (or, with ``check``, compare) the board
    under ``out`` (default :func:`default_out`; ``--check`` compares with ``root``'s own).
    ``models``: model dirs; an entry whose header names the weights of one of them
    (``describe.weights_sha256``) is also checked for provenance against it, else it is *claimed*."""
    out = default_out(root) if out is None else out
    by_digest = _models_by_digest(models or [])
    result = BuildResult()
    sdir = suites_dir or (root / "suites" if (root / "suites").is_dir() else SUITES_DIR)
    suites = [load_suite(sdir / f"{n}.yaml") for n in list_suites(sdir)]
    for suite in suites:
        ranked: list[Entry] = []
        for path in _submissions(root, suite):
            rel = path.relative_to(root).as_posix()
            digest = _weights_of(path)
            try:
                report = verify_submission(path, suite=suite, workers=workers, progress=progress,
                                           model=by_digest.get(digest) if digest else None)
            except Exception as e:  # one file must not take the board down with it
                first = (str(e).splitlines() or [""])[0][:300]
                result.problems.append(f"{rel} cannot be verified and is left off the board: {type(e).__name__}: "
                                       f"{first}")
                continue
            if (report.header.get("suite") or {}).get("subset_of"):
                result.problems.append(f"{rel} is a run of a subset of {suite.ref} (agentgym-eval --envs/--tasks): "
                                       "it verifies, but a board ranks full runs only; move it out of submissions/")
            elif report.ok:
                ranked.append(Entry(suite, rel, report))
            else:
                shown = report.problems[:5] + ([f"... {len(report.problems) - 5} more"] if len(report.problems) > 5
                                               else [])
                result.problems.append(f"{rel} does not verify and is left off the board: " + "; ".join(shown))
        ranked.sort(key=lambda e: (-e.report.overall["mean"], e.row()["name"]))
        result.entries += ranked
    md = render_markdown(suites, result.entries)
    target = (root if check else out) / BOARD_MD
    if check:
        current = target.read_text() if target.exists() else ""
        if current != md:
            result.problems.append(f"{target} is not what the submissions give: run `agentgym leaderboard build` "
                                   "and commit the result")
    else:
        out.mkdir(parents=True, exist_ok=True)
        target.write_text(md)
        result.markdown = target
        site = site_dir or out / "board" / "site"
        _write_site(site, suites, result.entries)
        result.site = site
    result.ok = not result.problems
    return result
