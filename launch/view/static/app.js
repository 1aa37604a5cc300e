// earthrl view: the page of a run's or an evaluation's episodes. Plain JavaScript, no external asset.
// Every text from the folder is put in the page as text (textContent), never as markup.
"use strict";

const state = { folders: [], episodes: [] };
const main = document.getElementById("main");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return node;
}

async function api(path) {
  const r = await fetch(path);
  if (!r.ok) throw new Error(`${path}: ${r.status}`);
  return r.json();
}

function fmt(x, digits = 3) {
  if (x === null || x === undefined) return "—";
  if (typeof x === "number") return Number.isInteger(x) ? String(x) : x.toFixed(digits);
  if (typeof x === "boolean") return x ? "yes" : "no";
  return typeof x === "object" ? JSON.stringify(x) : String(x);
}

// ---------------------------------------------------------------- highlighting (JSON and Python actions)
const TOKEN = new RegExp([
  String.raw`(#[^\n]*)`,                                        // 1 comment
  String.raw`("(?:\\.|[^"\\])*"|'(?:\\.|[^'\\\n])*')(\s*:)?`,  // 2 string, 3 a following colon (a JSON key)
  String.raw`(-?\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\b)`,          // 4 number
  String.raw`\b(true|false|null|None|True|False|def|return|import|from|for|in|if|elif|else|while|with|as|and|or|not|lambda|print)\b`, // 5
  String.raw`(</?[A-Za-z_]+>)`,                                 // 6 a tag such as <tool_call>
].join("|"), "g");

function highlight(text) {
  const pre = el("pre", { class: "code" });
  let last = 0;
  for (const m of text.matchAll(TOKEN)) {
    if (m.index > last) pre.appendChild(document.createTextNode(text.slice(last, m.index)));
    let cls = "tok-tag";
    if (m[1]) cls = "tok-com";
    else if (m[2]) cls = m[3] ? "tok-key" : "tok-str";
    else if (m[4]) cls = "tok-num";
    else if (m[5]) cls = "tok-kw";
    const tokenText = m[2] ? m[2] : m[0];
    pre.appendChild(el("span", { class: cls }, tokenText));
    if (m[2] && m[3]) pre.appendChild(document.createTextNode(m[3]));
    last = m.index + m[0].length;
  }
  if (last < text.length) pre.appendChild(document.createTextNode(text.slice(last)));
  return pre;
}

// ---------------------------------------------------------------- the list with its filters
function query() {
  const q = location.hash.split("?")[1] || "";
  return Object.fromEntries(new URLSearchParams(q));
}

function setQuery(route, params) {
  const q = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v !== undefined)).toString();
  location.hash = route + (q ? "?" + q : "");
}

const FILTERS = [
  ["folder", "folder", e => String(e.folder)],
  ["skill", "skill", e => e.skill || "(unknown)"],
  ["step", "step", e => e.step === null ? "(eval)" : String(e.step)],
  ["outcome", "outcome", e => e.outcome],
  ["role", "role", e => e.roles],
];

function matches(e, q) {
  return FILTERS.every(([key, , get]) => {
    if (!q[key]) return true;
    const v = get(e);
    return Array.isArray(v) ? v.includes(q[key]) : v === q[key];
  }) && (!q.task || e.task_id.includes(q.task));
}

function verdictText(v) {
  return Object.entries(v || {}).map(([k, n]) => `${k} ${n}`).join(", ") || "—";
}

function renderList() {
  const q = query();
  const bar = el("div", { class: "filters" });
  for (const [key, label, get] of FILTERS) {
    if (key === "folder" && state.folders.length < 2) continue;
    const values = [...new Set(state.episodes.flatMap(e => [get(e)].flat()))].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
    const sel = el("select", { id: `f-${key}` }, el("option", { value: "" }, "all"),
      values.map(v => el("option", { value: v }, key === "folder" ? state.folders[+v].path : v)));
    sel.value = q[key] || "";
    sel.addEventListener("change", () => setQuery("#/", { ...query(), [key]: sel.value }));
    bar.appendChild(el("label", {}, `${label} `, sel));
  }
  const task = el("input", { id: "f-task", placeholder: "task id contains…", value: q.task || "" });
  task.addEventListener("change", () => setQuery("#/", { ...query(), task: task.value }));
  bar.appendChild(task);
  const shown = state.episodes.filter(e => matches(e, q));
  bar.appendChild(el("span", { id: "count" }, `${shown.length} of ${state.episodes.length} episodes`));
  const two = state.folders.length > 1;
  const head = el("tr", {}, ["#", two ? "folder" : null, "task", "skill", "step", "mode", "reward", "outcome", "answer",
    "turns", "E=1 turns", "verdicts", "roles", "fault", two ? "" : null].filter(h => h !== null).map(h => el("th", {}, h)));
  const rows = shown.map(e => el("tr", { class: `episode-row ${e.outcome.replace(" ", "-")}`, "data-id": `${e.folder}/${e.id}` },
    el("td", {}, el("a", { href: `#/episode/${e.folder}/${e.id}` }, String(e.id))),
    two ? el("td", {}, String(e.folder)) : null,
    el("td", {}, el("a", { href: `#/episode/${e.folder}/${e.id}` }, e.task_id)),
    el("td", {}, e.skill || "—"), el("td", {}, fmt(e.step)), el("td", {}, fmt(e.mode)), el("td", {}, fmt(e.reward)),
    el("td", { class: "outcome" }, e.outcome), el("td", {}, e.answer ? `${fmt(e.answer.value)} ${e.answer.unit || ""}` : "—"),
    el("td", {}, String(e.num_turns)), el("td", {}, String(e.error_turns)), el("td", {}, verdictText(e.verdicts)),
    el("td", {}, e.roles.join(", ")), el("td", {}, e.failure || "—"),
    two ? el("td", {}, el("a", { href: "#/compare?" + new URLSearchParams({ task: e.task_id }) }, "side by side")) : null));
  main.replaceChildren(bar, el("table", { id: "episodes" }, head, rows));
}

// ---------------------------------------------------------------- one episode
function turnView(t, k, folder, id) {
  const badges = [
    el("span", { class: "badge" }, `role ${t.role}`),
    t.adapter ? el("span", { class: "badge" }, `adapter ${t.adapter}`) : null,
    t.node ? el("span", { class: "badge" }, `node ${t.node}`) : null,
    t.candidate ? el("span", { class: "badge" }, `candidate ${t.candidate} of ${t.node_state}`) : null,
    el("span", { class: `badge verdict ${t.verdict || ""}` }, `verdict ${t.verdict || "—"}`),
    el("span", { class: "badge" }, `E ${t.error ? 1 : 0}${t.error_kind ? " (" + t.error_kind + ")" : ""}`),
    el("span", { class: "badge" }, `reward ${fmt(t.reward)}`),
    el("span", { class: "badge" }, `advantage ${fmt(t.advantage)}`),
  ];
  return el("section", { class: `turn${t.error ? " error" : ""}${t.candidate ? " candidate" : ""}`, "data-turn": String(k) },
    el("h3", {}, `Turn ${k + 1}`), el("div", {}, badges),
    t.subgoal ? el("div", { class: "meta" }, `sub-goal: ${fmt(t.subgoal)}`) : null,
    el("div", { class: "meta" }, "action"), highlight(t.action || ""),
    el("div", { class: "meta" }, "observation"), el("pre", { class: "observation" }, t.observation || ""),
    t.verdict_reasons && t.verdict_reasons.length ? el("ul", { class: "reasons" }, t.verdict_reasons.map(r => el("li", {}, r))) : null);
}

function episodeView(e) {
  const meta = el("table", { class: "meta" },
    [["task", e.task_id], ["skill", e.skill || "—"], ["question", e.question || "—"], ["step", fmt(e.step)], ["mode", fmt(e.mode)],
      ["reward", fmt(e.reward)], ["outcome", e.outcome], ["answer", fmt(e.answer)], ["reference answer", fmt(e.reference_answer)],
      ["fault", e.failure ? `${e.failure}${e.failure_detail ? ": " + e.failure_detail : ""}` : "—"],
      ["agent counts", fmt(e.agent_stats)], ["episode", e.episode_id || "—"]]
      .map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v))));
  const arts = e.artifacts.length ? el("table", { class: "artifacts" }, el("tr", {}, ["artifact", "tool", "parents"].map(h => el("th", {}, h))),
    e.artifacts.map(a => el("tr", {}, el("td", {}, a.name), el("td", {}, a.tool || "—"), el("td", {}, (a.parents || []).join(", "))))) : el("p", {}, "no artifacts");
  const imgs = (e.images || []).map(n => el("figure", {}, el("img", { class: "ql", src: `/files/${e.folder}/${e.id}/${encodeURIComponent(n)}`, alt: n }), el("figcaption", {}, n)));
  return el("div", { class: "episode", id: `episode-${e.folder}-${e.id}` }, meta, el("h2", {}, "Artifacts"), arts, imgs,
    el("h2", {}, "Turns"), e.turns.map((t, k) => turnView(t, k, e.folder, e.id)));
}

async function renderEpisode(f, i) {
  const e = await api(`/api/episode/${f}/${i}`);
  const links = [el("a", { href: "#/" }, "← all episodes")];
  if (state.folders.length > 1) links.push(" · ", el("a", { href: "#/compare?" + new URLSearchParams({ task: e.task_id }) }, "this task side by side"));
  main.replaceChildren(el("p", {}, links), el("h2", {}, `Episode ${i} of ${state.folders[f].path}`), episodeView(e));
}

async function renderCompare() {
  const task = query().task || "";
  const cols = await Promise.all(state.folders.map(async (f, n) => {
    const mine = state.episodes.filter(e => e.folder === n && e.task_id === task);
    const full = await Promise.all(mine.map(e => api(`/api/episode/${n}/${e.id}`)));
    return el("div", { class: "column", "data-folder": String(n) }, el("h2", {}, f.path),
      full.length ? full.map(episodeView) : el("p", {}, "no episode of this task here"));
  }));
  main.replaceChildren(el("p", {}, el("a", { href: "#/" }, "← all episodes")), el("h2", {}, task), el("div", { class: "side" }, cols));
}

// ---------------------------------------------------------------- training curves (inline SVG)
const FIRST = ["reward/mean", "eval/accuracy", "rollout/error_turn_rate", "loss/loss", "loss/kl", "advantage/abs_mean",
  "rollout/mean_turns", "heldout/accuracy"];
const SVGNS = "http://www.w3.org/2000/svg";

function svg(tag, attrs) {
  const node = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

function chart(name, points) {
  const W = 320, H = 170, L = 48, B = 22, T = 8, R = 8;
  const xs = points.map(p => p[0]), ys = points.map(p => p[1]);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)], [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  const sx = x => L + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * (W - L - R);
  const sy = y => H - B - (y1 > y0 ? (y - y0) / (y1 - y0) : 0.5) * (H - B - T);
  const g = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "chart" });
  g.appendChild(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#8c959f" }));
  g.appendChild(svg("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#8c959f" }));
  g.appendChild(svg("polyline", { points: points.map(p => `${sx(p[0])},${sy(p[1])}`).join(" "), fill: "none", stroke: "#0969da", "stroke-width": 2 }));
  for (const p of points) g.appendChild(svg("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 2.5, fill: "#0969da" }));
  const label = (x, y, text, anchor) => { const t = svg("text", { x, y, "font-size": 10, "text-anchor": anchor, fill: "#57606a" }); t.textContent = text; g.appendChild(t); };
  label(L - 4, sy(y1) + 4, fmt(y1), "end"); label(L - 4, sy(y0) + 4, fmt(y0), "end");
  label(sx(x0), H - 6, `step ${x0}`, "start"); label(sx(x1), H - 6, `step ${x1}`, "end");
  return el("div", { class: "curve", "data-metric": name }, el("h4", {}, name), g);
}

async function renderCurves() {
  const blocks = await Promise.all(state.folders.map(async (f, n) => {
    const rows = await api(`/api/metrics/${n}`);
    const series = {};
    for (const r of rows) for (const [k, v] of Object.entries(r)) {
      if (k !== "step" && typeof v === "number" && Number.isFinite(v) && typeof r.step === "number") (series[k] ||= []).push([r.step, v]);
    }
    const names = Object.keys(series).filter(k => new Set(series[k].map(p => p[0])).size > 1)
      .sort((a, b) => ((FIRST.indexOf(a) + 1 || 99) - (FIRST.indexOf(b) + 1 || 99)) || a.localeCompare(b));
    return el("section", {}, el("h2", {}, f.path),
      names.length ? el("div", { class: "curves" }, names.map(k => chart(k, series[k])))
        : el("p", {}, rows.length ? "metrics.jsonl holds one step: no curve to draw" : "no metrics.jsonl in this folder"));
  }));
  main.replaceChildren(...blocks);
}

// ---------------------------------------------------------------- routing
async function route() {
  const path = location.hash.replace(/^#/, "").split("?")[0] || "/";
  const m = path.match(/^\/episode\/(\d+)\/(\d+)$/);
  try {
    if (m) await renderEpisode(+m[1], +m[2]);
    else if (path === "/compare") await renderCompare();
    else if (path === "/curves") await renderCurves();
    else renderList();
  } catch (err) {
    main.replaceChildren(el("p", { class: "note" }, String(err)));
  }
  document.body.setAttribute("data-ready", path);
}

async function start() {
  [state.folders, state.episodes] = await Promise.all([api("/api/folders"), api("/api/episodes")]);
  document.getElementById("folders").replaceChildren(...state.folders.map(f =>
    el("span", { class: f.note ? "note" : "" }, `${f.path} (${f.kind}, ${f.episodes} episodes)${f.note ? " — " + f.note : ""} `)));
  window.addEventListener("hashchange", route);
  await route();
}

start();
