// The agentgym board page: a sortable table of verified submissions and readable transcripts.
// Everything a model wrote is inserted with textContent, never as HTML: transcripts are hostile input.
// Transcripts live in transcripts/<id>.js, loaded with a <script> tag on demand (works from file://).
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("board-data").textContent);
  const state = { suite: DATA.suites.length ? DATA.suites[0].name : null, sortKey: "overall", sortDir: -1 };

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  const fix = (x, d) => (x === null || x === undefined ? "" : Number(x).toFixed(d));
  const suiteOf = (name) => DATA.suites.find((s) => s.name === name);
  const short = (envId) => envId.split("/").pop();

  function scoreCell(s) {
    return el("td", { class: "num", "data-value": s.mean }, fix(s.mean, 3),
      el("span", { class: "ci" }, "[" + fix(s.ci95[0], 2) + ", " + fix(s.ci95[1], 2) + "]"));
  }
  function numCell(v, d) { return el("td", { class: "num", "data-value": v }, fix(v, d)); }

  function columns(suite) {
    const cols = [
      { key: "rank", label: "#", value: (r) => r._rank, cell: (r) => numCell(r._rank, 0) },
      { key: "name", label: "Submission", value: (r) => r.name.toLowerCase(),
        cell: (r) => el("td", {}, el("button", { class: "link open", "data-id": r.id, onclick: () => openSubmission(r) }, r.name)) },
      { key: "model", label: "Model", value: (r) => r.model.toLowerCase(),
        cell: (r) => el("td", {}, r.model, " ", el("span", { class: "prov " + r.provenance,
          title: r.provenance === "checked" ? "actions re-scored under these weights" : "the submitter's word: replay proves the scores, not which policy chose the actions" },
          "(" + r.provenance + ")")) },
      { key: "overall", label: "Overall", value: (r) => r.overall.mean, cell: (r) => scoreCell(r.overall) },
    ];
    for (const env of suite.envs) {
      cols.push({ key: "env:" + env, label: short(env), value: (r) => r.envs[env].mean, cell: (r) => scoreCell(r.envs[env]) });
    }
    const c = (r) => r.cost_per_episode;
    cols.push(
      { key: "pass_k", label: "pass^" + suite.trials, value: (r) => r.overall.pass_k,
        cell: (r) => r.trials_scored < suite.trials
          ? el("td", { class: "num", "data-value": r.overall.pass_k }, fix(r.overall.pass_k, 3), el("span", { class: "ci" }, "(1 trial)"))
          : numCell(r.overall.pass_k, 3) },
      { key: "tokens_in", label: "Tokens in/ep", value: (r) => c(r).input_tokens, cell: (r) => numCell(c(r).input_tokens, 0) },
      { key: "tokens_out", label: "Tokens out/ep", value: (r) => c(r).output_tokens, cell: (r) => numCell(c(r).output_tokens, 0) },
      { key: "turns", label: "Turns/ep", value: (r) => c(r).turns, cell: (r) => numCell(c(r).turns, 1) },
      { key: "wall", label: "Wall s/ep", value: (r) => c(r).wall_s, cell: (r) => numCell(c(r).wall_s, 2) },
      { key: "date", label: "Date", value: (r) => r.date, cell: (r) => el("td", {}, r.date) },
    );
    return cols;
  }

  function renderTabs() {
    const nav = document.getElementById("suite-tabs");
    nav.replaceChildren(...DATA.suites.map((s) => el("button", {
      "aria-pressed": s.name === state.suite ? "true" : "false",
      onclick: () => { state.suite = s.name; renderAll(); } }, s.ref)));
  }

  function renderBoard() {
    const suite = suiteOf(state.suite);
    const info = document.getElementById("suite-info");
    const table = document.getElementById("board");
    if (!suite) { info.replaceChildren(el("p", {}, "No suites.")); return; }
    info.replaceChildren(el("h2", {}, "Suite " + suite.ref), el("p", { class: "lede" }, suite.description));
    const rows = (DATA.rows[suite.name] || []).map((r, i) => Object.assign({ _rank: i + 1 }, r));
    const cols = columns(suite);
    const col = cols.find((c) => c.key === state.sortKey) || cols[3];
    rows.sort((a, b) => {
      const x = col.value(a), y = col.value(b);
      const c = x < y ? -1 : x > y ? 1 : 0;
      return c ? c * state.sortDir : a._rank - b._rank;  // ties keep the board's order
    });
    const head = el("tr", {}, cols.map((c) => el("th", {
      scope: "col", "data-key": c.key,
      "aria-sort": c.key === col.key ? (state.sortDir > 0 ? "ascending" : "descending") : null,
      onclick: () => sortBy(c.key) }, c.label)));
    table.tHead.replaceChildren(head);
    table.tBodies[0].replaceChildren(...(rows.length ? rows.map((r) => el("tr", { "data-id": r.id }, cols.map((c) => c.cell(r))))
      : [el("tr", {}, el("td", { colspan: cols.length }, "No verified submissions yet."))]));
  }

  function sortBy(key) {
    if (state.sortKey === key) state.sortDir = -state.sortDir;
    else { state.sortKey = key; state.sortDir = ["name", "model", "date", "rank"].includes(key) ? 1 : -1; }
    renderBoard();
  }

  function loadTranscripts(id, done) {
    const have = window.AGENTGYM_TRANSCRIPTS && window.AGENTGYM_TRANSCRIPTS[id];
    if (have) { done(have); return; }
    const s = el("script", { src: "transcripts/" + encodeURIComponent(id) + ".js" });
    s.onload = () => done(window.AGENTGYM_TRANSCRIPTS[id]);
    s.onerror = () => done(null);
    document.body.appendChild(s);
  }

  function meta(pairs) {
    return el("dl", { class: "meta" }, pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  }

  function openSubmission(row) {
    const sec = document.getElementById("submission");
    document.getElementById("transcript").hidden = true;
    sec.hidden = false;
    sec.replaceChildren(el("h2", {}, "Submission: " + row.name), meta([
      ["policy", row.policy], ["model", row.model], ["engine", row.engine],
      ["settings", JSON.stringify(row.describe)], ["tokenizer", row.tokenizer.name],
      ["agentgym", row.agentgym_version], ["date", row.date], ["hardware", JSON.stringify(row.hardware)],
      ["file", row.file], ["episodes", String(row.episodes)], ["verified in", row.verify_s + " s"],
      ["notes", row.notes || ""]]), el("p", {}, "Loading episodes..."));
    loadTranscripts(row.id, (tr) => {
      sec.lastChild.remove();
      if (!tr) { sec.appendChild(el("p", { class: "errors" }, "transcripts/" + row.id + ".js could not be loaded")); return; }
      const envs = [...new Set(tr.episodes.map((e) => e.env))];
      const filter = el("select", { id: "env-filter", onchange: () => fill() },
        el("option", { value: "" }, "all environments"), envs.map((e) => el("option", { value: e }, e)));
      const body = el("tbody");
      const table = el("table", { id: "episodes" }, el("thead", {}, el("tr", {},
        ["env", "task", "task id", "trial", "score", "turns", "tokens out"].map((h) => el("th", {}, h)))), body);
      function fill() {
        body.replaceChildren(...tr.episodes.map((e, i) => [e, i]).filter(([e]) => !filter.value || e.env === filter.value)
          .map(([e, i]) => el("tr", { class: "episode", "data-index": i, onclick: () => openEpisode(row, tr, i) },
            el("td", {}, e.env), el("td", { class: "num" }, e.task), el("td", {}, e.task_id), el("td", { class: "num" }, e.trial),
            el("td", { class: "num score-" + (e.score >= 1 ? 1 : 0) }, fix(e.score, 2)), el("td", { class: "num" }, e.turns.length),
            el("td", { class: "num" }, e.cost.output_tokens))));
      }
      fill();
      sec.append(el("h3", {}, "Episodes"), filter, table);
      sec.scrollIntoView();
    });
  }

  function kindOf(m, inObservation) {
    if (m.recipient && m.recipient.startsWith("functions.")) return "tool-call";
    if (m.channel === "final") return "final";
    if (m.channel === "analysis") return "analysis";
    if (m.role.startsWith("functions.")) return "tool-result";
    if (m.role === "user") return inObservation ? "notice" : "user";
    return m.role;
  }
  const LABEL = { "tool-call": "tool call", "tool-result": "tool result", final: "final answer",
                  analysis: "analysis", notice: "environment notice", user: "user" };

  function message(m, inObservation, call) {
    const kind = kindOf(m, inObservation);
    let who = (LABEL[kind] || m.role) + (m.channel && kind === m.role ? " [" + m.channel + "]" : "");
    let text = m.content;
    if (kind === "tool-call") {
      who += ": " + m.recipient;
      if (call && call.arguments) text = JSON.stringify(call.arguments, null, 2);
    }
    if (kind === "tool-result") who += " from " + m.role;
    return el("div", { class: "msg " + kind }, el("div", { class: "who" }, who), el("pre", {}, text));
  }

  function openEpisode(row, tr, i) {
    const e = tr.episodes[i];
    const sec = document.getElementById("transcript");
    sec.hidden = false;
    const shared = tr.shared[e.env] || [];
    const parts = [el("h2", {}, "Transcript: " + e.env + " task " + e.task + " trial " + e.trial),
      meta([["submission", row.name], ["task id", e.task_id], ["options", JSON.stringify(e.options)],
            ["seed", String(e.seed)], ["score", fix(e.score, 3)],
            ["ended", e.terminated ? "terminated" : e.truncated ? "truncated (budget)" : "?"],
            ["tokens", "in " + e.cost.input_tokens + ", out " + e.cost.output_tokens]])];
    if (e.shared_prefix && shared.length) {
      parts.push(el("details", {}, el("summary", {}, "system and developer messages (the same in every episode of this env)"),
        shared.map((m) => message(m, false, null))));
    }
    parts.push(...e.prompt.map((m) => message(m, false, null)));
    for (const t of e.turns) {
      const comps = Object.entries(t.components);
      parts.push(el("div", { class: "turn", "data-turn": t.turn },
        el("h4", {}, "Turn " + t.turn + ": reward " + fix(t.reward, 3) + (t.tool ? ", tool " + t.tool : "")),
        t.action.map((m) => message(m, false, t.tool_call)),
        t.action.length ? null : el("p", { class: "errors" }, "(no action tokens: " + (t.error || "rejected") + ")"),
        t.parse_errors.length ? el("p", { class: "errors" }, "parse: " + t.parse_errors.join("; ")) : null,
        t.error ? el("p", { class: "errors" }, "error: " + t.error) : null,
        t.observation.map((m) => message(m, true, null)),
        el("table", { class: "components" },
          el("caption", {}, t.paid ? "reward components: only the outcome is paid (sparse); the others are indicators and counts"
            : "reward components: indicators and counts, weighted by the env's shaping; the turn's reward is what was paid"),
          el("tr", {}, el("th", {}, ""), comps.map(([k]) => el("th", {}, k))),
          el("tr", {}, el("th", {}, "reported"), comps.map(([, v]) => el("td", { class: "num" }, v))),
          t.paid ? el("tr", { class: "paid" }, el("th", {}, "paid"),
            comps.map(([k]) => el("td", { class: "num" }, k in t.paid ? fix(t.paid[k], 3) : "-"))) : null)));
    }
    sec.replaceChildren(...parts);
    sec.scrollIntoView();
  }

  function renderAll() { renderTabs(); renderBoard(); }
  renderAll();
  window.agentgymBoard = { sortBy, openSubmission: (id) => {
    const r = (DATA.rows[state.suite] || []).find((x) => x.id === id); if (r) openSubmission(r); } };
})();
