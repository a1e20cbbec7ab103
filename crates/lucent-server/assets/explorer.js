// lucent explorer: draws every intermediate of a real model's forward pass.
// Plain JS, no build step, no network but the server it came from (or none at all
// when opened as a standalone export, whose data is inlined in window.LUCENT_DATA).
// Each view fetches only what it shows (one layer and head at a time), through api(),
// which remembers every answer: the standalone export writes those answers out.
"use strict";
(function () {
  const SKELETON = document.getElementById("app").outerHTML;
  const STANDALONE = typeof window.LUCENT_DATA === "object" && window.LUCENT_DATA !== null;
  const memo = STANDALONE ? Object.assign({}, window.LUCENT_DATA) : {};
  const $ = (id) => document.getElementById(id);
  const VIEWS = ["heatmap", "table", "model", "lines", "steps", "architecture", "path", "distribution", "positions", "demos", "patch", "steer"];
  const state = {
    model: "", text: "", audio: "", stack: "", layer: 0, head: 0, token: -1, view: "heatmap",
    temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, seed: 1, preset: "", sqrt: false, row0: 0,
    // Interventions: heads zero-ablated in the model view ("L.H,L.H"), whether a click
    // there ablates; the patching view's corrupted text, target and point; the steering
    // view's two prompts, layer and coefficient.
    ablate: "", abmode: false, corrupt: "", target: "", hook: "resid_pre",
    sa: "I love you", sb: "I hate you", slayer: -1, coef: 4,
  };
  let models = [];
  let tokens = []; // the input's tokens (an encoder-decoder's source side)
  let targets = []; // an encoder-decoder's target tokens (the decoder's side)
  let current = null; // what the export buttons export: {canvas, csv(), json()}
  let renderSeq = 0;
  window.LUCENT_METRICS = { firstHeatmapMs: null, pending: 0 };

  // ------------------------------------------------------------ data
  function apiPath(route, params) {
    const q = Object.keys(params).sort().filter((k) => params[k] !== undefined && params[k] !== null && params[k] !== "")
      .map((k) => encodeURIComponent(k) + "=" + encodeURIComponent(params[k])).join("&");
    return "/explore/api/" + route + (q ? "?" + q : "");
  }
  async function api(route, params) {
    const path = apiPath(route, params || {});
    if (path in memo) return memo[path];
    if (STANDALONE) throw new Error("this standalone export does not hold " + path + "; open the explorer on a server for more");
    setStatus("computing " + route + " …");
    window.LUCENT_METRICS.pending++;
    try {
      const r = await fetch(path, { headers: authHeaders() });
      const body = await r.json().catch(() => ({ error: { message: "the server answered " + r.status + " without JSON" } }));
      if (r.status === 401) askKey();
      if (!r.ok) throw new Error((body.error && body.error.message) || ("HTTP " + r.status));
      memo[path] = body;
      setStatus("");
      return body;
    } finally {
      window.LUCENT_METRICS.pending--;
    }
  }
  // A server started with --api-key wants "Authorization: Bearer KEY" on every data
  // route. The key is asked for on the first 401 (or read once from the page's #key=
  // fragment), kept in this tab's sessionStorage only, never put in the URL's query,
  // and never written into a standalone export.
  const KEY_SLOT = "lucent-api-key";
  function apiKey() { try { return sessionStorage.getItem(KEY_SLOT) || ""; } catch (e) { return ""; } }
  function authHeaders() { const k = apiKey(); return k ? { Authorization: "Bearer " + k } : {}; }
  function takeKeyFromFragment() {
    const m = /(?:^#|&)key=([^&]*)/.exec(location.hash);
    if (!m) return;
    try { sessionStorage.setItem(KEY_SLOT, decodeURIComponent(m[1])); } catch (e) { /* no storage: the page asks instead */ }
    history.replaceState(null, "", location.pathname + location.search);
  }
  function askKey() {
    if (STANDALONE) return;
    $("key-row").hidden = false;
    $("key").focus();
  }
  function saveKey() {
    try { sessionStorage.setItem(KEY_SLOT, $("key").value.trim()); } catch (e) { setStatus("this browser keeps no session storage; the key cannot be kept", true); return; }
    $("key").value = "";
    $("key-row").hidden = true;
    for (const k of Object.keys(memo)) delete memo[k];
    start();
  }
  async function uploadAudio(file) {
    if (!file) return;
    setStatus("uploading " + file.name + " …");
    const r = await fetch("/explore/api/audio", { method: "POST", headers: Object.assign({ "Content-Type": "audio/wav" }, authHeaders()), body: file });
    const body = await r.json().catch(() => ({ error: { message: "the server answered " + r.status + " without JSON" } }));
    if (r.status === 401) askKey();
    if (!r.ok) throw new Error((body.error && body.error.message) || ("HTTP " + r.status));
    state.audio = body.audio;
    state.token = -1; state.row0 = 0;
    $("audio-info").textContent = file.name + ": " + body.seconds.toFixed(2) + " s (the first 30-s window is traced)";
    await update(true);
  }
  window.lucentUploadAudio = (bytes, name) => uploadAudio(new File([bytes], name || "audio.wav", { type: "audio/wav" }));
  function f32(b64) {
    const s = atob(b64);
    const bytes = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) bytes[i] = s.charCodeAt(i);
    return new Float32Array(bytes.buffer);
  }
  function setStatus(msg, isError) {
    const el = $("status");
    el.textContent = msg;
    el.className = isError ? "error" : "";
  }

  // ------------------------------------------------------------ colour
  // Viridis (perceptually uniform, readable in grey and by most colour-blind readers).
  const VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137], [53, 183, 121], [110, 206, 88], [181, 222, 43], [253, 231, 37]];
  function colour(v) {
    if (!(v >= 0)) v = 0;
    if (v > 1) v = 1;
    if (state.sqrt) v = Math.sqrt(v);
    const x = v * (VIRIDIS.length - 1);
    const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
    const f = x - i;
    const a = VIRIDIS[i], b = VIRIDIS[i + 1];
    return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
  }
  const MASKED = [225, 228, 232];
  function diverging(v, max) { // blue – white – red for signed values
    const x = Math.max(-1, Math.min(1, v / (max || 1)));
    return x >= 0 ? [255, 255 * (1 - x), 255 * (1 - x)] : [255 * (1 + x), 255 * (1 + x), 255];
  }

  // ------------------------------------------------------------ helpers
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) {
      if (k === "class") e.className = attrs[k];
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), attrs[k]);
      else e.setAttribute(k, attrs[k]);
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k.nodeType ? k : String(k));
    return e;
  }
  const fmt4 = (x) => (x === null || x === undefined || !isFinite(x)) ? (x === null ? "−∞" : String(x)) : x.toFixed(4);
  const label = (s) => JSON.stringify(s).slice(1, -1);
  function csvOf(rows) {
    return rows.map((r) => r.map((c) => {
      const s = String(c);
      return /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
    }).join(",")).join("\n") + "\n";
  }
  function download(name, data, type) {
    const a = el("a", { href: typeof data === "string" && data.startsWith("data:") ? data : URL.createObjectURL(new Blob([data], { type })), download: name });
    document.body.append(a);
    a.click();
    a.remove();
  }
  function model() { return models.find((m) => m.name === state.model) || models[0]; }
  function isDecoder() { const m = model(); return m && m.generates; }
  function isAudio() { const m = model(); return !!m && m.input === "audio"; }
  function stacks() { const m = model(); return (m && m.stacks) || []; }
  function stack() { const m = model(); return m && m.stacks.some((x) => x.name === state.stack) ? m.stacks.find((x) => x.name === state.stack) : (m ? m.stacks[0] : null); }
  function isSeq2Seq() { return stacks().length > 1; }
  // The tokens the current stack's queries are: the target side for the decoder's
  // self- and cross-attention of an encoder-decoder, else the input's tokens.
  function queryTokens() { return isSeq2Seq() && stack().name !== "encoder" ? targets : tokens; }
  function queryToken() { const q = queryTokens(); return state.token >= 0 && state.token < q.length ? state.token : q.length - 1; }
  function baseParams() {
    const p = isAudio() ? { model: state.model, audio: state.audio } : { model: state.model, text: state.text };
    if (isSeq2Seq()) p.stack = stack().name;
    return p;
  }

  // ------------------------------------------------------------ state ↔ URL
  function readState() {
    const src = STANDALONE ? (window.LUCENT_STATE || {}) : Object.fromEntries(new URLSearchParams(location.search));
    for (const k in state) {
      if (!(k in src)) continue;
      const v = src[k];
      if (typeof state[k] === "number") { const n = Number(v); if (isFinite(n)) state[k] = n; }
      else if (typeof state[k] === "boolean") state[k] = v === true || v === "1" || v === "true";
      else state[k] = String(v);
    }
    if (!VIEWS.includes(state.view)) state.view = "heatmap";
  }
  function writeState() {
    if (STANDALONE) return;
    const p = new URLSearchParams();
    for (const k of ["model", isAudio() ? "audio" : "text"].concat(isSeq2Seq() ? ["stack"] : [], ["layer", "head", "token", "view"])) p.set(k, state[k]);
    if (state.view === "distribution") for (const k of ["temperature", "top_k", "top_p", "min_p"]) p.set(k, state[k]);
    if (state.ablate) p.set("ablate", state.ablate);
    if (state.view === "model" && state.abmode) p.set("abmode", "1");
    if (state.view === "patch") for (const k of ["corrupt", "target", "hook"]) if (state[k]) p.set(k, state[k]);
    if (state.view === "steer") for (const k of ["sa", "sb", "slayer", "coef"]) p.set(k, state[k]);
    if (state.preset) p.set("preset", state.preset);
    history.replaceState(null, "", "?" + p.toString());
  }

  // ------------------------------------------------------------ controls
  function fillSelect(sel, n, labelOf, value) {
    sel.innerHTML = "";
    for (let i = 0; i < n; i++) sel.append(el("option", { value: i }, labelOf(i)));
    sel.value = value;
  }
  function fillControls() {
    const m = model();
    if (!m) return;
    const sk = stack();
    state.stack = sk.name;
    const layers = sk.layers;
    state.layer = Math.max(0, Math.min(state.layer, layers - 1));
    state.head = Math.max(0, Math.min(state.head, m.heads - 1));
    const group = Math.max(1, m.heads / Math.max(1, m.kv_heads));
    $("stack-box").hidden = !isSeq2Seq();
    const ss = $("stack");
    ss.innerHTML = "";
    for (const x of m.stacks) ss.append(el("option", { value: x.name }, x.title));
    ss.value = sk.name;
    fillSelect($("layer"), layers, (i) => i + (m.windows[i] ? " (window " + m.windows[i] + ")" : ""), state.layer);
    fillSelect($("head"), m.heads, (i) => i + (m.kv_heads < m.heads ? " (kv " + Math.floor(i / group) + ")" : ""), state.head);
    const qt = queryTokens();
    fillSelect($("token"), qt.length, (i) => i + ": " + label(qt[i].text), queryToken());
    $("text").hidden = isAudio();
    $("audio-box").hidden = !isAudio();
    if (isAudio() && state.audio && !$("audio-info").textContent) $("audio-info").textContent = "upload " + state.audio + " (the first 30-s window is traced)";
    $("run").hidden = isAudio();
    $("next-token").disabled = STANDALONE || !isDecoder();
    for (const b of document.querySelectorAll("#views button")) {
      const off = isSeq2Seq() && ["path", "distribution", "patch", "steer"].includes(b.dataset.view);
      b.disabled = off;
      b.title = off ? "the residual stream, logit lens and next-token views are drawn for encoders and decoders; an encoder-decoder shows its three attentions" : "";
    }
    const kv = Math.floor(state.head / group);
    $("kv-note").textContent = m.kv_heads < m.heads
      ? "grouped-query: heads " + (kv * group) + "–" + (kv * group + group - 1) + " share K/V head " + kv
      : "";
    $("model-info").textContent = m.family + ", " + m.kind + ", " + m.stacks.filter((x) => x.name !== "cross").map((x) => x.layers + " " + x.name + " layers").join(" + ") + " × " + m.heads + " heads (" + m.kv_heads + " K/V), d " + m.d_model + ", d_k " + m.d_k + (m.precision && m.precision !== "exact" ? ", " + m.precision + " products" : "");
    for (const b of document.querySelectorAll("#views button")) b.setAttribute("aria-selected", b.dataset.view === state.view ? "true" : "false");
  }
  function drawTokens() {
    const box = $("tokens");
    box.innerHTML = "";
    const q = queryToken();
    const queries = queryTokens();
    const row = (list, title) => {
      if (title) box.append(el("span", { class: "muted" }, title));
      list.forEach((t, i) => {
        const live = list === queries;
        const b = el("span", { class: "tok" + (t.special ? " special" : "") + (live && i === q ? " sel" : ""), tabindex: "0", title: (t.id === null ? "position " + i : "id " + t.id) + ", piece " + label(t.piece) + ", bytes " + t.bytes.map((x) => x.toString(16).padStart(2, "0")).join(" ") }, label(t.text), el("small", {}, t.id === null ? i : t.id));
        if (live) b.addEventListener("click", () => { state.token = i; update(); });
        box.append(b);
      });
    };
    if (!isSeq2Seq()) row(tokens, null);
    else {
      if (isAudio()) box.append(el("span", { class: "muted" }, "encoder: " + tokens.length + " audio positions of 20 ms (the audio and a little after); "));
      else row(tokens, "encoder (source):");
      row(targets, "decoder (target, generated greedily):");
    }
  }

  // ------------------------------------------------------------ heatmap
  async function attentionOf(layer, head, thumb) {
    const a = await api("attention", Object.assign(baseParams(), { layer, head, thumb }));
    if (!a._w) Object.defineProperty(a, "_w", { value: f32(a.weights_f32), enumerable: false });
    return a;
  }
  function isMasked(a, i, j) {
    if (!a.causal || a.rows !== a.cols) return false;
    if (j > i) return true;
    return a.window ? i - j >= a.window : false;
  }
  // rows × cols cells (queries × keys; square but for cross-attention), each cell
  // cw × ch pixels: square cells unless the matrix is far wider than tall.
  function heatmapCanvas(a, opts) {
    const R = a.rows, C = a.cols, w = a._w;
    const px = opts.px || 640;
    const cw = Math.max(1, Math.floor(px / C));
    const ch = R === C ? cw : Math.max(1, Math.min(Math.floor(px / R), Math.max(cw, opts.bare ? cw : 14)));
    const labels = !a.pooled && Math.min(cw, ch) >= 12 && !opts.bare;
    const rowLabels = !a.pooled && ch >= 12 && !opts.bare;
    const pad = labels ? 90 : 0, padL = rowLabels ? 90 : 0;
    const c = el("canvas", { width: C * cw + padL, height: R * ch + pad, role: "img", "aria-label": "attention heatmap of " + a.stack + " layer " + a.layer + " head " + a.head + "; the table view lists the numbers" });
    const g = c.getContext("2d");
    g.fillStyle = "#fff";
    g.fillRect(0, 0, c.width, c.height);
    const img = g.createImageData(C, R);
    for (let i = 0; i < R; i++) {
      for (let j = 0; j < C; j++) {
        const rgb = !a.pooled && isMasked(a, i, j) ? MASKED : colour(w[i * C + j]);
        const o = (i * C + j) * 4;
        img.data[o] = rgb[0]; img.data[o + 1] = rgb[1]; img.data[o + 2] = rgb[2]; img.data[o + 3] = 255;
      }
    }
    if (cw === 1 && ch === 1) g.putImageData(img, padL, pad);
    else {
      const off = el("canvas", { width: C, height: R });
      off.getContext("2d").putImageData(img, 0, 0);
      g.imageSmoothingEnabled = false;
      g.drawImage(off, padL, pad, C * cw, R * ch);
    }
    g.fillStyle = "#222";
    g.textBaseline = "middle";
    if (rowLabels) {
      g.font = Math.min(12, ch - 2) + "px monospace";
      g.textAlign = "right";
      for (let i = 0; i < R; i++) g.fillText(label(a.row_tokens[i]).slice(0, 10), padL - 4, pad + i * ch + ch / 2);
    }
    if (labels) {
      g.font = Math.min(12, cw - 2) + "px monospace";
      for (let j = 0; j < C; j++) {
        g.save();
        g.translate(padL + j * cw + cw / 2, pad - 4);
        g.rotate(-Math.PI / 2);
        g.textAlign = "left";
        g.fillText(label(a.col_tokens[j]).slice(0, 10), 0, 0);
        g.restore();
      }
    }
    if (!a.pooled && !opts.bare) {
      const q = queryToken();
      g.strokeStyle = "rgb(232,89,12)";
      g.lineWidth = 1;
      g.strokeRect(padL + 0.5, pad + q * ch + 0.5, C * cw - 1, Math.max(1, ch - 1));
    }
    c._cw = cw; c._ch = ch; c._pad = pad; c._padL = padL; c._rows = R; c._cols = C;
    return c;
  }
  async function viewHeatmap(v, seq) {
    const a = await attentionOf(state.layer, state.head);
    if (seq !== renderSeq) return;
    const c = heatmapCanvas(a, { px: 720 });
    const info = el("div", { class: "muted" }, "hover a cell; click it for its arithmetic");
    c.addEventListener("mousemove", (e) => {
      const [i, j] = cellAt(c, e);
      if (i >= 0) info.textContent = "query " + i + " " + label(a.row_tokens[i]) + " → key " + j + " " + label(a.col_tokens[j]) + ": weight " + fmt4(a._w[i * a.cols + j]);
    });
    c.addEventListener("click", (e) => {
      const [i, j] = cellAt(c, e);
      if (i >= 0) { state.token = i; state.key = j; state.view = "steps"; update(); }
    });
    const legend = el("div", { class: "legend" }, (isSeq2Seq() ? a.stack_title + ", " : "") + "layer " + a.layer + ", head " + a.head + (a.heads_sharing_kv.length > 1 ? " (K/V head " + a.kv_head + ", shared by heads " + a.heads_sharing_kv.join(", ") + ")" : "") + "; rows: queries, columns: keys" + (a.stack === "cross" ? " (the encoder's output" + (isAudio() ? ": audio positions of 20 ms" : "") + ")" : "") + "; colour 0 → 1 (viridis)" + (a.causal && a.rows === a.cols ? "; grey: masked (causal" + (a.window ? ", sliding window " + a.window : "") + ")" : a.stack === "cross" ? "; no mask: every target token may read every encoder position" + (isAudio() ? " (an alignment head shows the words' places as a diagonal band)" : "") : "; no mask (bidirectional)"),
      " ", el("label", {}, el("input", { type: "checkbox", id: "sqrt", ...(state.sqrt ? { checked: "" } : {}) }), " √ scale"));
    v.append(legend, el("div", { class: "scroll" }, c), info);
    $("sqrt").addEventListener("change", (e) => { state.sqrt = e.target.checked; update(); });
    current = { name: "attention-" + prefix(a) + "L" + a.layer + "-H" + a.head, canvas: c, rows: () => matrixRows(a), data: () => dataOf(a) };
    if (window.LUCENT_METRICS.firstHeatmapMs === null) {
      window.LUCENT_METRICS.firstHeatmapMs = performance.now();
      window.LUCENT_METRICS.tokens = a.t;
      $("timing").textContent = "First heatmap " + Math.round(performance.now()) + " ms after the request (" + a.t + " tokens).";
    }
  }
  function cellAt(c, e) {
    const r = c.getBoundingClientRect();
    const x = (e.clientX - r.left) * c.width / r.width - c._padL, y = (e.clientY - r.top) * c.height / r.height - c._pad;
    const i = Math.floor(y / c._ch), j = Math.floor(x / c._cw);
    return i >= 0 && j >= 0 && i < c._rows && j < c._cols ? [i, j] : [-1, -1];
  }
  function matrix(a) {
    const out = [];
    for (let i = 0; i < a.rows; i++) out.push(Array.from(a._w.subarray(i * a.cols, (i + 1) * a.cols)));
    return out;
  }
  function matrixRows(a) {
    return [["query \\ key"].concat(a.col_tokens)].concat(matrix(a).map((r, i) => [a.row_tokens[i]].concat(r.map(fmt4))));
  }
  function prefix(a) { return isSeq2Seq() ? a.stack + "-" : ""; }
  function dataOf(a) {
    const d = { layer: a.layer, head: a.head, tokens: a.row_tokens, weights: matrix(a) };
    if (isSeq2Seq()) { d.stack = a.stack; d.key_tokens = a.col_tokens; }
    return d;
  }

  // ------------------------------------------------------------ table
  async function viewTable(v, seq) {
    const a = await attentionOf(state.layer, state.head);
    if (seq !== renderSeq) return;
    const PAGE = 64;
    const r0 = Math.max(0, Math.min(state.row0, Math.max(0, a.rows - PAGE)));
    const t = el("table", { class: "num", id: "weights-table", "aria-label": "attention weights of " + a.stack + " layer " + a.layer + " head " + a.head + ", rows queries, columns keys" });
    const head = el("tr", {}, el("th", { scope: "col" }, "query \\ key"));
    a.col_tokens.forEach((tok, j) => head.append(el("th", { scope: "col", title: "key " + j }, label(tok))));
    t.append(el("thead", {}, head));
    const body = el("tbody");
    const q = queryToken();
    for (let i = r0; i < Math.min(a.rows, r0 + PAGE); i++) {
      const tr = el("tr", { class: i === q ? "hl" : "", "data-row": i }, el("th", { scope: "row" }, i + " " + label(a.row_tokens[i])));
      for (let j = 0; j < a.cols; j++) tr.append(el("td", {}, fmt4(a._w[i * a.cols + j])));
      body.append(tr);
    }
    t.append(body);
    const nav = el("div", {}, "rows " + r0 + "–" + Math.min(a.rows, r0 + PAGE) + " of " + a.rows + " ",
      el("button", { onclick: () => { state.row0 = Math.max(0, r0 - PAGE); update(); } }, "◀ previous"), " ",
      el("button", { onclick: () => { state.row0 = r0 + PAGE; update(); } }, "next ▶"));
    v.append(el("div", { class: "legend" }, (isSeq2Seq() ? a.stack_title + ", " : "") + "layer " + a.layer + ", head " + a.head + ": softmax weights to 4 decimals; rows are queries, columns keys" + (a.causal && a.rows === a.cols ? "; 0.0000 right of the diagonal is the causal mask" : "")), a.rows > PAGE ? nav : null, el("div", { class: "scroll" }, t));
    current = { name: "table-" + prefix(a) + "L" + a.layer + "-H" + a.head, canvas: null, rows: () => matrixRows(a), data: () => dataOf(a) };
  }

  // ------------------------------------------------------------ model view
  async function viewModel(v, seq) {
    const m = model();
    const group = Math.max(1, m.heads / Math.max(1, m.kv_heads));
    const px = 64;
    const grid = el("div", { class: "grid-models", style: "grid-template-columns: 60px repeat(" + m.heads + ", " + (px + 4) + "px)" });
    grid.append(el("div", {}, ""));
    for (let h = 0; h < m.heads; h++) grid.append(el("div", { class: "muted" + (h % group === 0 && group > 1 ? " kvgroup" : "") }, "h" + h + (group > 1 ? " kv" + Math.floor(h / group) : "")));
    const pending = [];
    const layers = stack().layers;
    for (let l = 0; l < layers; l++) {
      grid.append(el("div", { class: "muted" }, "layer " + l + (m.windows[l] ? " w" + m.windows[l] : "")));
      for (let h = 0; h < m.heads; h++) {
        const off = ablated().includes(l + "." + h);
        const slot = el("canvas", { width: px, height: px, class: "thumb" + (l === state.layer && h === state.head ? " sel" : "") + (off ? " ablated" : ""), "data-layer": l, "data-head": h, title: "layer " + l + ", head " + h + (off ? " (zero-ablated)" : ""), tabindex: "0", role: "button" });
        slot.addEventListener("click", () => {
          if (state.abmode) { toggleAblation(l, h); update(); return; }
          state.layer = l; state.head = h; state.view = "heatmap"; update();
        });
        grid.append(slot);
        pending.push(slot);
      }
    }
    v.append(el("div", { class: "legend" }, "every layer × head (bertviz's model view); heads sharing a K/V head are grouped; thumbnails (the clean run) are fetched as they scroll into view" + (tokens.length > 48 ? " and max-pooled to 48 × 48" : "") + (isSeq2Seq() ? "; " + stack().title + " (pick the attention above)" : "")));
    if (isDecoder() && !isSeq2Seq()) await ablationPanel(v, seq);
    if (seq !== renderSeq) return;
    v.append(el("div", { class: "scroll", id: "model-scroll" }, grid));
    const draw = async (slot) => {
      const l = +slot.dataset.layer, h = +slot.dataset.head;
      try {
        const a = await attentionOf(l, h, Math.max(tokens.length, queryTokens().length) > 48 ? 48 : undefined);
        if (seq !== renderSeq) return;
        const c = heatmapCanvas(a, { px, bare: true });
        slot.getContext("2d").drawImage(c, 0, 0, px, px);
      } catch (e) { setStatus(e.message, true); }
    };
    const io = new IntersectionObserver((entries) => {
      for (const en of entries) if (en.isIntersecting) { io.unobserve(en.target); queue.push(en.target); pump(); }
    }, { root: $("model-scroll") });
    const queue = [];
    let busy = false;
    const pump = async () => {
      if (busy) return;
      busy = true;
      while (queue.length && seq === renderSeq) await draw(queue.shift());
      busy = false;
    };
    pending.forEach((s) => io.observe(s));
    current = { name: "model-view", canvas: null, rows: () => [["layer", "head"]].concat(pending.map((s) => [s.dataset.layer, s.dataset.head])), data: () => ({ stack: stack().name, layers, heads: m.heads, kv_heads: m.kv_heads }) };
  }

  // ------------------------------------------------------------ ablation (model view)
  // Heads are zero-ablated by writing zeros into their rows of blocks.L.attn.hook_z (the
  // heads' outputs before W_O), through the routes' iv= (lucent::Intervention's JSON).
  function ablated() { return state.ablate ? state.ablate.split(",").filter((x) => /^\d+\.\d+$/.test(x)) : []; }
  function toggleAblation(l, h) {
    const key = l + "." + h, list = ablated();
    state.ablate = (list.includes(key) ? list.filter((x) => x !== key) : list.concat([key])).join(",");
  }
  function ablationIv() {
    return JSON.stringify(ablated().map((x) => { const [l, h] = x.split(".").map(Number); return { hook: "blocks." + l + ".attn.hook_z", op: "zero", head: h }; }));
  }
  const FULL = { temperature: 1, top_k: 0, top_p: 1, min_p: 0 }; // the model's own softmax
  async function ablationPanel(v, seq) {
    const mode = el("input", { type: "checkbox", id: "ablate-mode", ...(state.abmode ? { checked: "" } : {}) });
    mode.addEventListener("change", () => { state.abmode = mode.checked; writeState(); });
    const clear = el("button", { id: "ablate-clear", onclick: () => { state.ablate = ""; update(); } }, "restore all heads");
    const list = ablated();
    v.append(el("div", { class: "ablate-bar" }, el("label", {}, mode, " ablate mode: a click on a head zero-ablates it (its output rows of blocks.L.attn.hook_z set to 0), a second click restores it; off, a click opens the head's heatmap"),
      " ", list.length ? clear : null, el("span", { class: "muted" }, list.length ? " ablated: " + list.join(", ") : " no head ablated")));
    if (!list.length) return;
    const last = tokens.length - 1;
    const iv = ablationIv();
    const base = Object.assign(baseParams(), FULL, { token: last, limit: 200 });
    const [dc, da, pc, pa] = await Promise.all([api("distribution", base), api("distribution", Object.assign({}, base, { iv })),
      api("path", Object.assign(baseParams(), { token: last })), api("path", Object.assign(baseParams(), { token: last, iv }))]);
    if (seq !== renderSeq) return;
    const pOf = (d) => { const m = new Map(); for (const x of d.top) m.set(x.id, x); return m; };
    const mc = pOf(dc), ma = pOf(da);
    const ids = [];
    for (const x of dc.top.slice(0, 8).concat(da.top.slice(0, 8))) if (!ids.includes(x.id)) ids.push(x.id);
    const t = el("table", { class: "num", id: "ablate-table" });
    t.append(el("tr", {}, ...["token", "id", "p clean", "p ablated", "Δp"].map((h) => el("th", {}, h))));
    const rows = [["token", "id", "p_clean", "p_ablated", "delta"]];
    const pc4 = (x) => x === undefined ? "< " + fmt4(dc.top[dc.top.length - 1].p) : fmt4(x.p);
    const pa4 = (x) => x === undefined ? "< " + fmt4(da.top[da.top.length - 1].p) : fmt4(x.p);
    for (const id of ids) {
      const c = mc.get(id), a = ma.get(id);
      const text = (c || a).text;
      const delta = c && a ? a.p - c.p : null;
      const r = [label(text), id, pc4(c), pa4(a), delta === null ? "—" : (delta >= 0 ? "+" : "") + delta.toFixed(4)];
      rows.push(r);
      t.append(el("tr", { "data-id": id, "data-text": text, "data-clean": c ? c.p : "", "data-ablated": a ? a.p : "" }, ...r.map((x) => el("td", {}, x)),
        el("td", { style: "text-align:left" }, el("span", { class: "bar", style: "width:" + Math.round(120 * (c ? c.p : 0)) + "px" }), el("br"), el("span", { class: "bar ablated", style: "width:" + Math.round(120 * (a ? a.p : 0)) + "px" }))));
    }
    const lens = el("table", { class: "num", id: "lens-compare" });
    lens.append(el("tr", {}, el("th", {}, "layer"), el("th", {}, "logit lens, clean"), el("th", {}, "logit lens, ablated")));
    const top3 = (l) => l.slice(0, 3).map((x) => label(x.text) + " " + (100 * x.p).toFixed(1) + "%").join("  ");
    (pc.lens || []).forEach((l, i) => {
      const b = pa.lens[i];
      lens.append(el("tr", { class: l[0].id !== b[0].id ? "hl" : "" }, el("td", {}, i), el("td", { style: "text-align:left" }, top3(l)), el("td", { style: "text-align:left" }, top3(b))));
    });
    v.append(el("div", { class: "row", id: "ablate-panel" },
      el("div", { class: "panel" }, el("h3", {}, "next token after " + label(tokens[last].text) + ": clean run vs heads " + list.join(", ") + " zero-ablated"), t),
      el("div", { class: "panel" }, el("h3", {}, "logit lens at the last token (rows where the top token differs are marked)"), el("div", { class: "scroll", style: "max-height:300px" }, lens))));
    current = { name: "ablate-" + list.join("_"), canvas: null, rows: () => rows, data: () => ({ ablated: list, clean: dc, ablated_run: da }) };
  }

  // ------------------------------------------------------------ head view (lines)
  async function viewLines(v, seq) {
    const a = await attentionOf(state.layer, state.head);
    if (seq !== renderSeq) return;
    const q = queryToken();
    const span = 40;
    // Queries (left) around the query token; keys (right): the same span for
    // self-attention, the keys the query token weighs most for cross-attention.
    const lo = Math.max(0, Math.min(q - span / 2, a.rows - span)), hi = Math.min(a.rows, lo + span);
    let klo = lo, khi = Math.min(a.cols, hi);
    if (a.rows !== a.cols) {
      let best = 0;
      for (let j = 0; j < a.cols; j++) if (a._w[q * a.cols + j] > a._w[q * a.cols + best]) best = j;
      klo = Math.max(0, Math.min(best - span / 2, a.cols - span)); khi = Math.min(a.cols, klo + span);
    }
    const rowH = 18, W = 520;
    const c = el("canvas", { width: W, height: Math.max(hi - lo, khi - klo) * rowH + 20, role: "img", "aria-label": "lines from each query token to the keys it attends to" });
    const g = c.getContext("2d");
    g.font = "12px monospace";
    g.textBaseline = "middle";
    for (let i = lo; i < hi; i++) {
      for (let j = klo; j < khi; j++) {
        const w = a._w[i * a.cols + j];
        if (w < 0.01) continue;
        g.strokeStyle = i === q ? "rgba(232,89,12," + w + ")" : "rgba(59,91,219," + (w * 0.5) + ")";
        g.lineWidth = i === q ? 1 + 4 * w : 1 + 2 * w;
        g.beginPath();
        g.moveTo(150, 10 + (i - lo) * rowH + rowH / 2);
        g.lineTo(W - 150, 10 + (j - klo) * rowH + rowH / 2);
        g.stroke();
      }
    }
    g.fillStyle = "#222";
    for (let i = lo; i < hi; i++) {
      g.textAlign = "right";
      g.font = (i === q ? "bold " : "") + "12px monospace";
      g.fillText(label(a.row_tokens[i]).slice(0, 16), 145, 10 + (i - lo) * rowH + rowH / 2);
    }
    g.font = "12px monospace";
    g.textAlign = "left";
    for (let j = klo; j < khi; j++) g.fillText(label(a.col_tokens[j]).slice(0, 16), W - 145, 10 + (j - klo) * rowH + rowH / 2);
    v.append(el("div", { class: "legend" }, "head view: each query (left) to the keys (right) it attends to; line strength = weight (≥ 0.01); the query token's lines in orange. Queries " + lo + "–" + (hi - 1) + " of " + a.rows + (a.rows !== a.cols ? ", keys " + klo + "–" + (khi - 1) + " of " + a.cols : "") + "."), c);
    current = { name: "headview-" + prefix(a) + "L" + a.layer + "-H" + a.head, canvas: c, rows: () => matrixRows(a), data: () => dataOf(a) };
  }

  // ------------------------------------------------------------ arithmetic of one row
  async function viewSteps(v, seq) {
    const q = queryToken();
    const s = await api("steps", Object.assign(baseParams(), { layer: state.layer, head: state.head, token: q }));
    if (seq !== renderSeq) return;
    const key = state.key !== undefined && state.key < s.tokens.length ? state.key : -1;
    const vnorm = (x) => Math.sqrt(x.reduce((a, b) => a + b * b, 0));
    const preview = (x) => "[" + x.slice(0, 6).map((y) => y.toFixed(3)).join(", ") + (x.length > 6 ? ", … (" + x.length + ")" : "") + "]";
    v.append(el("div", { class: "formula" },
      "Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k + mask) · V — layer " + s.layer + ", head " + s.head + " (K/V head " + s.kv_head + "), query " + q + " " + label(s.query_tokens[q]) + ", d_k = " + s.d_k + ", scale = " + s.scale.toFixed(6) + (Math.abs(s.scale - 1 / Math.sqrt(s.d_k)) < 1e-6 ? " = 1/√" + s.d_k : " (the model's own scale)")));
    v.append(el("p", {}, "1. query q = " + preview(s.q) + "  ‖q‖ = " + vnorm(s.q).toFixed(3)));
    const t = el("table", { class: "num", id: "steps-table" });
    t.append(el("tr", {}, ...["j", "key", "2. q·kⱼ", "3. × scale", "4. + mask", "5. softmax wⱼ", "6. wⱼ·‖vⱼ‖"].map((h) => el("th", {}, h))));
    const rows = [["j", "key", "q.k", "scaled", "masked", "weight", "w*|v|"]];
    for (let j = 0; j < s.tokens.length; j++) {
      const m = s.mask[j];
      const masked = m === null ? null : s.scaled[j] + m;
      const r = [j, label(s.tokens[j]), fmt4(s.scores[j]), fmt4(s.scaled[j]), m === null ? "−∞" : fmt4(masked), fmt4(s.weights[j]), fmt4(s.weights[j] * vnorm(s.v[j]))];
      rows.push(r);
      const tr = el("tr", { class: j === key ? "hl" : "" }, ...r.map((x) => el("td", {}, x)));
      tr.lastChild.previousSibling.append(" ", el("span", { class: "bar", style: "width:" + Math.round(60 * s.weights[j]) + "px" }));
      t.append(tr);
    }
    v.append(el("div", { class: "scroll" }, t));
    if (key >= 0) {
      const prods = s.q.map((x, d) => x * s.k[key][d]);
      v.append(el("p", {}, "clicked cell: key " + key + " " + label(s.tokens[key]) + ": q·k = Σ qᵢkᵢ = " + prods.slice(0, 4).map((x) => x.toFixed(3)).join(" + ") + " + … = " + fmt4(s.scores[key]) + "; × " + s.scale.toFixed(4) + " = " + fmt4(s.scaled[key])));
    }
    v.append(el("p", {}, "7. output Σⱼ wⱼ·vⱼ = " + preview(s.context) + "  — recomputed here from q, K, V and the mask: largest difference from the kernel " + s.by_hand_max_diff.toExponential(1)));
    current = { name: "steps-" + (isSeq2Seq() ? s.stack + "-" : "") + "L" + s.layer + "-H" + s.head + "-T" + q, canvas: null, rows: () => rows, data: () => s };
  }

  // ------------------------------------------------------------ architecture
  function archBoxes(c, stage) {
    const b = [];
    const pre = c.norm_placement && String(c.norm_placement).toLowerCase().startsWith("pre");
    const norm = String(c.norm);
    const heads = c.n_heads + " heads" + (c.n_kv_heads < c.n_heads ? ", " + c.n_kv_heads + " K/V (grouped-query)" : "") + ", d_k " + c.head_dim;
    const self = stage === "encoder" ? "self-attention (bidirectional)" : "masked self-attention (causal" + (c.sliding_window ? ", window " + c.sliding_window + " on local layers" : "") + ")";
    if (pre) b.push(["norm", norm, /norm/i]);
    b.push(["attn", self + ": " + heads, /q|k|v|score|softmax|attention|head|context|w_o/i]);
    b.push(["res", "+ residual" + (pre ? "" : ", " + norm), /residual/i]);
    if (stage === "cross") b.push(["attn", "cross-attention over the encoder output", /cross/i], ["res", "+ residual", /residual/i]);
    if (pre) b.push(["norm", norm, /norm/i]);
    b.push(["ffn", "feed-forward " + c.ffn + " (" + c.activation + "), d_ff " + c.d_ff, /ffn|feed|d_ff|gate|up|down/i]);
    b.push(["res", "+ residual" + (pre ? "" : ", " + norm), /residual/i]);
    return b;
  }
  async function viewArchitecture(v, seq) {
    const params = state.preset ? { preset: state.preset, t: tokens.length || 8 } : baseParams();
    const a = await api("architecture", params);
    if (seq !== renderSeq) return;
    const c = a.config;
    const pick = el("select", { id: "preset", "aria-label": "architecture of" }, el("option", { value: "" }, "the model: " + state.model),
      ...["transformer-base", "bert-base", "gpt2", "llama-7b", "smollm2", "gemma3", "minilm"].map((p) => el("option", { value: p }, "preset: " + p)));
    pick.value = state.preset;
    pick.addEventListener("change", () => { state.preset = pick.value; update(); });
    const shapes = el("table", { class: "num", id: "shape-table" });
    const showShapes = (re) => {
      shapes.innerHTML = "";
      shapes.append(el("tr", {}, ...["stage", "×", "step", "dims", "shape", "note"].map((h) => el("th", {}, h))));
      for (const s of a.steps) {
        const hit = re && re.test(s.name);
        shapes.append(el("tr", { class: hit ? "hl" : "" }, el("td", {}, s.stage), el("td", {}, s.repeat), el("td", { style: "text-align:left" }, s.name), el("td", {}, s.dims), el("td", {}, "(" + s.shape.join(", ") + ")"), el("td", { style: "text-align:left" }, s.note)));
      }
    };
    const box = (kind, text, re) => {
      const d = el("div", { class: "box " + kind, tabindex: "0", role: "button" }, text);
      d.addEventListener("click", () => { for (const x of v.querySelectorAll(".box")) x.classList.remove("sel"); d.classList.add("sel"); showShapes(re); });
      return d;
    };
    const pos = String(c.position && typeof c.position === "object" ? c.position.kind : c.position);
    const stackOf = (stage, n, title) => el("div", { class: "stack" }, el("div", { class: "muted" }, title + " × " + n),
      ...archBoxes(c, stage).map(([k, t, re]) => box(k, t, re)));
    const input = a.audio ? [box("", "log-mel spectrogram (b, " + a.audio.n_mels + " mels, " + a.audio.frames + " frames of 10 ms)", /mel/i),
      box("", "Conv1d k 3 + GELU → (b, d " + c.d_model + ", " + a.audio.frames + ")", /conv/i),
      box("", "Conv1d k 3, stride 2 + GELU → (b, d, " + a.audio.positions + " positions of 20 ms)", /conv|transpose/i),
      box("", "positions: sinusoidal, stored (" + a.audio.positions + " × " + c.d_model + ")", /sinus|position/i)] : [box("", "token ids (b, t)", /ids|token/i), box("", "embedding E: V " + c.vocab_size + " × d " + c.d_model + (c.embedding_scale !== 1 ? ", × " + (+c.embedding_scale).toFixed(2) : ""), /embed/i),
      box("", "positions: " + pos + (pos === "rope" ? " (rotates Q and K inside attention)" : ""), /position|rope|sinus/i)];
    const out = [];
    if (c.final_norm) out.push(box("norm", "final " + c.norm, /final|norm/i));
    out.push(box("", c.kind === "encoder" ? "hidden states (b, t, d)" + (c.pooler ? " → pooler" : "") : "head → logits (b, t, V)" + (c.tie_embeddings ? ", tied to E" : ""), /logit|head|pool|output|hidden/i));
    let body;
    if (c.kind === "encoder_decoder") {
      body = el("div", { class: "arch" }, el("div", {}, ...input, stackOf("encoder", c.encoder_layers, "encoder layer")),
        el("div", {}, box("", "target ids → embedding + positions", /embed|target/i), stackOf("cross", c.decoder_layers, "decoder layer (self, cross, FFN)"), ...out));
    } else {
      body = el("div", { class: "arch" }, el("div", {}, ...input, stackOf(c.kind === "encoder" ? "encoder" : "decoder", c.kind === "encoder" ? c.encoder_layers : c.decoder_layers, (c.kind === "encoder" ? "encoder" : "decoder") + " layer"), ...out));
    }
    showShapes(null);
    v.append(el("div", { class: "legend" }, "architecture of ", pick, " drawn from its config (", c.family, "), shapes for t = ", a.t, " as `lucent shapes` computes them; click a box"),
      el("div", { class: "row" }, body, el("div", { class: "scroll" }, shapes)));
    current = { name: "architecture-" + (state.preset || state.model), canvas: null, rows: () => [["stage", "repeat", "name", "dims", "shape", "note"]].concat(a.steps.map((s) => [s.stage, s.repeat, s.name, s.dims, s.shape.join("x"), s.note])), data: () => a };
  }

  // ------------------------------------------------------------ residual, FFN, lens
  async function viewPath(v, seq) {
    if (isSeq2Seq()) { v.append(el("p", {}, state.model + " is an encoder-decoder: this view reads one stack's residual stream; pick Heatmap, Table, Model view, Head view or Arithmetic for its encoder self-, decoder self- and cross-attention.")); current = null; return; }
    const q = queryToken();
    const p = await api("path", Object.assign(baseParams(), { token: q }));
    if (seq !== renderSeq) return;
    const L = p.residual_norms.length;
    const t = p.t;
    let max = 0;
    for (const r of p.residual_norms) for (const x of r) max = Math.max(max, x);
    const cell = Math.max(1, Math.min(24, Math.floor(720 / t)));
    const ch = Math.max(6, Math.min(16, Math.floor(360 / L)));
    const c = el("canvas", { width: t * cell + 60, height: L * ch + 4, role: "img", "aria-label": "residual stream norm per layer and token" });
    const g = c.getContext("2d");
    g.font = "10px monospace";
    for (let l = 0; l < L; l++) {
      g.fillStyle = "#222";
      g.fillText(l === 0 ? "input" : "L" + (l - 1), 2, l * ch + ch - 2);
      (p.residual_norms[l] || []).forEach((x, i) => {
        const rgb = colour(Math.log1p(x) / Math.log1p(max));
        g.fillStyle = "rgb(" + rgb.map(Math.round).join(",") + ")";
        g.fillRect(60 + i * cell, l * ch, cell, ch);
      });
    }
    v.append(el("div", { class: "legend" }, "‖x‖ of the residual stream after each layer (rows) at each token (columns), log colour scale; brightest = " + max.toFixed(1)), c);
    const tbl = el("table", { class: "num", id: "path-table" });
    const moe = (p.experts || []).some((x) => x);
    tbl.append(el("tr", {}, ...["layer", "‖residual‖ at token", "‖attention out‖", "‖FFN out‖", "FFN mean |a|", "FFN active", moe ? "experts chosen at token (weight)" : "top FFN units at token", "logit lens: top next tokens"].map((h) => el("th", {}, h))));
    const rows = [["layer", "residual", "attn_out", "ffn_out", "ffn_mean_abs", "ffn_active"].concat(moe ? ["experts"] : [], ["lens"])];
    for (let l = 0; l < L - 1; l++) {
      const f = p.ffn[l] || {};
      const lens = p.lens ? p.lens[l].map((x) => label(x.text) + " " + (100 * x.p).toFixed(1) + "%").join("  ") : "—";
      const r = [l, fmt4(p.residual_norms[l + 1][q]), p.attn_out_norms[l].length ? fmt4(p.attn_out_norms[l][q]) : "—", p.ffn_out_norms[l].length ? fmt4(p.ffn_out_norms[l][q]) : "—", f.mean_abs !== undefined ? fmt4(f.mean_abs) : "—", f.active !== undefined ? (100 * f.active).toFixed(1) + "%" : "—"];
      const ex = (p.experts || [])[l];
      const chosen = ex ? ex.at_token.map((u) => "E" + u[0] + " " + u[1].toFixed(3)).join("  ") : null;
      rows.push(r.concat(moe ? [chosen || "—"] : [], [lens]));
      const units = moe ? (chosen || "—") : (f.top_at_token ? f.top_at_token.slice(0, 4).map((u) => "#" + u[0] + " " + u[1].toFixed(2)).join(" ") : "—");
      tbl.append(el("tr", {}, ...r.map((x) => el("td", {}, x)), el("td", { style: "text-align:left" }, units), el("td", { style: "text-align:left" }, lens)));
    }
    v.append(el("h3", {}, "at query token " + q + " " + label(p.tokens[q]) + (p.lens ? "; the logit lens reads each layer out through the final norm and the head" : "")), el("div", { class: "scroll" }, tbl));
    if (moe) {
      // Every token's experts in every layer (most probable first).
      const et = el("table", { class: "num", id: "experts-table" });
      et.append(el("tr", {}, el("th", {}, "layer"), ...p.tokens.map((t, i) => el("th", { title: t }, i + " " + label(t)))));
      p.experts.forEach((ex, l) => {
        if (ex) et.append(el("tr", {}, el("td", {}, l), ...ex.per_token.map((es, i) => el("td", { style: i === q ? "font-weight:bold" : "" }, es.join(",")))));
      });
      v.append(el("h3", {}, "experts each token chose, per layer (mixture of experts: the router's top-" + p.experts.find((x) => x).k + ")"), el("div", { class: "scroll" }, et));
    }
    current = { name: "path-T" + q, canvas: c, rows: () => rows, data: () => p };
  }

  // ------------------------------------------------------------ next-token distribution
  // The sampler's rules (lucent::pipeline::generate::distribution), in f32 like Rust:
  // T = 0 greedy; else top-k on the logits, softmax(z / T), top-p, min-p, renormalise.
  const F = Math.fround;
  function sortedIds(logits) {
    if (!logits._order) {
      const ids = new Uint32Array(logits.length);
      for (let i = 0; i < ids.length; i++) ids[i] = i;
      const order = Array.from(ids).sort((a, b) => logits[b] - logits[a]);
      Object.defineProperty(logits, "_order", { value: order });
    }
    return logits._order;
  }
  function samplerDistribution(logits, T, topK, topP, minP) {
    T = F(T); topP = F(topP); minP = F(minP);
    if (T === 0) {
      let best = 0;
      for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
      return [{ id: best, p: 1 }];
    }
    const order = sortedIds(logits);
    let n = order.length;
    if (topK > 0 && topK < n) n = topK;
    const zmax = logits[order[0]];
    const p = new Float64Array(n);
    let sum = 0;
    for (let i = 0; i < n; i++) { p[i] = F(Math.exp(F(F(logits[order[i]] - zmax) / T))); sum += p[i]; }
    for (let i = 0; i < n; i++) p[i] = F(p[i] / sum);
    let keep = n;
    if (topP < 1) {
      let acc = 0;
      for (let i = 0; i < n; i++) { acc = F(acc + p[i]); if (acc >= topP) { keep = i + 1; break; } }
      keep = Math.max(1, keep);
    }
    if (minP > 0) {
      const floor = F(minP * p[0]);
      let k = 0;
      while (k < keep && p[k] >= floor) k++;
      keep = Math.max(1, k);
    }
    let total = 0;
    for (let i = 0; i < keep; i++) total = F(total + p[i]);
    const out = [];
    for (let i = 0; i < keep; i++) out.push({ id: order[i], p: F(p[i] / total) });
    return out;
  }
  window.lucentSampler = samplerDistribution;
  let pathForDist = null;
  async function viewDistribution(v, seq) {
    if (!isDecoder()) { v.append(el("p", {}, state.model + " is not a decoder: it has no next-token distribution. Pick a decoder (smollm2, gemma3, a trained run).")); current = null; return; }
    const q = queryToken();
    const p = await api("path", Object.assign(baseParams(), { token: q }));
    if (seq !== renderSeq) return;
    pathForDist = p;
    const logits = p._logits || (p._logits = f32(p.logits_f32));
    const tok = (id) => { const hit = findLens(p, id); return hit !== undefined ? hit : "#" + id; };
    const out = el("div");
    const slider = (name, min, max, step) => {
      const i = el("input", { type: "range", id: "s-" + name, min, max, step, value: state[name], "aria-label": name });
      const val = el("span", { id: "v-" + name }, state[name]);
      i.addEventListener("input", () => { state[name] = Number(i.value); val.textContent = i.value; draw(); writeState(); });
      return el("label", {}, name + " ", i, " ", val, "  ");
    };
    const draw = () => {
      const d = samplerDistribution(logits, state.temperature, state.top_k, state.top_p, state.min_p);
      out.innerHTML = "";
      const t = el("table", { class: "num", id: "dist-table", "data-kept": d.length });
      t.append(el("tr", {}, el("th", {}, "rank"), el("th", {}, "id"), el("th", {}, "token"), el("th", {}, "p"), el("th", {}, "")));
      d.slice(0, 25).forEach((x, r) => t.append(el("tr", { "data-id": x.id, "data-p": x.p }, el("td", {}, r), el("td", {}, x.id), el("td", {}, label(tok(x.id))), el("td", {}, x.p.toFixed(6)), el("td", { style: "text-align:left" }, el("span", { class: "bar", style: "width:" + Math.round(300 * x.p) + "px" })))));
      out.append(el("p", { id: "dist-kept" }, d.length + " of " + logits.length + " tokens kept" + (state.temperature === 0 ? " (T = 0: greedy)" : "")), t);
      current = { name: "distribution-T" + q, canvas: null, rows: () => [["id", "p"]].concat(d.map((x) => [x.id, x.p])), data: () => ({ temperature: state.temperature, top_k: state.top_k, top_p: state.top_p, min_p: state.min_p, kept: d }) };
    };
    v.append(el("div", { class: "legend" }, "the next-token distribution after token " + q + " " + label(p.tokens[q]) + ", from the model's logits with the sampler's rules applied here, live: top-k, softmax at temperature T, top-p, min-p (llama.cpp's order)"),
      el("div", {}, slider("temperature", 0, 2, 0.05), slider("top_k", 0, 100, 1), slider("top_p", 0, 1, 0.01), slider("min_p", 0, 1, 0.01)), out);
    draw();
  }
  function findLens(p, id) {
    for (const x of p.final_top || []) if (x[0] === id) return x[1];
    for (const l of p.lens || []) for (const x of l) if (x.id === id) return x.text;
    return undefined;
  }
  let rngState = 0;
  function random() { // mulberry32, seeded by `seed`: the page's own draw
    rngState = (rngState + 0x6D2B79F5) | 0;
    let t = rngState;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  async function generateOne() {
    if (!isDecoder()) { setStatus(state.model + " is an encoder; it does not generate", true); return; }
    const q = tokens.length - 1;
    const p = await api("path", Object.assign(baseParams(), { token: q }));
    const logits = p._logits || (p._logits = f32(p.logits_f32));
    const d = samplerDistribution(logits, state.temperature, state.top_k, state.top_p, state.min_p);
    let u = random(), pick = d[d.length - 1];
    for (const x of d) { if (u < x.p) { pick = x; break; } u -= x.p; }
    const text = findLens(p, pick.id);
    if (text === undefined) { setStatus("the drawn token " + pick.id + " is not among the 256 most likely; lower T or top-k", true); return; }
    state.text = state.text + text;
    $("text").value = state.text;
    state.token = -1;
    await update(true);
  }

  // ------------------------------------------------------------ positions
  async function viewPositions(v, seq) {
    const p = await api("positions", { model: state.model, t: 64 });
    if (seq !== renderSeq) return;
    const cell = 5;
    const c = el("canvas", { width: p.d * cell, height: p.t * cell, role: "img", "aria-label": "sinusoidal position table" });
    const g = c.getContext("2d");
    for (let pos = 0; pos < p.t; pos++) for (let j = 0; j < p.d; j++) {
      const rgb = diverging(p.sinusoidal[pos * p.d + j], 1);
      g.fillStyle = "rgb(" + rgb.map(Math.round).join(",") + ")";
      g.fillRect(j * cell, pos * cell, cell, cell);
    }
    const rope = el("canvas", { width: 520, height: 150, role: "img", "aria-label": "RoPE rotation angles" });
    const posIn = el("input", { type: "range", min: 0, max: 63, value: 5, id: "rope-pos", "aria-label": "position" });
    const drawRope = () => {
      const r = rope.getContext("2d");
      r.clearRect(0, 0, rope.width, rope.height);
      const pos = +posIn.value;
      const pairs = [0, 1, 2, 4, 8, 16, p.rope.inv_freq.length - 1].filter((x, i, a) => x < p.rope.inv_freq.length && a.indexOf(x) === i);
      pairs.forEach((i, k) => {
        const cx = 40 + k * 70, cy = 70, R = 28, ang = pos * p.rope.inv_freq[i];
        r.strokeStyle = "#aaa"; r.beginPath(); r.arc(cx, cy, R, 0, 2 * Math.PI); r.stroke();
        r.strokeStyle = "#e8590c"; r.lineWidth = 2; r.beginPath(); r.moveTo(cx, cy); r.lineTo(cx + R * Math.cos(ang), cy - R * Math.sin(ang)); r.stroke(); r.lineWidth = 1;
        r.fillStyle = "#222"; r.font = "10px monospace"; r.textAlign = "center";
        r.fillText("pair " + i, cx, cy + R + 14); r.fillText((ang % (2 * Math.PI)).toFixed(2) + " rad", cx, cy + R + 26);
      });
    };
    posIn.addEventListener("input", drawRope);
    v.append(el("div", { class: "row" },
      el("div", { class: "panel" }, el("h3", {}, "sinusoidal: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(…) — " + p.t + " positions × d " + p.d), c),
      el("div", { class: "panel" }, el("h3", {}, "RoPE (" + p.position + "): pair i of q and k rotates by pos · θᵢ, θᵢ = " + p.rope.base + "^(−2i/d_k), d_k " + p.rope.d_k), el("label", {}, "position ", posIn), rope)));
    drawRope();
    current = { name: "positions", canvas: c, rows: () => { const r = [["pos"].concat([...Array(p.d).keys()])]; for (let i = 0; i < p.t; i++) r.push([i].concat(Array.from(p.sinusoidal.slice(i * p.d, (i + 1) * p.d)).map(fmt4))); return r; }, data: () => p };
  }

  // ------------------------------------------------------------ the guides' demos
  async function viewDemos(v, seq) {
    const m = await api("masks", { t: 8, window: 3, prefix: 4, pad: 2 });
    if (seq !== renderSeq) return;
    const masks = el("div", { class: "row" });
    for (const mk of m.masks) {
      const n = mk.rows.length, cell = 12;
      const c = el("canvas", { width: n * cell, height: mk.rows[0].length ? n * cell : 1, role: "img", "aria-label": mk.name });
      const g = c.getContext("2d");
      mk.rows.forEach((r, i) => r.forEach((x, j) => { g.fillStyle = x ? "#3b5bdb" : "#e9ecef"; g.fillRect(j * cell, i * cell, cell - 1, cell - 1); }));
      masks.append(el("div", { class: "panel" }, el("h3", {}, mk.name), c, el("div", { class: "muted", style: "max-width:140px" }, mk.note)));
    }
    // softmax with temperature
    const logitsIn = el("input", { id: "demo-logits", value: "2.0, 1.0, 0.1", "aria-label": "logits" });
    const tIn = el("input", { type: "range", min: 0.05, max: 5, step: 0.05, value: 1, id: "demo-t", "aria-label": "temperature" });
    const soft = el("div");
    const drawSoft = () => {
      const z = logitsIn.value.split(",").map(Number).filter((x) => isFinite(x));
      const rows = [0.5, 1, 2, +tIn.value].map((T) => {
        const mx = Math.max(...z), e = z.map((x) => Math.exp((x - mx) / T)), s = e.reduce((a, b) => a + b, 0);
        return [T === +tIn.value ? "T = " + T + " (slider)" : "T = " + T].concat(e.map((x) => (x / s).toFixed(4)));
      });
      soft.innerHTML = "";
      const t = el("table", { class: "num" }, el("tr", {}, el("th", {}, ""), ...z.map((x) => el("th", {}, "z = " + x))), ...rows.map((r) => el("tr", {}, ...r.map((x) => el("td", {}, x)))));
      soft.append(t);
    };
    logitsIn.addEventListener("input", drawSoft);
    tIn.addEventListener("input", drawSoft);
    // √d_k
    const dIn = el("input", { type: "range", min: 4, max: 1024, step: 4, value: 64, id: "demo-dk", "aria-label": "d_k" });
    const sq = el("div");
    const drawSq = () => {
      const d = +dIn.value;
      let seed = 7;
      const rnd = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
      const gauss = () => Math.sqrt(-2 * Math.log(rnd() + 1e-12)) * Math.cos(2 * Math.PI * rnd());
      const n = 8, qv = Array.from({ length: d }, gauss);
      const scores = Array.from({ length: n }, () => { let s = 0; for (let i = 0; i < d; i++) s += qv[i] * gauss(); return s; });
      const sm = (z) => { const mx = Math.max(...z), e = z.map((x) => Math.exp(x - mx)), s = e.reduce((a, b) => a + b, 0); return e.map((x) => x / s); };
      const raw = sm(scores), scaled = sm(scores.map((x) => x / Math.sqrt(d)));
      const std = Math.sqrt(scores.reduce((a, b) => a + b * b, 0) / n);
      sq.innerHTML = "";
      sq.append(el("p", {}, "q·k over " + d + " features of unit variance has std ≈ √d_k = " + Math.sqrt(d).toFixed(1) + " (here " + std.toFixed(1) + "); softmax of raw scores puts " + (100 * Math.max(...raw)).toFixed(1) + "% on one key, of scores ÷ √d_k " + (100 * Math.max(...scaled)).toFixed(1) + "%."),
        el("table", { class: "num" }, el("tr", {}, el("th", {}, "key"), ...raw.map((_, j) => el("th", {}, j))), el("tr", {}, el("td", {}, "softmax(q·k)"), ...raw.map((x) => el("td", {}, x.toFixed(3)))), el("tr", {}, el("td", {}, "softmax(q·k/√d_k)"), ...scaled.map((x) => el("td", {}, x.toFixed(3))))));
    };
    dIn.addEventListener("input", drawSq);
    v.append(el("h3", {}, "mask kinds (what each position may attend to; blue = visible)"), masks,
      el("h3", {}, "softmax with temperature"), el("label", {}, "logits ", logitsIn), " ", el("label", {}, "T ", tIn), soft,
      el("h3", {}, "the √d_k scaling"), el("label", {}, "d_k ", dIn), sq);
    drawSoft(); drawSq();
    current = { name: "masks", canvas: null, rows: () => m.masks.flatMap((mk) => [[mk.name]].concat(mk.rows)), data: () => m };
  }

  // ------------------------------------------------------------ patching
  // The patching sweep (lucent::Model::patching_sweep, what `lucent patch` prints): the
  // corrupted text's run with the clean run's blocks.L.hook_<point> written at one layer
  // and position; each cell is the share of the gap in log p(target) it restores.
  function textInput(id, key, placeholder) {
    const i = el("input", { id, value: state[key], placeholder, "aria-label": placeholder, size: 36 });
    i.addEventListener("change", () => { state[key] = i.value; update(); });
    return i;
  }
  async function viewPatch(v, seq) {
    if (!isDecoder() || isSeq2Seq()) { v.append(el("p", {}, state.model + " is not a decoder: the patching view watches a next token.")); current = null; return; }
    const hook = el("select", { id: "patch-hook", "aria-label": "patched point" }, ...["resid_pre", "attn_out", "mlp_out", "resid_post"].map((h) => el("option", { value: h }, "blocks.L.hook_" + h)));
    hook.value = state.hook;
    hook.addEventListener("change", () => { state.hook = hook.value; update(); });
    v.append(el("div", { class: "legend" }, "activation patching: the clean text is the one above; the corrupted text must have as many tokens. Each cell runs the corrupted text with the clean run's vector at one layer's point and one position (layers × positions passes, as `lucent patch`): 0 = the corrupted run, 1 = the clean run."),
      el("div", { class: "ablate-bar" }, el("label", {}, "corrupted text ", textInput("corrupt", "corrupt", "e.g. The Colosseum is in")), " ",
        el("label", {}, "target ", textInput("patch-target", "target", "the clean run's top token")), " ", el("label", {}, "point ", hook)));
    if (!state.corrupt) { v.append(el("p", {}, "Type a corrupted text (as many tokens as the clean one) and press Enter.")); current = null; return; }
    const ct = await api("tokens", Object.assign(baseParams(), { text: state.corrupt }));
    if (seq !== renderSeq) return;
    if (ct.tokens.length !== tokens.length) {
      v.append(el("p", { id: "patch-progress", class: "error" }, "the corrupted text is " + ct.tokens.length + " tokens (" + ct.tokens.map((t) => label(t.text)).join(" | ") + ") and the clean text " + tokens.length + ": patching copies position by position, so give texts of the same number of tokens"));
      current = null;
      return;
    }
    const prog = el("p", { id: "patch-progress", class: "muted" }, "starting the sweep …");
    v.append(prog);
    let polling = true;
    const poll = async () => {
      while (polling) {
        try {
          const r = await fetch("/explore/api/progress", { headers: authHeaders() });
          const p = await r.json();
          if (polling && p.total) { prog.textContent = "patching: " + p.done + " of " + p.total + " passes"; setStatus("patching " + p.done + "/" + p.total + " …"); }
        } catch (e) { /* the sweep's answer says what went wrong */ }
        await new Promise((r) => setTimeout(r, 250));
      }
    };
    const params = Object.assign(baseParams(), { corrupt: state.corrupt, target: state.target, hook: state.hook });
    let s;
    try {
      if (!STANDALONE && !(apiPath("patch", params) in memo)) poll();
      s = await api("patch", params);
    } catch (e) {
      polling = false;
      if (seq === renderSeq) { prog.textContent = e.message; prog.className = "error"; }
      current = null;
      return;
    } finally { polling = false; }
    if (seq !== renderSeq) return;
    prog.textContent = "target " + label(s.target) + " (id " + s.target_id + "): log p clean " + fmt4(s.clean_logprob) + ", corrupted " + fmt4(s.corrupt_logprob) + "; " + s.restored.length + " layers × " + s.tokens.length + " positions";
    const L = s.restored.length, T = s.tokens.length;
    const cw = Math.max(24, Math.min(72, Math.floor(640 / T))), ch = 14, padL = 50, padT = 90;
    const c = el("canvas", { width: padL + T * cw, height: padT + L * ch, role: "img", "aria-label": "share restored, layer × position" });
    const g = c.getContext("2d");
    g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height);
    for (let l = 0; l < L; l++) for (let p = 0; p < T; p++) {
      const rgb = diverging(s.restored[l][p], 1);
      g.fillStyle = "rgb(" + rgb.map(Math.round).join(",") + ")";
      g.fillRect(padL + p * cw, padT + l * ch, cw - 1, ch - 1);
    }
    g.fillStyle = "#222"; g.font = "11px monospace"; g.textBaseline = "middle";
    for (let l = 0; l < L; l++) { g.textAlign = "right"; g.fillText("L" + l, padL - 4, padT + l * ch + ch / 2); }
    for (let p = 0; p < T; p++) {
      g.save(); g.translate(padL + p * cw + cw / 2, padT - 4); g.rotate(-Math.PI / 2); g.textAlign = "left";
      g.fillText(label(s.tokens[p]).slice(0, 10) + (s.corrupt_tokens[p] !== s.tokens[p] ? " / " + label(s.corrupt_tokens[p]).slice(0, 10) : ""), 0, 0); g.restore();
    }
    const info = el("div", { class: "muted", id: "patch-info" }, "hover a cell; red = restores the clean answer, blue = pushes away from it");
    c.addEventListener("mousemove", (e) => {
      const r = c.getBoundingClientRect();
      const x = (e.clientX - r.left) * c.width / r.width - padL, y = (e.clientY - r.top) * c.height / r.height - padT;
      const l = Math.floor(y / ch), p = Math.floor(x / cw);
      if (l >= 0 && p >= 0 && l < L && p < T) info.textContent = "layer " + l + ", position " + p + " " + label(s.tokens[p]) + ": log p " + fmt4(s.logprob[l][p]) + ", restored " + s.restored[l][p].toFixed(3);
    });
    const t = el("table", { class: "num", id: "patch-table" });
    t.append(el("tr", {}, el("th", {}, "layer"), ...s.tokens.map((x, p) => el("th", { title: "corrupted: " + s.corrupt_tokens[p] }, p + " " + label(x)))));
    s.restored.forEach((row, l) => t.append(el("tr", {}, el("td", {}, l), ...row.map((r, p) => el("td", { "data-layer": l, "data-pos": p, "data-logprob": s.logprob[l][p], "data-restored": r, title: "log p " + fmt4(s.logprob[l][p]) }, r.toFixed(2))))));
    v.append(el("div", { class: "row" }, c, el("div", { class: "scroll", style: "max-height:520px" }, t)), info);
    current = { name: "patch-" + state.hook, canvas: c, rows: () => [["layer"].concat(s.tokens)].concat(s.restored.map((r, l) => [l].concat(r))), data: () => s };
  }

  // ------------------------------------------------------------ steering
  // The steering vector of two contrasting prompts (lucent::Model::steering_vector: the
  // residual stream after block L at A's last position minus B's) × a coefficient, added
  // to blocks.L.hook_resid_post at every position, as `lucent steer --from "A|B"`.
  async function viewSteer(v, seq) {
    if (!isDecoder() || isSeq2Seq()) { v.append(el("p", {}, state.model + " is not a decoder: the steering view continues a text.")); current = null; return; }
    const layers = stack().layers;
    if (state.slayer < 0 || state.slayer >= layers) state.slayer = Math.floor(layers / 2);
    const layerSel = el("select", { id: "steer-layer", "aria-label": "steering layer" });
    for (let l = 0; l < layers; l++) layerSel.append(el("option", { value: l }, l));
    layerSel.value = state.slayer;
    layerSel.addEventListener("change", () => { state.slayer = +layerSel.value; update(); });
    const coef = el("input", { type: "range", id: "s-coef", min: -16, max: 16, step: 0.5, value: state.coef, "aria-label": "coefficient" });
    const coefVal = el("span", { id: "v-coef" }, state.coef);
    coef.addEventListener("input", () => { coefVal.textContent = coef.value; });
    coef.addEventListener("change", () => { state.coef = Number(coef.value); update(); });
    v.append(el("div", { class: "legend" }, "steering: the vector (residual stream after block L at the last token of A) − (the same for B), × the coefficient, is added to blocks.L.hook_resid_post at every position of the text above; the next-token distribution and 16 greedy tokens, plain and steered (as `lucent steer --from \"A|B\" --scale C`)."),
      el("div", { class: "ablate-bar" }, el("label", {}, "A ", textInput("steer-a", "sa", "prompt A")), " ", el("label", {}, "B ", textInput("steer-b", "sb", "prompt B")), " ",
        el("label", {}, "layer ", layerSel), " ", el("label", {}, "coefficient ", coef, " ", coefVal)));
    if (!state.sa || !state.sb) { v.append(el("p", {}, "Give both prompts.")); current = null; return; }
    const s = await api("steer", Object.assign(baseParams(), { a: state.sa, b: state.sb, layer: state.slayer, coef: state.coef, n: 16 }));
    if (seq !== renderSeq) return;
    const side = (title, r, id) => {
      const t = el("table", { class: "num", id: id + "-top" });
      t.append(el("tr", {}, el("th", {}, "token"), el("th", {}, "p"), el("th", {}, "")));
      for (const x of r.top) t.append(el("tr", { "data-id": x.id, "data-p": x.p }, el("td", {}, label(x.text)), el("td", {}, fmt4(x.p)), el("td", { style: "text-align:left" }, el("span", { class: "bar", style: "width:" + Math.round(160 * x.p) + "px" }))));
      return el("div", { class: "panel" }, el("h3", {}, title), el("p", { class: "continuation" }, el("span", { class: "muted" }, state.text), el("span", { id }, r.continuation)), t);
    };
    v.append(el("p", { class: "muted" }, "vector norm × coefficient: " + s.norm.toFixed(2) + " at " + s.hook),
      el("div", { class: "row" }, side("plain", s.plain, "steer-plain"), side("steered (× " + s.coef + ")", s.steered, "steer-steered")));
    current = { name: "steer-L" + s.layer + "-x" + s.coef, canvas: null, rows: () => [["run", "continuation"], ["plain", s.plain.continuation], ["steered", s.steered.continuation]], data: () => s };
  }

  // ------------------------------------------------------------ render loop
  const RENDER = { heatmap: viewHeatmap, table: viewTable, model: viewModel, lines: viewLines, steps: viewSteps, architecture: viewArchitecture, path: viewPath, distribution: viewDistribution, positions: viewPositions, demos: viewDemos, patch: viewPatch, steer: viewSteer };
  async function update(reloadTokens) {
    const seq = ++renderSeq;
    try {
      if (reloadTokens || !tokens.length) {
        if (isAudio() && !state.audio) {
          tokens = []; targets = [];
          fillControls();
          $("view").innerHTML = "";
          $("view").append(el("p", {}, state.model + " is a speech model: choose a WAV file above (8–48 kHz, mono or stereo); its first 30 seconds are transcribed and traced."));
          document.body.dataset.ready = String(seq);
          return;
        }
        const t = await api("tokens", baseParams());
        if (seq !== renderSeq) return;
        tokens = t.tokens;
        targets = t.target || [];
      }
      fillControls();
      drawTokens();
      writeState();
      const v = $("view");
      v.innerHTML = "";
      current = null;
      await RENDER[state.view](v, seq);
      if (seq === renderSeq) { setStatus(""); document.body.dataset.ready = String(seq); }
    } catch (e) {
      if (seq === renderSeq) { setStatus(e.message, true); document.body.dataset.ready = "error"; }
    }
  }

  function exportStandalone() {
    const css = $("explorer-css").textContent;
    const js = $("explorer-js").textContent;
    const data = JSON.stringify(memo).replace(/</g, "\\u003c");
    const st = JSON.stringify(Object.assign({}, state)).replace(/</g, "\\u003c");
    const close = "<" + "/script>";
    const html = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>lucent explorer: " + state.model + "</title><link rel=\"icon\" href=\"data:,\"><style id=\"explorer-css\">" + css + "</style></head><body>" + SKELETON +
      "<script>window.LUCENT_DATA = " + data + ";\nwindow.LUCENT_STATE = " + st + ";" + close + "<script id=\"explorer-js\">" + js + close + "</body></html>\n";
    return html;
  }
  window.lucentStandalone = exportStandalone;

  function bind() {
    $("model").addEventListener("change", () => { state.model = $("model").value; state.stack = ""; state.layer = 0; state.head = 0; state.token = -1; update(true); });
    $("stack").addEventListener("change", () => { state.stack = $("stack").value; state.layer = 0; state.token = -1; state.row0 = 0; update(); });
    $("audio-file").addEventListener("change", (e) => uploadAudio(e.target.files[0]).catch((err) => setStatus(err.message, true)));
    $("key-save").addEventListener("click", saveKey);
    $("key").addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); saveKey(); } });
    $("run").addEventListener("click", () => { state.text = $("text").value; state.token = -1; state.row0 = 0; update(true); });
    $("text").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); $("run").click(); } });
    $("next-token").addEventListener("click", () => generateOne().catch((e) => setStatus(e.message, true)));
    $("layer").addEventListener("change", () => { state.layer = +$("layer").value; update(); });
    $("head").addEventListener("change", () => { state.head = +$("head").value; update(); });
    $("token").addEventListener("change", () => { state.token = +$("token").value; update(); });
    for (const b of document.querySelectorAll("#views button")) b.addEventListener("click", () => { state.view = b.dataset.view; update(); });
    $("export-png").addEventListener("click", () => {
      if (current && current.canvas) download(current.name + ".png", current.canvas.toDataURL("image/png"));
      else setStatus("this view has no picture; export CSV or JSON", true);
    });
    $("export-csv").addEventListener("click", () => { if (current) download(current.name + ".csv", csvOf(current.rows()), "text/csv"); });
    $("export-json").addEventListener("click", () => { if (current) download(current.name + ".json", JSON.stringify(current.data()), "application/json"); });
    $("export-html").addEventListener("click", () => download("lucent-explorer-" + state.model + ".html", exportStandalone(), "text/html"));
    document.addEventListener("keydown", (e) => {
      if (e.target && /TEXTAREA|INPUT|SELECT/.test(e.target.tagName)) return;
      const m = model();
      if (!m) return;
      let hit = true;
      if (e.key === "ArrowRight") state.head = (state.head + 1) % m.heads;
      else if (e.key === "ArrowLeft") state.head = (state.head + m.heads - 1) % m.heads;
      else if (e.key === "ArrowDown") state.layer = Math.min(stack().layers - 1, state.layer + 1);
      else if (e.key === "ArrowUp") state.layer = Math.max(0, state.layer - 1);
      else if (e.key === "j") state.token = Math.min(queryTokens().length - 1, queryToken() + 1);
      else if (e.key === "k") state.token = Math.max(0, queryToken() - 1);
      else if (e.key === "t") state.view = "table";
      else if (/^[0-9]$/.test(e.key)) state.view = VIEWS[(+e.key + 9) % 10];
      else hit = false;
      if (hit) { e.preventDefault(); update(); }
    });
  }

  let bound = false;
  async function start() {
    readState();
    rngState = state.seed | 0;
    if (!bound) { bind(); bound = true; takeKeyFromFragment(); }
    try {
      const m = await api("models", {});
      models = m.models;
    } catch (e) { setStatus(e.message, true); document.body.dataset.ready = "error"; return; }
    const sel = $("model");
    sel.innerHTML = "";
    for (const x of models) sel.append(el("option", { value: x.name }, x.name));
    if (!models.some((x) => x.name === state.model)) state.model = models.length ? models[0].name : "";
    sel.value = state.model;
    if (!state.text) state.text = $("text").value;
    $("text").value = state.text;
    if (STANDALONE) for (const b of ["run", "next-token"]) $(b).disabled = true;
    await update(true);
  }
  start();
})();
