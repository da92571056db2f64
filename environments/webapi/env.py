"""``agentgym/WebAPI-v1``: serve a store's customer through its real HTTP API.

The environment launches (or joins) the store's uvicorn server, gives every episode its
own database under a fresh episode key, offers one tool per OpenAPI operation, and scores
the final answer by comparing the episode's database with the task's goal state, the
``ANSWER:`` with the value the episode looked up, and a refusal with the rule and the fact the
API showed (see :mod:`.reward` and :mod:`.tasks`)::

    env = gym.make("agentgym/WebAPI-v1", split="train")
    obs, info = env.reset(seed=0)                       # or options={"task_id": "cancel-16"}

Options: ``split`` ("train" | "eval" | "all": every task; also a reset option),
``database_url`` (a ``postgresql://`` DSN;
default SQLite files), ``server_url`` (use a server that is already running),
``transport`` (an ``httpx.BaseTransport``, e.g. ``httpx.MockTransport`` for offline tests),
``request_timeout`` (seconds per tool call), ``test_endpoints`` (adds a slow ``sleep`` tool,
for tests), plus every ``ToolEnv`` option (tokenizer, reward_mode, max_turns, ...).

A server that dies or hangs under an episode (a call gets no answer and the health check
fails too, or the final state cannot be read) ends the episode as an infrastructure fault
(``info["infra_error"]``), not as a 0; the next ``reset`` gets a restarted server. So does a
database that fails under a call (the server answers 503): a PostgreSQL restart costs the
episodes in flight, and the server reconnects for the next ones.
"""

from __future__ import annotations

import difflib
import uuid
from typing import Any

import httpx
import numpy as np

from agentgym.env import Task, ToolEnv
from agentgym.environments.webapi.launcher import ServerConfig, ServerProcess, acquire, release
from agentgym.environments.webapi.reward import CallRecord, evaluate, refusal_line, shown
from agentgym.environments.webapi.store_client import StoreClient, tools_from_openapi
from agentgym.environments.webapi.tasks import (
    FACTS,
    POLICY,
    SPLITS,
    WebTask,
    all_tasks,
    base_snapshot,
    goal_state,
    split_tasks,
)
from agentgym.errors import ConfigError, ServiceError, ServiceLost
from agentgym.tools import Tool, ToolResult

__all__ = ["WebAPIEnv"]

MOCK_BASE_URL = "http://webapi.invalid"  # base URL when only a transport is given
HEALTH_TIMEOUT_S = 3.0  # after a call got no answer: a server that cannot say it is alive is lost
STORAGE_DOWN = 503  # the server's answer when its database fails under a request


class WebAPIEnv(ToolEnv):
    default_id = "agentgym/WebAPI-v1"
    instructions = POLICY
    splits = SPLITS  # ("train", "eval", "all")
    # Shaped terms (see reward.py). answer_correct is reported only: the outcome already pays it.
    extra_shaping = {"progress": 0.5, "forbidden_writes": -0.25, "answer_correct": 0.0}

    def __init__(self, *, split: str = "train", database_url: str | None = None, server_url: str | None = None,
                 transport: httpx.BaseTransport | None = None, request_timeout: float = 10.0,
                 test_endpoints: bool = False, max_turns: int = 16, max_tokens: int = 32768,
                 **kwargs: Any) -> None:
        # The prompt alone (policy + 13 tool signatures) is ~4.7k byte-level tokens, and API
        # answers are JSON: a larger default budget than ToolEnv's 8192.
        super().__init__(max_turns=max_turns, max_tokens=max_tokens, split=split, **kwargs)
        if database_url is not None and (server_url is not None or transport is not None):
            raise ConfigError("database_url configures the server this env launches; a server given by "
                              "server_url or transport has its own database. Pass one or the other.")
        if database_url is not None and not database_url.startswith(("postgresql://", "postgres://")):
            raise ConfigError(f"database_url must be a postgresql:// DSN, got {database_url!r} "
                              "(leave it out for per-episode SQLite files)")
        if not request_timeout > 0:
            raise ConfigError(f"request_timeout must be > 0 seconds, got {request_timeout!r}")
        self.request_timeout = float(request_timeout)
        self._tasks = split_tasks(split)
        self._transport = transport
        self._server_url = server_url
        self._config = ServerConfig(database_url=database_url, test_endpoints=test_endpoints)
        self.server: ServerProcess | None = None  # the shared server this env holds a reference on
        self.client: StoreClient | None = None
        self._tool_list: list[Tool] = []
        self.episode_key: str | None = None
        self.web_task: WebTask | None = None
        self.calls: list[CallRecord] = []  # this episode's tool calls and the API's answers

    # ------------------------------------------------------------------ connection
    def _base_url(self) -> str:
        if self._transport is not None or self._server_url is not None:
            return self._server_url or MOCK_BASE_URL
        if self.server is None:
            self.server = acquire(self._config)
        return self.server.ensure()

    def _connect(self) -> StoreClient:
        url = self._base_url()
        if self.client is None or self.client.base_url != url:
            if self.client is not None:
                self.client.close()
            self.client = StoreClient(url, transport=self._transport, timeout_s=self.request_timeout)
            self._tool_list = tools_from_openapi(self.client.openapi(), self._call_target, self._on_call)
        return self.client

    def _call_target(self) -> tuple[StoreClient, str]:
        assert self.client is not None and self.episode_key is not None
        return self.client, self.episode_key

    def _on_call(self, record: CallRecord) -> None:
        self.calls.append(record)
        if record.status == STORAGE_DOWN:  # the server's database failed under this call
            raise ServiceLost(f"the WebAPI server's database failed under {record.op} (HTTP 503: "
                              f"{str(record.data)[:300]}); the episode's state is lost")
        if record.status is None:  # no answer: a slow endpoint (the model's business) or a lost server
            self._check_server()

    def _check_server(self) -> None:
        """ServiceLost when the server does not answer its health check: the episode's database
        went with it, so the episode is an infrastructure fault, not the model's failure."""
        assert self.client is not None
        try:
            self.client.health(timeout=HEALTH_TIMEOUT_S)
        except ServiceError as e:
            raise ServiceLost(f"the WebAPI server stopped answering mid-episode ({e}); the episode's "
                              "state is lost") from e

    def _drop_episode(self) -> None:
        key, self.episode_key = self.episode_key, None
        if key is not None and self.client is not None:
            try:
                self.client.delete_episode(key)
            except ServiceError:
                pass  # the server went away with its databases: nothing left to delete

    # ------------------------------------------------------------------ ToolEnv API
    def sample_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        if "task_id" in options:
            by_id = {t.id: t for t in all_tasks()}
            wt = by_id.get(options["task_id"])
            if wt is None:
                near = difflib.get_close_matches(str(options["task_id"]), by_id, n=3)
                raise ConfigError(f"unknown WebAPI task_id {options['task_id']!r}; did you mean {near}? "
                                  "(ids look like 'cancel-16'; see agentgym.environments.webapi.tasks.all_tasks())")
            split = options.get("split", self.split)
            if split not in ("all", wt.split):
                raise ConfigError(f"WebAPI task {wt.id!r} is in split {wt.split!r}, not {split!r}; "
                                  f"pass split={wt.split!r} (or 'all')")
        else:
            split = options.get("split", self.split)
            tasks = split_tasks(split)
            if "index" in options:
                i = options["index"]
                if not isinstance(i, (int, np.integer)) or not 0 <= i < len(tasks):
                    raise ConfigError(f"options['index'] must be an int in [0, {len(tasks)}) for split "
                                      f"{split!r}, got {i!r}")
                wt = tasks[int(i)]
            else:
                wt = tasks[int(rng.integers(len(tasks)))]
        self.web_task = wt
        return Task(id=wt.id, prompt=wt.prompt, answer=wt.answer,
                    meta={"kind": wt.kind, "forbidden": wt.forbidden, "split": wt.split})

    def on_reset(self) -> None:
        assert self.web_task is not None  # sample_task ran
        client = self._connect()
        self._drop_episode()
        self.calls.clear()
        key = uuid.uuid4().hex
        try:
            client.create_episode(key, self.web_task.split)
        except ServiceError as e:
            if self.server is None:  # not our server to restart: the error says which URL failed
                raise ServiceLost(f"the WebAPI server cannot start an episode: {e}") from e
            self._revive(client)
            client = self._connect()
            try:
                client.create_episode(key, self.web_task.split)
            except ServiceError as e:
                raise ServiceLost(f"the WebAPI server cannot start an episode, even restarted: {e}") from e
        self.episode_key = key

    def _revive(self, client: StoreClient) -> None:
        """The shared server failed a request: restart it if it is dead or hung. A server that
        answers but whose database does not is left running: it reconnects when the database is
        back, and a restart would not bring the database back sooner."""
        assert self.server is not None
        if client.database_down(timeout=HEALTH_TIMEOUT_S):
            raise ServiceLost(f"the WebAPI server at {client.base_url} answers, but its database does not "
                              "(health: HTTP 503); the next reset tries again")
        proc = self.server.proc
        if proc is not None:
            try:
                proc.wait(1.0)  # killed or crashed: let it be reaped, ensure() starts a new one
                return
            except Exception:
                pass
        try:
            client.health()
        except ServiceError:
            self.server.restart(client.base_url)  # alive but not answering: its episodes are lost anyway

    def tools(self) -> list[Tool]:
        return self._tool_list

    def score_final(self, answer: str) -> ToolResult:
        assert self.web_task is not None and self.client is not None and self.episode_key is not None
        try:
            final = self.client.snapshot(self.episode_key)
        except ServiceError as e:  # no verdict without the final state: not a 0 for the model
            raise ServiceLost(f"could not read the episode's final state from the WebAPI server: {e}") from e
        wt = self.web_task
        seen = shown(wt.evidence, self.calls)
        kind = FACTS[wt.refusal][0] if wt.refusal else ""
        outcome, comps = evaluate(goal_state(wt), final, base_snapshot(wt.split), wt.answer, answer,
                                  refusal=wt.refusal, fact=wt.fact, fact_kind=kind, proof=wt.proof,
                                  established=seen)
        said = refusal_line(answer)
        verdict = f"refusal named: {said or 'none'}"
        if wt.forbidden or wt.answer is not None:
            verdict += f"; looked up with the API: {'yes' if seen else 'no'}"
        return ToolResult(verdict, terminal=True, outcome=outcome, components=comps)

    def on_close(self) -> None:
        self._drop_episode()
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.server is not None:
            release(self.server)
            self.server = None
