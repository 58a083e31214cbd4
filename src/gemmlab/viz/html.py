"""A self-contained HTML page: step through the frames, highlight one thread, its warp or its block.

The page carries the trace's events as JSON and draws them as SVG with a few hundred lines of plain
JavaScript: no external scripts, styles, fonts or images, so it opens from a file or an attachment. The
script recomputes each frame's cell states with the rules of `state.Frames` (tested to agree cell by cell)
and the counters from the same events.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np

from ..files import atomic_write
from . import banks
from .frames import launch_text, params_text, size_text
from .model import A_LOAD, AS_READ, AS_WRITE, B_LOAD, BS_READ, BS_WRITE, C_STORE, FMA, OWN, Trace
from .rungs import MODELS, model_for
from .state import DARK, SMEM_STATES, STATES, layout

# Events beyond which the page gets heavy to open (about 6 MB of JSON; naive at 50^3 has 380,000).
MAX_HTML_EVENTS = 400_000


def bank_data(trace: Trace, thread: int = 0) -> dict | None:
    """The bank view at the page's parameters, for the warp of `thread` in one block (a block of its own, one
    K step: every block's warps address shared memory alike); None for a rung without shared memory."""
    if not trace.smem_shapes or trace.spec.name not in MODELS:
        return None
    view, before = banks.bank_view(trace.spec.name, trace.params, thread=thread % trace.threads_per_block,
                                   teaching=True)
    return banks.page_data(view, before)


def page_data(trace: Trace, thread: int = 0, mode: str = "thread") -> dict:
    lay = layout(trace)
    e = trace.events
    nf = len(trace.frames)
    off = np.searchsorted(e["frame"], np.arange(nf + 1), side="left")
    show_values = lay.shows_values
    return {
        "kernel": trace.spec.name,
        "rung": trace.spec.rung,
        "idea": trace.spec.idea,
        "watch": model_for(trace.spec).watch,
        "params": trace.params,
        "title": f"{trace.spec.name} (rung {trace.spec.rung:02d}) {params_text(trace)}",
        "subtitle": f"{size_text(trace)}: {launch_text(trace)}",
        "m": trace.m, "n": trace.n, "k": trace.k,
        "grid": list(trace.launch.grid[:2]), "blockDim": list(trace.launch.block[:2]),
        "tpb": trace.threads_per_block, "threads": trace.threads, "blocks": trace.blocks,
        "smem": {k: list(v) for k, v in trace.smem_shapes.items()},
        "smemTitles": dict(MODELS[trace.spec.name].smem_titles) if trace.spec.name in MODELS else {},
        "blockTile": list(trace.block_tile()), "kTile": trace.k_tile(),
        "layout": {"shapes": {k: list(v) for k, v in lay.shapes.items()},
                   "origin": {k: list(v) for k, v in lay.origin.items()},
                   "width": lay.width, "height": lay.height, "cellPx": lay.cell_px},
        "showValues": show_values,
        "a": trace.a.tolist() if show_values else None,
        "b": trace.b.tolist() if show_values else None,
        "frames": [{"phase": f.phase, "label": f.label, "step": f.step, "kDone": f.k_done, "sync": f.sync}
                   for f in trace.frames],
        "off": off.tolist(),
        "ev": {
            "thread": e["thread"].tolist(),
            "kind": e["kind"].tolist(),
            "r": e["r"].tolist(),
            "c": e["c"].tolist(),
            "aux": e["aux"].tolist(),
            "value": [float(v) for v in e["value"]] if show_values else None,
        },
        "kinds": {"OWN": OWN, "A_LOAD": A_LOAD, "B_LOAD": B_LOAD, "AS_WRITE": AS_WRITE, "BS_WRITE": BS_WRITE,
                  "AS_READ": AS_READ, "BS_READ": BS_READ, "FMA": FMA, "C_STORE": C_STORE},
        "states": [list(s) for s in STATES],
        "dark": sorted(DARK),
        "smemStates": sorted(SMEM_STATES),
        "agreement": [[q, a, b] for q, a, b in trace.agreement()],
        "banks": bank_data(trace, thread),
        "thread": thread,
        "mode": mode,
    }


def render_html(trace: Trace, thread: int = 0, mode: str = "thread") -> str:
    if len(trace.events["kind"]) > MAX_HTML_EVENTS:
        raise ValueError(f"{len(trace.events['kind']):,} events are too many for one page (at most "
                         f"{MAX_HTML_EVENTS:,}); take a smaller size, or the GIF")
    data = page_data(trace, thread, mode)
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    title = html.escape(f"gemmlab visualiser: {data['title']}, {trace.m} x {trace.n} x {trace.k}")
    return (_PAGE.replace("__TITLE__", title)
                 .replace("__STYLE__", _STYLE)
                 .replace("__DATA__", payload)
                 .replace("__SCRIPT__", _SCRIPT))


def write_html(trace: Trace, path: Path, thread: int = 0, mode: str = "thread") -> Path:
    atomic_write(path, render_html(trace, thread, mode))
    return Path(path)


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>__STYLE__</style>
</head>
<body>
<header>
  <h1 id="title"></h1>
  <p id="subtitle"></p>
  <p id="watch"></p>
</header>
<main>
  <section id="stage"><svg id="svg" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="matrices"></svg></section>
  <aside id="side">
    <div id="controls">
      <button id="first" title="first frame (Home)">|&lt;</button>
      <button id="prev" title="previous frame (left arrow)">&lt; prev</button>
      <button id="play" title="play or pause (space)">play</button>
      <button id="next" title="next frame (right arrow)">next &gt;</button>
      <button id="last" title="last frame (End)">&gt;|</button>
      <span id="frameno"></span>
    </div>
    <input id="slider" type="range" min="0" value="0" aria-label="frame">
    <div id="focusbar">
      <label>highlight
        <select id="mode"><option value="thread">one thread</option><option value="warp">its warp</option><option value="block">its block</option></select>
      </label>
      <label>thread <input id="thread" type="number" min="0" value="0"></label>
      <span class="hint">or click a cell of C</span>
    </div>
    <p id="who"></p>
    <p id="phase"></p>
    <p id="label"></p>
    <table id="counters">
      <thead>
        <tr><th></th><th colspan="2" id="focushead">thread</th><th colspan="2">block</th><th colspan="2">all</th></tr>
        <tr><th></th><th>now</th><th>total</th><th>now</th><th>total</th><th>now</th><th>total</th></tr>
      </thead>
      <tbody></tbody>
    </table>
    <p id="compare"></p>
    <details open><summary>model against the spec's analytic model (whole run)</summary>
      <table id="agreement"><thead><tr><th></th><th>model</th><th>spec</th><th></th></tr></thead><tbody></tbody></table>
    </details>
    <details id="banks" class="banks" hidden><summary></summary>
      <p class="hint">Per phase, the lanes that hit each bank: lanes sharing a word are joined (a broadcast), lanes
      needing different words of one bank are separated by '/' (a conflict). A 16-byte access is served in 4 phases
      of 8 lanes, a 4-byte one in 1 of 32. <code>gemmlab visualize KERNEL --banks</code> shows the kernel's own
      parameters.</p>
    </details>
    <div id="legend"></div>
  </aside>
</main>
<script id="trace-data" type="application/json">__DATA__</script>
<script>__SCRIPT__</script>
</body>
</html>
"""

_STYLE = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 12px 18px; color: #1f2328; }
h1 { font-size: 18px; margin: 0 0 2px; }
header p { margin: 0 0 4px; color: #444; }
main { display: flex; flex-wrap: wrap; gap: 18px; align-items: flex-start; }
#stage svg { display: block; }
#side { max-width: 560px; min-width: 380px; }
#controls { display: flex; gap: 6px; align-items: center; flex-wrap: wrap; }
button { font: inherit; padding: 3px 9px; }
#slider { width: 100%; margin: 8px 0; }
#focusbar { display: flex; gap: 12px; align-items: center; flex-wrap: wrap; margin-bottom: 6px; }
#focusbar input { width: 6em; }
.hint { color: #777; font-size: 12px; }
#phase { font-weight: 600; margin: 6px 0 0; }
#label { margin: 2px 0 8px; min-height: 2.8em; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 1px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
#counters tbody tr:nth-child(odd) { background: #f4f4f4; }
#agreement td.ok { color: #166534; }
#agreement td.bad { color: #b91c1c; font-weight: 600; }
.banks table { margin: 4px 0 10px; font-size: 12px; }
.banks th, .banks td { padding: 0 5px; text-align: center; }
.banks td.ok { color: #166534; }
.banks td.bad { color: #b91c1c; font-weight: 600; }
.banks p.title { margin: 8px 0 0; font-size: 12px; }
#legend { margin-top: 10px; font-size: 12px; columns: 2; }
#legend div { display: flex; align-items: center; gap: 6px; break-inside: avoid; }
#legend span.sw { width: 12px; height: 12px; border: 1px solid #888; display: inline-block; flex: none; }
svg text { font-family: system-ui, sans-serif; pointer-events: none; }
rect.cell { stroke: #bbb; }
g#panel-C rect.cell { cursor: pointer; }
"""

_SCRIPT = r"""
"use strict";
const D = JSON.parse(document.getElementById("trace-data").textContent);
const E = D.ev, KD = D.kinds, NE = E.kind.length, NF = D.frames.length;
const CODE = {};
D.states.forEach((s, i) => { CODE[s[0]] = i; });
const DARK = new Set(D.dark);
const SVGNS = "http://www.w3.org/2000/svg";
const L = D.layout, PX = L.cellPx;
const PANELS = Object.keys(L.shapes);
let frame = 0, mode = D.mode, thread = D.thread, timer = null;
const cells = {}, texts = {}, shown = {};
let staged = {};

function el(name, attrs, parent) {
  const node = document.createElementNS(SVGNS, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function fmt(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "";
  return Number.isInteger(v) ? String(v) : v.toPrecision(3);
}

function blockName(b) { return "(" + (b % D.grid[0]) + ", " + Math.floor(b / D.grid[0]) + ")"; }
function threadName(t) {
  const b = Math.floor(t / D.tpb), tid = t % D.tpb;
  const tix = D.blockDim[1] > 1 ? "(" + (tid % D.blockDim[0]) + ", " + Math.floor(tid / D.blockDim[0]) + ")" : String(tid);
  return "thread " + t + " = block " + blockName(b) + " thread " + tix;
}

// ------------------------------------------------------------------------------------ ownership
const owner = new Int32Array(L.shapes.C[0] * L.shapes.C[1]).fill(-1);
const ownedBy = new Map();
for (let i = 0; i < NE; i++) {
  if (E.kind[i] !== KD.OWN) continue;
  owner[E.r[i] * L.shapes.C[1] + E.c[i]] = E.thread[i];
  if (!ownedBy.has(E.thread[i])) ownedBy.set(E.thread[i], []);
  ownedBy.get(E.thread[i]).push([E.r[i], E.c[i]]);
}

function span(xs) {
  if (xs.length > 1) {
    const d = xs[1] - xs[0];
    if (xs.every((x, i) => i === 0 || x - xs[i - 1] === d))
      return d === 1 ? xs[0] + ".." + xs[xs.length - 1] : xs[0] + ".." + xs[xs.length - 1] + " step " + d;
  }
  return xs.join(", ");
}

function describe(t) {
  const own = ownedBy.get(t) || [];
  const inside = own.filter(([r, c]) => r < D.m && c < D.n);
  if (!own.length) return threadName(t) + ": computes nothing";
  let where;
  if (own.length === 1) {
    where = "C[" + own[0][0] + ", " + own[0][1] + "]" + (inside.length ? "" : " (outside C: padding)");
  } else {
    const rows = [...new Set(own.map(x => x[0]))].sort((a, b) => a - b);
    const cols = [...new Set(own.map(x => x[1]))].sort((a, b) => a - b);
    where = own.length + " results, rows " + span(rows) + " x columns " + span(cols);
    if (inside.length < own.length) where += " (" + (own.length - inside.length) + " in the padding)";
  }
  return threadName(t) + ": computes " + where;
}

// ------------------------------------------------------------------------------------ drawing
function build() {
  const svg = document.getElementById("svg");
  const top = 24 / PX;
  let width = L.width;
  const titles = panelTitles();
  for (const p of PANELS) width = Math.max(width, L.origin[p][0] + titles[p].length * 7.2 / PX);
  svg.setAttribute("viewBox", [-0.1, -top, width + 0.2, L.height + top + 0.2].join(" "));
  svg.setAttribute("width", Math.round((width + 0.2) * PX));
  svg.setAttribute("height", Math.round((L.height + top + 0.2) * PX));
  const sw = PX >= 6 ? 1 / PX : 0;
  for (const p of PANELS) {
    const [rows, cols] = L.shapes[p], [ox, oy] = L.origin[p];
    const g = el("g", { id: "panel-" + p }, svg);
    el("text", { x: ox, y: oy - 6 / PX, "font-size": 13 / PX }, g).textContent = titles[p];
    cells[p] = [];
    texts[p] = [];
    shown[p] = new Int16Array(rows * cols).fill(-1);
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c < cols; c++) {
        const rect = el("rect", { class: "cell", id: "cell-" + p + "-" + r + "-" + c, x: ox + c, y: oy + r,
                                  width: 1, height: 1, "stroke-width": sw, "data-r": r, "data-c": c }, g);
        if (p === "C") rect.addEventListener("click", () => { const t = owner[r * cols + c]; if (t >= 0) setThread(t); });
        cells[p].push(rect);
        if (D.showValues) {
          texts[p].push(el("text", { x: ox + c + 0.5, y: oy + r + 0.5, "font-size": Math.min(15, PX / 2.6) / PX,
                                     "text-anchor": "middle", "dominant-baseline": "central" }, g));
        }
      }
    }
    tileLines(g, p, rows, cols, ox, oy);
  }
  for (const p of ["A", "B"]) {
    staged[p] = el("rect", { fill: "none", stroke: "#1d4ed8", "stroke-width": 2.2 / PX, "stroke-dasharray": (5 / PX) + " " + (3 / PX),
                              visibility: "hidden", id: "staged-" + p }, svg);
  }
}

function panelTitles() {
  const b = Math.floor(thread / D.tpb);
  const owner = "shared, block " + blockName(b);
  return { A: "A (" + D.m + " x " + D.k + ")", B: "B (" + D.k + " x " + D.n + ")", C: "C (" + D.m + " x " + D.n + ")",
           As: (D.smemTitles.As || "As") + " (" + owner + ")", Bs: (D.smemTitles.Bs || "Bs") + " (" + owner + ")" };
}

function tileLines(g, p, rows, cols, ox, oy) {
  const [bm, bn] = D.blockTile, kt = D.kTile;
  let [sr, sc] = { A: [bm, kt], B: [kt, bn], C: [bm, bn] }[p] || [rows, cols];
  if (sc <= 1 && p !== "C") sc = cols;
  if (sr <= 1 && p !== "C") sr = rows;
  let d = "";
  for (let c = 0; c <= cols; c += sc) d += "M" + (ox + c) + " " + oy + "V" + (oy + rows);
  for (let r = 0; r <= rows; r += sr) d += "M" + ox + " " + (oy + r) + "H" + (ox + cols);
  d += "M" + (ox + cols) + " " + oy + "V" + (oy + rows) + "M" + ox + " " + (oy + rows) + "H" + (ox + cols);
  el("path", { d: d, stroke: "#333", "stroke-width": 1.4 / PX, fill: "none" }, g);
}

function focusRange() {
  const b = Math.floor(thread / D.tpb), tid = thread % D.tpb;
  if (mode === "thread") return [thread, thread + 1];
  if (mode === "warp") { const f = b * D.tpb + Math.floor(tid / 32) * 32; return [f, Math.min(f + 32, (b + 1) * D.tpb)]; }
  return [b * D.tpb, (b + 1) * D.tpb];
}

// The states of every cell at frame f: the rules of state.Frames.state, over the same events.
function frameState(f) {
  const blk = Math.floor(thread / D.tpb);
  const [f0, f1] = focusRange();
  const st = {}, val = {};
  for (const p of PANELS) {
    const [rows, cols] = L.shapes[p];
    st[p] = new Int16Array(rows * cols);
    val[p] = new Float64Array(rows * cols).fill(NaN);
  }
  const pad = (p, mr, mc) => {
    const [rows, cols] = L.shapes[p];
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) if (r >= mr || c >= mc) st[p][r * cols + c] = CODE.pad;
  };
  pad("A", D.m, D.k); pad("B", D.k, D.n); pad("C", D.m, D.n);
  if (D.showValues) {
    for (let r = 0; r < D.m; r++) for (let c = 0; c < D.k; c++) val.A[r * L.shapes.A[1] + c] = D.a[r][c];
    for (let r = 0; r < D.k; r++) for (let c = 0; c < D.n; c++) val.B[r * L.shapes.B[1] + c] = D.b[r][c];
  }
  const hasS = "As" in st;
  const hi = {};
  for (const p of PANELS) hi[p] = new Int16Array(st[p].length);
  const up = (p, i, code) => { if (hi[p][i] < code) hi[p][i] = code; };
  const beg = D.off[f], end = D.off[f + 1];
  for (let i = 0; i < end; i++) {
    const kd = E.kind[i], th = E.thread[i];
    const inBlk = Math.floor(th / D.tpb) === blk, foc = th >= f0 && th < f1, now = i >= beg;
    const r = E.r[i], c = E.c[i];
    switch (kd) {
      case KD.OWN: {
        const j = r * L.shapes.C[1] + c;
        if (foc) up("C", j, CODE.own_focus); else if (inBlk) up("C", j, CODE.own_block);
        break;
      }
      case KD.A_LOAD: case KD.B_LOAD: {
        if (!now) break;
        const p = kd === KD.A_LOAD ? "A" : "B", j = r * L.shapes[p][1] + c;
        up(p, j, foc ? CODE.read_focus : inBlk ? CODE.read_block : CODE.read_other);
        break;
      }
      case KD.AS_WRITE: case KD.BS_WRITE: {
        if (!inBlk || !hasS) break;
        const p = kd === KD.AS_WRITE ? "As" : "Bs", j = r * L.shapes[p][1] + c;
        st[p][j] = E.aux[i] ? CODE.held_zero : CODE.held;
        if (E.value) val[p][j] = E.value[i];
        if (now) up(p, j, foc ? CODE.write_focus : CODE.write_block);
        break;
      }
      case KD.AS_READ: case KD.BS_READ: {
        if (!now || !inBlk || !hasS) break;
        const p = kd === KD.AS_READ ? "As" : "Bs", j = r * L.shapes[p][1] + c;
        up(p, j, foc ? CODE.sread_focus : CODE.sread_block);
        break;
      }
      case KD.FMA: {
        const j = r * L.shapes.C[1] + c;
        if (E.value) val.C[j] = E.value[i];
        if (now) up("C", j, foc ? CODE.acc_focus : inBlk ? CODE.acc_block : CODE.acc_other);
        break;
      }
      case KD.C_STORE: {
        up("C", r * L.shapes.C[1] + c, foc ? CODE.stored_focus : CODE.stored);
        break;
      }
    }
  }
  for (const p of PANELS) for (let j = 0; j < st[p].length; j++) if (hi[p][j] > st[p][j]) st[p][j] = hi[p][j];
  return { st, val };
}

function counters(f) {
  const blk = Math.floor(thread / D.tpb);
  const [f0, f1] = focusRange();
  const groups = [["global loads (A + B)", [KD.A_LOAD, KD.B_LOAD]], ["shared-memory loads", [KD.AS_READ, KD.BS_READ]],
                  ["shared-memory stores", [KD.AS_WRITE, KD.BS_WRITE]], ["multiply-adds", [KD.FMA]]];
  const out = groups.map(g => [g[0], 0, 0, 0, 0, 0, 0]);
  const which = new Int8Array(16).fill(-1);
  groups.forEach((g, gi) => g[1].forEach(k => { which[k] = gi; }));
  const beg = D.off[f], end = D.off[f + 1];
  for (let i = 0; i < end; i++) {
    const gi = which[E.kind[i]];
    if (gi < 0) continue;
    const th = E.thread[i], now = i >= beg ? 1 : 0, row = out[gi];
    if (th >= f0 && th < f1) { row[1] += now; row[2] += 1; }
    if (Math.floor(th / D.tpb) === blk) { row[3] += now; row[4] += 1; }
    row[5] += now; row[6] += 1;
  }
  return out;
}

function render() {
  const { st, val } = frameState(frame);
  for (const p of PANELS) {
    const s = st[p], cs = cells[p], prev = shown[p];
    for (let j = 0; j < s.length; j++) {
      if (prev[j] !== s[j]) {
        cs[j].setAttribute("fill", D.states[s[j]][1]);
        cs[j].setAttribute("data-state", D.states[s[j]][0]);
        prev[j] = s[j];
      }
    }
    if (D.showValues) {
      const ts = texts[p];
      for (let j = 0; j < s.length; j++) {
        const txt = fmt(val[p][j]);
        if (ts[j].textContent !== txt) ts[j].textContent = txt;
        ts[j].setAttribute("fill", DARK.has(D.states[s[j]][0]) ? "#fff" : "#111");
      }
    }
  }
  drawStaged();
  const mk = D.frames[frame];
  document.getElementById("frameno").textContent = "frame " + (frame + 1) + " of " + NF;
  document.getElementById("slider").value = frame;
  document.getElementById("phase").textContent = "[" + mk.phase + "]" + (mk.step >= 0 ? " K step " + (mk.step + 1) : "") + (mk.sync ? ", ends at a barrier" : "");
  document.getElementById("label").textContent = mk.label;
  document.getElementById("who").textContent = describe(thread);
  document.getElementById("focushead").textContent = mode;
  const rows = counters(frame);
  const tb = document.querySelector("#counters tbody");
  tb.innerHTML = "";
  for (const row of rows) {
    const tr = document.createElement("tr");
    row.forEach((v, i) => { const td = document.createElement("td"); td.textContent = String(v); if (i) td.className = "n"; tr.appendChild(td); });
    tb.appendChild(tr);
  }
  compare(rows);
}

function compare(rows) {
  const kDone = D.frames[frame].kDone;
  const [f0, f1] = focusRange();
  let results = 0;
  for (let t = f0; t < f1; t++) for (const [r, c] of (ownedBy.get(t) || [])) if (r < D.m && c < D.n) results++;
  const perC = rows[0][6] / Math.max(1, D.m * D.n);
  let s = "global loads per element of C so far: " + +perC.toPrecision(3) + " (the naive rung at k = " + kDone + ": " + 2 * kDone + ")";
  if (results) s += "; this " + mode + ": " + rows[0][2] + " loads for " + results + " result(s), naive: " + 2 * kDone * results;
  document.getElementById("compare").textContent = s;
}

// The rules of state.Frames._staged: the block tile and the step depth, not the shapes of As and Bs.
function drawStaged() {
  const mk = D.frames[frame];
  const vis = Object.keys(D.smem).length > 0 && mk.step >= 0;
  for (const p of ["A", "B"]) {
    const rect = staged[p];
    if (!vis) { rect.setAttribute("visibility", "hidden"); continue; }
    const b = Math.floor(thread / D.tpb);
    let r0 = Infinity, c0 = Infinity;
    for (let t = b * D.tpb; t < (b + 1) * D.tpb; t++) for (const [r, c] of (ownedBy.get(t) || [])) { r0 = Math.min(r0, r); c0 = Math.min(c0, c); }
    const [bm, bn] = D.blockTile, bk = D.kTile, k0 = mk.step * bk;
    const box = p === "A" ? [r0, k0, bm, bk] : [k0, c0, bk, bn];
    const [ox, oy] = L.origin[p];
    rect.setAttribute("x", ox + box[1]); rect.setAttribute("y", oy + box[0]);
    rect.setAttribute("width", box[3]); rect.setAttribute("height", box[2]);
    rect.setAttribute("visibility", "visible");
  }
}

function go(f) { frame = Math.max(0, Math.min(NF - 1, f)); render(); }

function setThread(t) {
  thread = Math.max(0, Math.min(D.threads - 1, t | 0));
  document.getElementById("thread").value = thread;
  retitle();
  render();
}

function retitle() {
  const titles = panelTitles();
  for (const p of PANELS) document.querySelector("#panel-" + p + " > text").textContent = titles[p];
}

function play() {
  const btn = document.getElementById("play");
  if (timer) { clearInterval(timer); timer = null; btn.textContent = "play"; return; }
  if (frame === NF - 1) go(0);
  btn.textContent = "pause";
  timer = setInterval(() => { if (frame >= NF - 1) { play(); } else { go(frame + 1); } }, 700);
}

function legend() {
  const box = document.getElementById("legend");
  const smem = new Set(D.smemStates), hasS = Object.keys(D.smem).length > 0;
  for (const [name, colour, text] of D.states) {
    if (!text || (!hasS && smem.has(name))) continue;
    const row = document.createElement("div");
    const sw = document.createElement("span");
    sw.className = "sw"; sw.style.background = colour;
    row.appendChild(sw);
    row.appendChild(document.createTextNode(text));
    box.appendChild(row);
  }
}

function agreement() {
  const tb = document.querySelector("#agreement tbody");
  for (const [q, a, b] of D.agreement) {
    const tr = document.createElement("tr");
    const ok = Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(b));
    for (const [v, cls] of [[q, ""], [+a.toPrecision(6), ""], [+b.toPrecision(6), ""], [ok ? "equal" : "DIFFERENT", ok ? "ok" : "bad"]]) {
      const td = document.createElement("td"); td.textContent = String(v); if (cls) td.className = cls; tr.appendChild(td);
    }
    tb.appendChild(tr);
  }
}

function cellTable(header, rows) {
  const t = document.createElement("table");
  const head = t.createTHead().insertRow();
  for (const h of header) { const th = document.createElement("th"); th.textContent = h; head.appendChild(th); }
  const body = t.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    for (const [text, state] of row) {
      const td = tr.insertCell();
      td.textContent = text;
      if (state === true) td.className = "bad"; else if (state === false) td.className = "ok";
    }
  }
  return t;
}

function bankSection() {
  const B = D.banks;
  if (!B) return;
  const box = document.getElementById("banks");
  box.hidden = false;
  box.querySelector("summary").textContent = B.title;
  const sum = cellTable(B.summary.header, B.summary.rows);
  sum.id = "bank-summary";
  box.appendChild(sum);
  for (const m of B.maps) {
    const p = document.createElement("p");
    p.className = "title";
    p.textContent = m.title;
    box.appendChild(p);
    box.appendChild(cellTable(m.header, m.rows)).className = "bank-map";
  }
}

function init() {
  document.getElementById("title").textContent = "gemmlab visualiser: " + D.title;
  document.getElementById("subtitle").textContent = D.subtitle + ". " + D.idea + ".";
  document.getElementById("watch").textContent = "Watch: " + D.watch + ".";
  const slider = document.getElementById("slider");
  slider.max = NF - 1;
  slider.addEventListener("input", () => go(+slider.value));
  document.getElementById("first").addEventListener("click", () => go(0));
  document.getElementById("prev").addEventListener("click", () => go(frame - 1));
  document.getElementById("next").addEventListener("click", () => go(frame + 1));
  document.getElementById("last").addEventListener("click", () => go(NF - 1));
  document.getElementById("play").addEventListener("click", play);
  const sel = document.getElementById("mode");
  sel.value = mode;
  sel.addEventListener("change", () => { mode = sel.value; render(); });
  const inp = document.getElementById("thread");
  inp.max = D.threads - 1;
  inp.value = thread;
  inp.addEventListener("change", () => setThread(+inp.value));
  document.addEventListener("keydown", ev => {
    if (ev.target.tagName === "INPUT" || ev.target.tagName === "SELECT") return;
    if (ev.key === "ArrowRight") go(frame + 1);
    else if (ev.key === "ArrowLeft") go(frame - 1);
    else if (ev.key === "Home") go(0);
    else if (ev.key === "End") go(NF - 1);
    else if (ev.key === " ") { ev.preventDefault(); play(); }
    else return;
  });
  build();
  legend();
  agreement();
  bankSection();
  render();
  document.body.setAttribute("data-ready", "1");
}

init();
"""
