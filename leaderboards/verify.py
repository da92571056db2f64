"""``agentgym leaderboard verify``: re-score a submission by replaying every episode.

Nothing the verifier can recompute is taken from the file. It checks, in order:

1. the file: every line parses, the header comes first and the footer last (else: truncated);
2. the header: schema; the suite it carries hashes to the version it names, and that version is
   the suite's current one; the declared sampling matches the suite; the tokenizer loads;
3. each episode: schema; env id, task and trial belong to the suite; the seed is the suite's seed
   for that trial (a seed of another trial means the episode was picked from extra trials);
   options are the suite's; no (env, task, trial) twice; none missing;
4. replay (:mod:`.replay`): the env at the suite's seed, fed the recorded actions, must produce
   every recorded token, reward, component, turn and flag; the episode's score and token counts
   must be the replay's;
5. trials: a sampling entry (temperature > 0) whose trials of one task carry the same action
   stream is refused unless the stream's recorded probability makes a repeat plausible
   (:data:`COPY_P`); a deterministic entry (temperature 0, or ``null`` for a scripted policy) has
   identical trials by design and is scored on trial 0 alone (pass^1, one sample per task);
6. the footer: episode count, per-env scores, intervals, pass^k and token totals recomputed;
7. a header that names one of agentgym's scripted policies (:data:`SCRIPTED`) is re-run by the
   verifier on every episode: actions that policy does not play (another policy's episodes under
   its name) are refused.

Every problem names the line and the episode (env, task, options, trial) and what differs.

A submission for a subset of a suite (``agentgym-eval --envs/--tasks``) is checked against the
subset re-derived from the current full suite; it verifies, and boards leave it out. An
``agentgym-eval`` progress file (``OUT.partial``, a run stopped by ``--max-episodes`` or a kill)
is refused with what to do instead. Infrastructure faults are never scores: an episode that
ended in one has no place in a submission (agentgym-eval retries such episodes), and a replay
that meets one is tried again on a fresh environment, then reported as a fault of this
verification, not as a difference.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.errors import AgentGymError, ConfigError, InfraError, SubmissionError, infra_note
from agentgym.leaderboards.replay import check_structure, compare, replay
from agentgym.leaderboards.stats import env_summary, overall_summary
from agentgym.leaderboards.submission import (
    RawSubmission,
    episode_cost,
    episode_score,
    load_tokenizer,
    read_raw,
    schema_validator,
)
from agentgym.leaderboards.suite import EpisodeSpec, Suite, load_suite, suite_from_dict
from agentgym.trajectory import Trajectory

__all__ = ["COPY_P", "SCRIPTED", "Replayed", "VerifyReport", "deterministic", "score_lines", "scored_trials", "summarize",
           "verify_submission"]

MAX_LISTED = 20  # missing episodes listed one by one before "... and N more"
PER_EPISODE = 6  # differences reported per episode (the first ones; later ones usually follow from them)
SHOWN = 40  # problems printed by VerifyReport.format (all are in report.problems / --json)
REPLAY_RETRIES = 2  # fresh-env replays of an episode whose replay met an infrastructure fault
# Two independent samples repeat a stream with probability p(stream): a repeat of a stream the
# policy itself gave p < COPY_P is a copy (a false alarm costs a chance of at most COPY_P per pair).
COPY_P = 1e-6
# Scripted policies the verifier re-runs, with the header arguments it accepts (strings only: an
# ``oracle=module:function`` argument would make the verifier import the submitter's code).
SCRIPTED: dict[str, frozenset[str]] = {"oracle": frozenset(), "do-nothing": frozenset({"note"}),
                                       "just-answer": frozenset({"answer"})}


@dataclass
class Replayed:
    spec: EpisodeSpec
    line: int
    record: dict[str, Any]  # the episode line as submitted
    truth: Trajectory  # the replay's trajectory (logprobs copied from the record when it verified)


@dataclass
class VerifyReport:
    path: Path
    ok: bool = False
    problems: list[str] = field(default_factory=list)
    suite: Suite | None = None
    header: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)  # recomputed, per env id
    overall: dict[str, Any] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)  # recomputed token totals (+ claimed wall time)
    episodes: list[Replayed] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)  # diagnoses that explain many problems at once
    trials: int = 1  # trials per task that are scored (1 for a deterministic entry: :func:`scored_trials`)
    provenance: Any = None  # a provenance.Provenance when verified with a model (--model)
    scripted: str | None = None  # the scripted policy the verifier re-ran on every episode (SCRIPTED)

    def format(self) -> str:
        head = f"{self.path}: " + ("VERIFIED" if self.ok else f"REJECTED ({len(self.problems)} problems)")
        lines = [head]
        if self.suite is not None:
            lines.append(f"  suite {self.suite.ref}, {len(self.episodes)} episodes replayed in {self.seconds:.1f} s")
        lines += [f"  note: {n}" for n in self.notes]
        if self.provenance is not None:
            lines.append(f"  {self.provenance.summary()}")
        lines += [f"  - {p}" for p in self.problems[:SHOWN]]
        if len(self.problems) > SHOWN:
            lines.append(f"  ... and {len(self.problems) - SHOWN} more problems (--json lists them all)")
        if self.scores:
            lines += score_lines(self.scores, self.overall, self.trials)
        return "\n".join(lines)


def score_lines(scores: dict[str, dict[str, Any]], overall: dict[str, Any], trials: int) -> list[str]:
    """The score table (per env and overall: mean, 95% interval, pass^k, episodes), indented."""
    lines = [f"  {'env':28s} {'score':>7s} {'95% interval':>17s} {'pass^' + str(trials):>8s} {'episodes':>9s}"]
    for env_id, s in {**scores, "overall": overall}.items():
        lines.append(f"  {env_id:28s} {s['mean']:7.3f}   [{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}] "
                     f"{s['pass_k']:8.3f} {s['episodes']:9d}")
    return lines


def deterministic(describe: dict[str, Any]) -> bool:
    """An entry that declares no sampling: temperature 0 (greedy) or ``null`` (a scripted policy)."""
    temp = describe.get("temperature")
    return temp is None or temp == 0


def scored_trials(suite: Suite, describe: dict[str, Any]) -> int:
    """Trials per task that count: all of them for a sampling entry, trial 0 for a deterministic one
    (its trials are the same episode k times: k copies are one sample, not k)."""
    return 1 if deterministic(describe) else suite.trials


def summarize(suite: Suite, scored: list[tuple[EpisodeSpec, Trajectory]], trials: int | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per-env summaries (suite order) and the overall one, from (spec, trajectory) pairs; only
    trials ``0..trials-1`` count (default: all of the suite's)."""
    k = suite.trials if trials is None else trials
    by_env: dict[str, dict[int, list[float]]] = {e.id: {} for e in suite.envs}
    for spec, traj in scored:
        if spec.trial < k:
            by_env[spec.env.id].setdefault(spec.task, []).append(episode_score(traj))
    per_env = {env_id: env_summary(tasks, k) for env_id, tasks in by_env.items()}
    return per_env, overall_summary(per_env)


def _schema_problems(kind: str, obj: dict[str, Any]) -> list[str]:
    errs = sorted(schema_validator(kind).iter_errors(obj), key=lambda e: list(e.absolute_path))
    out = [f"schema: {'/'.join(str(p) for p in e.absolute_path) or '(top level)'}: {e.message[:200]}"
           for e in errs[:5]]
    if kind == "episode" and not out:
        out = _array_problems(obj["trajectory"])
    return out


def _array_problems(traj: dict[str, Any]) -> list[str]:
    """The per-token arrays, checked in plain Python: jsonschema takes ~1 s per 10k-token episode."""
    out = []
    tokens, mask, lps = traj["tokens"], traj["policy_mask"], traj["logprobs"]
    bad = next((i for i, x in enumerate(tokens) if type(x) is not int or x < 0), None)
    if bad is not None:
        out.append(f"schema: trajectory/tokens/{bad}: {tokens[bad]!r} is not a non-negative integer")
    bad = next((i for i, x in enumerate(mask) if type(x) is not int or x not in (0, 1)), None)
    if bad is not None:
        out.append(f"schema: trajectory/policy_mask/{bad}: {mask[bad]!r} is not 0 or 1")
    bad = next((i for i, x in enumerate(lps) if x is not None and type(x) not in (int, float)), None)
    if bad is not None:
        out.append(f"schema: trajectory/logprobs/{bad}: {lps[bad]!r} is not a number or null")
    return out


class _Envs:
    """One environment per (worker thread, env id), built lazily; all closed at the end."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def get(self, spec: EpisodeSpec) -> Any:
        envs = self._local.__dict__.setdefault("envs", {})
        if spec.env.id not in envs:
            envs[spec.env.id] = spec.env.make(self.tokenizer)
            with self._lock:
                self._all.append(envs[spec.env.id])
        return envs[spec.env.id]

    def drop(self, spec: EpisodeSpec) -> None:
        """Close this thread's env of ``spec``'s env id: the next :meth:`get` builds a new one."""
        env = self._local.__dict__.get("envs", {}).pop(spec.env.id, None)
        if env is not None:
            with self._lock:
                self._all.remove(env)
            env.close()

    def close(self) -> None:
        for e in self._all:
            e.close()


def _check_header(raw: RawSubmission, suite: Suite | None, report: VerifyReport) -> tuple[Suite, Any] | None:
    """Header checks; returns the suite to replay against and the tokenizer, or None to stop."""
    header = raw.header
    if header is None:
        return None
    probs = _schema_problems("header", header)
    if probs:
        report.problems += [f"line 1 (header): {p}" for p in probs]
        return None
    report.header = header
    try:
        carried = suite_from_dict(header["suite"], "the suite in the header")
    except ConfigError as e:
        report.problems.append(f"line 1 (header): the suite was altered after the run: {e}")
        return None
    try:
        current = suite or load_suite(carried.name)
        sub = carried.subset_of
        if sub is not None:  # re-derived from the current full suite, never taken from the file
            if current.subset_of is None:
                current = current.subset(sub.get("envs"), sub.get("tasks"))
            report.notes.append(f"a subset of {sub.get('suite')} (envs {sub.get('envs') or 'all'}, tasks "
                                f"{sub.get('tasks') or 'all'}): it verifies like a full run; boards take only full suites")
    except ConfigError as e:
        report.problems.append(f"line 1 (header): {e}")
        return None
    report.suite = current
    if (carried.name, carried.version) != (current.name, current.version):
        report.problems.append(
            f"line 1 (header): the submission was made for suite {carried.ref}, but the suite to verify against "
            f"is {current.ref}: a different suite version (re-run agentgym-eval with the current suite)")
        return None
    describe = header["submission"]["describe"]
    temp = describe.get("temperature")
    if "temperature" not in describe:
        report.problems.append("line 1 (header): submission.describe has no 'temperature': declare the sampling "
                               f"temperature ({current.temperature} for this suite), 0 for greedy decoding, or null "
                               "for a scripted policy (agentgym-eval records it)")
    elif temp is not None and (type(temp) not in (int, float) or not math.isfinite(temp)):
        report.problems.append(f"line 1 (header): submission.describe.temperature is {str(temp)[:40]!r}: expected a "
                               "number (the suite's temperature, or 0 for greedy decoding) or null (a scripted policy)")
        return None
    elif temp is not None and not (math.isclose(temp, current.temperature) or temp == 0):
        report.problems.append(f"line 1 (header): the policy sampled at temperature {temp}, the suite requires "
                               f"{current.temperature} (or 0: greedy decoding, scored on one trial)")
    try:
        tok = load_tokenizer(header["submission"]["tokenizer"])
    except SubmissionError as e:
        report.problems.append(f"line 1 (header): {e}")
        return None
    return current, tok


def _check_episodes(raw: RawSubmission, suite: Suite, report: VerifyReport
                    ) -> list[tuple[EpisodeSpec, int, dict[str, Any]]]:
    """Static checks of every episode line; returns the ones worth replaying."""
    expected = {s.key: s for s in suite.episodes()}
    env_ids = {e.id for e in suite.envs}
    seen: dict[tuple[str, int, int], int] = {}
    todo = []
    for line, obj in raw.episodes:
        probs = _schema_problems("episode", obj)
        if probs:
            report.problems += [f"line {line}: {p}" for p in probs]
            continue
        env_id, task, trial = obj["env_id"], obj["task"], obj["trial"]
        if env_id not in env_ids:
            report.problems.append(f"line {line}: env {env_id!r} is not in suite {suite.ref} (it has "
                                   f"{sorted(env_ids)}): a different environment or environment version")
            continue
        env = suite.env(env_id)
        if task >= len(env.tasks):
            report.problems.append(f"line {line}: {env_id} task {task} does not exist (the suite has "
                                   f"{len(env.tasks)} tasks for it)")
            continue
        if trial >= suite.trials:
            report.problems.append(f"line {line}: {env_id} task {task} trial {trial}: the suite declares "
                                   f"{suite.trials} trials (0..{suite.trials - 1}): an episode from more trials "
                                   "than declared (cherry-picked)")
            continue
        spec = expected[(env_id, task, trial)]
        where = f"line {line}: {spec.label}"
        if spec.key in seen:
            report.problems.append(f"{where}: duplicated episode (also on line {seen[spec.key]})")
            continue
        seen[spec.key] = line
        if obj["seed"] != spec.seed:
            other = suite.trial_of_seed(env_id, task, obj["seed"])
            if other is not None:
                report.problems.append(
                    f"{where}: seed {obj['seed']} is the seed of trial {other} of this task, not of trial "
                    f"{trial} ({spec.seed}): the episode was picked from more trials than the {suite.trials} "
                    "declared and relabelled (cherry-picked)")
            else:
                report.problems.append(f"{where}: wrong seed {obj['seed']}; the suite's seed for this episode "
                                       f"is {spec.seed}")
            continue
        if obj["options"] != spec.options:
            report.problems.append(f"{where}: options {obj['options']} differ from the suite's {spec.options}")
            continue
        if obj["trajectory"]["env_id"] != env_id:
            report.problems.append(f"{where}: the trajectory was recorded on {obj['trajectory']['env_id']!r}, "
                                   f"the suite runs {env_id!r} (a different environment version)")
            continue
        todo.append((spec, line, obj))
    missing = [s for k, s in expected.items() if k not in seen]
    for s in missing[:MAX_LISTED]:
        report.problems.append(f"missing episode: {s.label} (seed {s.seed})")
    if len(missing) > MAX_LISTED:
        report.problems.append(f"... and {len(missing) - MAX_LISTED} more missing episodes")
    return todo


def _scripted_policy(header: dict[str, Any]) -> Any:
    """The scripted policy a header names, built to be re-run (None when it names none)."""
    sub = header["submission"]
    name, args = sub.get("policy"), sub.get("policy_args")
    if name not in SCRIPTED or not isinstance(args, dict) or set(args) - SCRIPTED[name] \
            or not all(isinstance(v, str) for v in args.values()):
        return None
    from agentgym.leaderboards.policies import make_policy

    return make_policy(name, None, **args)


def _rerun(env: Any, policy: Any, spec: EpisodeSpec, truth: Trajectory, tokenizer: Any) -> list[str]:
    """Play ``spec`` with the scripted ``policy``: it must give the replayed episode token for token."""
    played = policy.play(env, seed=spec.seed, options=spec.options)
    if played.meta.get("infra_error"):
        return [f"not verified: re-running the scripted policy {policy.name!r} met an infrastructure fault "
                f"({played.meta['infra_error']}); this is the verifying machine's problem: verify again"]
    if played.tokens == truth.tokens:
        return []
    n = min(len(played.tokens), len(truth.tokens))
    i = next((j for j in range(n) if played.tokens[j] != truth.tokens[j]), n)
    return [f"the actions are not those of the scripted policy {policy.name!r} that the header names (the verifier "
            f"re-ran it): from token {i} the record has {_decoded(tokenizer, truth.tokens, i)}, the policy plays "
            f"{_decoded(tokenizer, played.tokens, i)}: an episode of another policy"]


def _decoded(tok: Any, ids: list[int], i: int) -> str:
    try:
        return repr(tok.decode(ids[i: i + 24]))
    except Exception:  # ids a record made up may not decode
        return repr(ids[i: i + 24])


def _replay_one(envs: _Envs, spec: EpisodeSpec, line: int, obj: dict[str, Any], scripted: Any = None
                ) -> tuple[Replayed | None, list[str]]:
    where = f"line {line}: {spec.label}"
    record = Trajectory.from_dict(obj["trajectory"])
    bad = check_structure(record)
    if bad:
        return None, [f"{where}: malformed trajectory: {bad}"]
    if record.meta.get("infra_error"):
        return None, [f"{where}: the episode ended in an infrastructure fault ({record.meta['infra_error']}): it has "
                      "no score; agentgym-eval retries such episodes, and a submission holds none"]
    fault = None
    for _ in range(REPLAY_RETRIES + 1):
        env = envs.get(spec)
        refused = _unreplayable(env, record)
        if refused:
            return None, [f"{where}: {refused}"]
        try:
            truth, probs = replay(env, record, seed=spec.seed, options=spec.options)
        except InfraError as e:
            fault = infra_note(e)
        except AgentGymError as e:
            return None, [f"{where}: the replay failed: {type(e).__name__}: {e}"]
        else:
            fault = truth.meta.get("infra_error")
            if not fault:
                break
        envs.drop(spec)  # the next try gets a fresh environment (a new sandbox, a revived server)
    else:
        return None, [f"{where}: not verified: the replay met an infrastructure fault {REPLAY_RETRIES + 1} "
                      f"times ({fault}); this is the verifying machine's problem, not the submission's: "
                      "fix it and verify again"]
    diffs = compare(record, truth, envs.tokenizer)
    if len(diffs) > PER_EPISODE:
        diffs = diffs[:PER_EPISODE] + [f"... and {len(diffs) - PER_EPISODE} more differences in this episode"]
    probs += diffs
    score = episode_score(truth)
    if obj["score"] != score:
        probs.append(f"score: recorded {obj['score']}, replay gives {score}")
    cost = episode_cost(truth)
    for k in ("input_tokens", "output_tokens", "turns"):
        if obj["cost"][k] != cost[k]:
            probs.append(f"cost {k}: recorded {obj['cost'][k]}, replay gives {cost[k]}")
    if not probs and scripted is not None:
        probs += _rerun(envs.get(spec), scripted, spec, truth, envs.tokenizer)
    if not probs:
        truth.logprobs = list(record.logprobs)  # the policy's own numbers: kept for transcripts
    return Replayed(spec, line, obj, truth), [f"{where}: {p}" for p in probs]


def _check_copies(report: VerifyReport, describe: dict[str, Any]) -> None:
    """Trials of one task with the same action stream, where the declared sampling cannot repeat it."""
    if deterministic(describe) or "temperature" not in describe:
        return
    first: dict[tuple[str, int, tuple[int, ...]], Replayed] = {}
    for r in sorted(report.episodes, key=lambda r: r.spec.key):
        t = r.truth
        actions = tuple(x for x, m in zip(t.tokens, t.policy_mask) if m)
        if not actions:
            continue
        key = (r.spec.env.id, r.spec.task, actions)
        if key not in first:
            first[key] = r
            continue
        lps = [lp for lp, m in zip(r.record["trajectory"]["logprobs"], t.policy_mask) if m]
        logp = None if any(lp is None for lp in lps) else float(sum(lps))
        if logp is not None and logp >= math.log(COPY_P):
            continue  # a likely stream: independent samples may well repeat it
        chance = "no recorded log-probs to show it likely" if logp is None else \
            f"recorded probability {math.exp(logp):.1e} < {COPY_P:.0e}"
        o = first[key]
        task = r.spec.label.rsplit(" trial ", 1)[0]
        report.problems.append(
            f"line {r.line}: {task}: trials {o.spec.trial} and "
            f"{r.spec.trial} carry the same {len(actions)} action tokens ({chance}): sampling at temperature "
            f"{describe['temperature']} with different seeds does not repeat them: copies of one episode")


def _unreplayable(env: Any, record: Trajectory) -> str | None:
    """Why this episode cannot be verified by replay (None when it can): an imported env whose
    source is not replayable, or an episode an infrastructure fault cut short."""
    prov = getattr(env.unwrapped, "provenance", None)
    if callable(prov):
        p = prov()
        if not p.replayable:
            return (f"not verifiable: {p.hub} ({p.source}) is not replayable ({p.replay_note}); a score on it "
                    "cannot be checked by replaying the actions, so it is refused rather than trusted")
    if record.meta.get("infra_error"):
        return (f"the episode was cut by an infrastructure fault ({record.meta['infra_error']}): it has no "
                "outcome to verify; re-run it")
    return None


def _check_footer(raw: RawSubmission, report: VerifyReport, n_lines: int) -> None:
    footer = raw.footer
    if footer is None:
        return
    probs = _schema_problems("footer", footer)
    if probs:
        report.problems += [f"footer: {p}" for p in probs]
        return
    if footer["episodes"] != n_lines:
        report.problems.append(f"footer: claims {footer['episodes']} episodes, the file has {n_lines}")
    claimed = {**footer["scores"], "overall": footer["overall"]}
    actual = {**report.scores, "overall": report.overall}
    for env_id in sorted(set(claimed) | set(actual)):
        a, b = claimed.get(env_id), actual.get(env_id)
        if a is None or b is None:
            report.problems.append(f"footer: scores for {env_id!r}: claimed {a is not None}, recomputed {b is not None}")
            continue
        for key in ("mean", "pass_k", "tasks", "episodes"):
            if not math.isclose(a[key], b[key], abs_tol=1e-9):
                report.problems.append(f"footer: {env_id} {key}: claimed {a[key]}, replay gives {b[key]}")
        if not all(math.isclose(x, y, abs_tol=1e-9) for x, y in zip(a["ci95"], b["ci95"])):
            report.problems.append(f"footer: {env_id} ci95: claimed {a['ci95']}, replay gives {b['ci95']}")
    for k in ("input_tokens", "output_tokens", "turns"):
        if footer["cost"][k] != report.cost.get(k):
            report.problems.append(f"footer: cost {k}: claimed {footer['cost'][k]}, replay gives {report.cost.get(k)}")


def verify_submission(path: str | Path, *, suite: Suite | None = None, workers: int = 4, progress: bool = False,
                      on_episode: Callable[[int, int], None] | None = None, model: str | None = None,
                      provenance: dict[str, Any] | None = None) -> VerifyReport:
    """Verify one submission file; ``suite`` overrides the one named in the header (default: the
    current ``leaderboards/suites/NAME.yaml``). With ``model`` (a model dir), a file that replays
    is also checked for provenance (:mod:`.provenance`; ``provenance``: keyword arguments of
    :func:`~.provenance.check_provenance`). Never raises on content: see ``report.problems``."""
    t0 = time.perf_counter()
    report = VerifyReport(Path(path))
    _refuse_progress_file(Path(path))
    raw = read_raw(path)
    report.problems += raw.problems
    got = _check_header(raw, suite, report)
    if got is None:
        report.seconds = time.perf_counter() - t0
        return report
    the_suite, tok = got
    todo = _check_episodes(raw, the_suite, report)
    scripted = _scripted_policy(report.header)
    envs = _Envs(tok)
    bar = None
    if progress:
        from agentgym.trainer.metrics import Progress

        bar = Progress(len(todo), "verify")
    done = 0
    try:
        with ThreadPoolExecutor(max(1, workers), thread_name_prefix="agentgym-verify") as pool:
            futures = [pool.submit(_replay_one, envs, spec, line, obj, scripted) for spec, line, obj in todo]
            for fut in futures:
                rep, probs = fut.result()
                report.problems += probs
                if rep is not None:
                    report.episodes.append(rep)
                done += 1
                if bar is not None:
                    bar.update(done)
                if on_episode is not None:
                    on_episode(done, len(todo))
    finally:
        if bar is not None:
            bar.close()
        envs.close()
    describe = report.header["submission"]["describe"]
    _check_copies(report, describe)
    report.trials = scored_trials(the_suite, describe)
    report.scores, report.overall = summarize(the_suite, [(r.spec, r.truth) for r in report.episodes], report.trials)
    costs = [episode_cost(r.truth) for r in report.episodes]
    report.cost = {k: sum(c[k] for c in costs) for k in ("input_tokens", "output_tokens", "turns")}
    report.cost["wall_s"] = round(sum(float(r.record["cost"]["wall_s"]) for r in report.episodes), 3)
    _check_footer(raw, report, len(raw.episodes))
    _diagnose(report)
    if model is not None and not report.problems:
        from agentgym.leaderboards.provenance import check_provenance

        report.provenance = check_provenance(report, model, **(provenance or {}))
        report.problems += report.provenance.problems
    report.ok = not report.problems
    report.scripted = scripted.name if scripted is not None and report.ok else None
    report.seconds = time.perf_counter() - t0
    return report


def _refuse_progress_file(path: Path) -> None:
    """An agentgym-eval progress file is not a submission: say what it is and what to do."""
    if not path.name.endswith(".partial") or not path.is_file():
        return
    from agentgym.leaderboards.limits import MAX_LINE_BYTES, LineError, parse_line

    with open(path, encoding="utf-8", errors="replace") as f:
        try:
            first = parse_line(f.readline(MAX_LINE_BYTES) or "{}")
        except LineError:
            return
        if not (isinstance(first, dict) and first.get("kind") == "run"):
            return
        done = sum(1 for line in iter(lambda: f.readline(MAX_LINE_BYTES), "") if '"kind":"episode"' in line)
    raise SubmissionError(
        f"{path} is agentgym-eval's progress file of an unfinished run of {first.get('suite')} ({done} episodes "
        "done), not a submission: nothing in it is checked until the run ends. Run the same agentgym-eval "
        "command again to finish it (it resumes), or, for a small verifiable run, use agentgym-eval --envs "
        "ID and/or --tasks N: a subset submission verifies like a full one")


def _diagnose(report: VerifyReport) -> None:
    """One note for what usually explains many problems: prompts that differ from the replay's."""
    import agentgym

    changed = [r for r in report.episodes
               if r.record["trajectory"]["tokens"][:r.truth.prompt_len] != r.truth.tokens[:r.truth.prompt_len]]
    if not changed:
        return
    made = report.header.get("submission", {}).get("agentgym_version", "?")
    report.notes.append(
        f"{len(changed)} of {len(report.episodes)} episodes differ from the replay already in their prompt, "
        f"before any action: either the prompts were edited, or the environments now behave differently from "
        f"when the submission was made (agentgym {made}; this is {agentgym.__version__}). Submissions must be "
        "re-run with agentgym-eval when an environment changes.")
