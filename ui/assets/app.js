// longtail ui: the console's one script (docs/ui.md).  It routes by the address (/, /curves, /trajectories,
// /trajectories/<task_id>), reads the JSON API, and builds every element with createElement and textContent:
// trajectory text is model and tool output and is never parsed as markup.  It polls only while the run is live.
'use strict';

const params = new URLSearchParams(location.search);
const run = params.get('run');
let live = false;
let timer = null;

// An element with properties (never innerHTML) and children (strings become text nodes).
function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'on') for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    else if (k in e && typeof v !== 'string') e[k] = v;
    else e.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

function withRun(path, extra) {
  const q = new URLSearchParams(extra || {});
  if (run) q.set('run', run);
  const s = q.toString();
  return s ? path + (path.includes('?') ? '&' : '?') + s : path;
}

async function api(path, extra, runName) {
  const r = await fetch(runName ? path + (path.includes('?') ? '&' : '?') + 'run=' + encodeURIComponent(runName) : withRun(path, extra));
  const j = await r.json().catch(() => ({ error: 'HTTP ' + r.status }));
  if (!r.ok) throw new Error(j.error || 'HTTP ' + r.status);
  return j;
}

function fmt(v, digits) {
  if (v === null || v === undefined) return '—';
  if (typeof v !== 'number') return String(v);
  if (Number.isInteger(v)) return v.toLocaleString('en-US');
  return v.toPrecision(digits || 4);
}

const main = document.getElementById('main');
function show(...nodes) { main.replaceChildren(...nodes.filter((n) => n !== null)); } // null: a part a page leaves out
function failure(e) { show(el('p', { class: 'error', role: 'alert' }, 'Error: ' + e.message)); }

function setLive(on) {
  live = on;
  const s = document.getElementById('live');
  s.textContent = on ? '● live' : 'finished';
  s.className = on ? 'on' : '';
}

// Redraws every 2 s while the run is live; a finished run keeps no request open.
function poll(fn) {
  clearTimeout(timer);
  if (live) timer = setTimeout(fn, 2000);
}

// ---- charts: a small hand-written canvas plotter (lines, axes, legend, drag to zoom, PNG) ----

const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#be185d', '#4d7c0f'];

function ticks(lo, hi, n) {
  if (!(hi > lo)) { hi = lo + 1; lo -= 1; }
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toPrecision(12));
  return out;
}

function tick(t) { return String(Number(t.toPrecision(6))); }

// series: [{name, points: [[x, y], ...], band: [[x, min, max], ...] (optional: shaded around the line)}]; opts.kind
// 'line' or 'bar', opts.labels: x tick texts by x.  The canvas records how many points and band steps it drew
// (data-points, data-band-points) and keeps its zoom (data-x0/data-x1) until a double click.
function chart(canvas, series, opts) {
  opts = opts || {};
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 600, h = canvas.clientHeight || 280;
  canvas.width = w * dpr; canvas.height = h * dpr;
  const g = canvas.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const zx0 = canvas.dataset.x0 !== undefined ? +canvas.dataset.x0 : -Infinity;
  const zx1 = canvas.dataset.x1 !== undefined ? +canvas.dataset.x1 : Infinity;
  const pts = series.map((s) => s.points.filter((p) => p[0] >= zx0 && p[0] <= zx1 && Number.isFinite(p[1])));
  const bands = series.map((s) => (s.band || []).filter((p) => p[0] >= zx0 && p[0] <= zx1 && Number.isFinite(p[1]) && Number.isFinite(p[2])));
  // the band's edges count for the y range as points would
  const all = pts.flat().concat(bands.flat().flatMap((p) => [[p[0], p[1]], [p[0], p[2]]]));
  canvas.dataset.points = String(pts.flat().length);
  canvas.dataset.bandPoints = String(bands.flat().length);
  g.font = '11px system-ui, sans-serif';
  if (!all.length) {
    g.fillStyle = '#5b6677';
    g.fillText('no data', w / 2 - 20, h / 2);
    return;
  }
  let x0 = Math.min(...all.map((p) => p[0])), x1 = Math.max(...all.map((p) => p[0]));
  let y0 = Math.min(...all.map((p) => p[1])), y1 = Math.max(...all.map((p) => p[1]));
  if (opts.kind === 'bar') { y0 = Math.min(0, y0); x0 -= 0.5; x1 += 0.5; }
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
  const L = 56, R = 12, T = 10 + 16 * Math.ceil(series.length / 4), B = 24;
  const X = (x) => L + (x - x0) / (x1 - x0) * (w - L - R);
  const Y = (y) => h - B - (y - y0) / (y1 - y0) * (h - T - B);
  g.strokeStyle = '#e5e7eb'; g.fillStyle = '#5b6677'; g.lineWidth = 1;
  for (const t of ticks(y0, y1, 5)) {
    g.beginPath(); g.moveTo(L, Y(t)); g.lineTo(w - R, Y(t)); g.stroke();
    g.fillText(tick(t), 4, Y(t) + 4);
  }
  for (const t of ticks(x0, x1, 8)) g.fillText(opts.labels ? opts.labels[t] ?? '' : tick(t), X(t) - 8, h - 8);
  series.forEach((s, i) => {
    const c = COLORS[i % COLORS.length], p = pts[i];
    g.strokeStyle = g.fillStyle = c; g.lineWidth = 1.6;
    if (opts.kind === 'bar') {
      const bw = Math.max(2, (w - L - R) / (x1 - x0) * 0.7);
      p.forEach(([x, y]) => g.fillRect(X(x) - bw / 2, Y(Math.max(0, y)), bw, Math.abs(Y(y) - Y(0))));
    } else {
      const b = bands[i];
      if (b.length) { // min along, max back: one closed shape, the line drawn over it
        g.globalAlpha = 0.18;
        g.beginPath();
        b.forEach(([x, lo], k) => (k ? g.lineTo(X(x), Y(lo)) : g.moveTo(X(x), Y(lo))));
        for (let k = b.length - 1; k >= 0; k--) g.lineTo(X(b[k][0]), Y(b[k][2]));
        g.closePath();
        g.fill();
        g.globalAlpha = 1;
      }
      g.beginPath();
      p.forEach(([x, y], k) => (k ? g.lineTo(X(x), Y(y)) : g.moveTo(X(x), Y(y))));
      g.stroke();
      if (p.length < 50) p.forEach(([x, y]) => g.fillRect(X(x) - 2, Y(y) - 2, 4, 4));
    }
    g.fillText(s.name, 8 + (i % 4) * ((w - 16) / 4), 14 + 16 * Math.floor(i / 4));
  });
  canvas.onmousedown = (e) => { canvas._drag = e.offsetX; };
  canvas.onmouseup = (e) => {
    const a = canvas._drag, b = e.offsetX;
    canvas._drag = null;
    if (a === null || a === undefined || Math.abs(a - b) < 5) return;
    const inv = (px) => x0 + (px - L) / (w - L - R) * (x1 - x0);
    canvas.dataset.x0 = String(inv(Math.min(a, b)));
    canvas.dataset.x1 = String(inv(Math.max(a, b)));
    chart(canvas, series, opts);
  };
  canvas.ondblclick = () => { delete canvas.dataset.x0; delete canvas.dataset.x1; chart(canvas, series, opts); };
}

function pngButton(canvas, name) {
  return el('button', { type: 'button', on: { click: () => {
    const a = el('a', { download: name.replace(/[^A-Za-z0-9_.-]+/g, '_') + '.png', href: canvas.toDataURL('image/png') });
    a.click();
  } } }, 'Save PNG');
}

// ---- overview ----

function card(k, v) { return el('div', { class: 'card' }, el('div', { class: 'v' }, fmt(v)), el('div', { class: 'k' }, k)); }

function simpleTable(caption, cols, rows) {
  return el('table', {}, el('caption', {}, caption),
    el('thead', {}, el('tr', {}, cols.map((c) => el('th', { scope: 'col' }, c)))),
    el('tbody', {}, rows.map((r) => el('tr', {}, r.map((v) => el('td', {}, fmt(v)))))));
}

async function runsList() {
  const j = await api('/api/runs');
  show(el('h1', {}, 'Runs'), el('ul', {}, j.runs.map((r) =>
    el('li', {}, el('a', { href: '/?run=' + encodeURIComponent(r.name) }, r.name), r.live ? ' (live)' : ''))));
}

async function overview() {
  const j = await api('/api/overview');
  setLive(j.live);
  document.getElementById('run-name').textContent = j.run;
  const now = Date.now();
  const hist = el('canvas', { class: 'chart', id: 'staleness-chart', 'aria-label': 'staleness histogram' });
  const acc = el('canvas', { class: 'chart', id: 'eval-chart', 'aria-label': 'eval accuracy by step' });
  const tr = j.trajectories;
  show(
    el('h1', {}, 'Run ', j.run, ' — ', j.state),
    el('div', { class: 'cards', id: 'cards' },
      card('policy version', j.policy_version), card('learner step', j.learner_step),
      card('trajectories/s', j.trajectories_per_s), card('reward (mean)', j.reward_mean),
      card('workers alive', j.workers_alive), card('trajectories', Object.values(tr).reduce((a, b) => a + b, 0))),
    simpleTable('Trajectories by status', Object.keys(tr), [Object.values(tr)]),
    simpleTable('Tasks by status', Object.keys(j.tasks), [Object.values(j.tasks)]),
    el('div', { class: 'grid' },
      el('section', {}, el('h2', {}, 'Staleness (last step)'), hist),
      el('section', {}, el('h2', {}, 'Eval accuracy'), acc)),
    simpleTable('Workers', ['name', 'alive', 'host', 'slots', 'in flight', 'backend', 'last seen (s ago)'],
      j.workers.map((w) => [w.name, w.alive ? 'yes' : 'no', w.host, w.slots, w.in_flight, w.backend,
        Math.round((now - w.last_ms) / 1000)])),
    simpleTable('Guardrail events', ['time', 'kind', 'detail'],
      j.guardrails.map((e) => [new Date(e.time_ms).toISOString(), e.kind, e.detail])),
    simpleTable('Recent events', ['time', 'kind', 'detail'],
      j.events.map((e) => [new Date(e.time_ms).toISOString(), e.kind, e.detail])));
  chart(hist, [{ name: 'trajectories by staleness', points: j.staleness_hist.map((b, i) => [i, b.trajectories]) }],
    { kind: 'bar', labels: j.staleness_hist.map((b) => b.bin) });
  chart(acc, [{ name: 'eval/accuracy', points: j.eval_accuracy }]);
  poll(() => overview().catch(failure));
}

// ---- curves ----

async function curves() {
  const names = (await api('/api/metrics')).names;
  const ov = await api('/api/overview');
  setLive(ov.live);
  document.getElementById('run-name').textContent = ov.run;
  let chosen = params.getAll('name').filter((n) => names.includes(n));
  if (!chosen.length) chosen = names.filter((n) => /^(reward\/mean|eval\/accuracy)$/.test(n));
  if (!chosen.length && names.length) chosen = [names[0]];
  // A folder of runs: other runs' curves overlaid (?also=NAME, repeated).
  const runs = run ? (await api('/api/runs')).runs.map((r) => r.name).filter((r) => r !== run) : [];
  let also = params.getAll('also').filter((r) => runs.includes(r));
  const canvas = el('canvas', { class: 'chart', id: 'curve-chart', 'aria-label': 'selected metrics by step' });
  const filter = el('input', { type: 'search', placeholder: 'filter metrics', 'aria-label': 'filter metrics' });
  const list = el('div', { class: 'metric-list', role: 'group', 'aria-label': 'metrics' });
  const draw = async () => {
    const q = new URLSearchParams();
    chosen.forEach((n) => q.append('name', n));
    if (run) q.set('run', run);
    also.forEach((r) => q.append('also', r));
    history.replaceState(null, '', '/curves?' + q.toString());
    const names = '/api/metrics?' + new URLSearchParams(chosen.map((n) => ['name', n]));
    const series = [];
    for (const r of [null, ...also]) {
      const j = chosen.length ? await api(names, null, r) : { series: {}, bands: {} };
      for (const n of chosen) {
        series.push({ name: (also.length ? (r || run) + ': ' : '') + n, points: j.series[n] || [], band: j.bands[n] });
      }
    }
    chart(canvas, series);
  };
  const overlay = runs.length ? el('fieldset', {}, el('legend', {}, 'Overlay other runs'), runs.map((r) =>
    el('label', {}, el('input', { type: 'checkbox', checked: also.includes(r), on: { change: (e) => {
      also = e.target.checked ? also.concat(r) : also.filter((x) => x !== r);
      draw().catch(failure);
    } } }), ' ', r, ' '))) : null;
  const boxes = () => list.replaceChildren(...names.filter((n) => n.includes(filter.value)).map((n) =>
    el('label', {}, el('input', { type: 'checkbox', value: n, checked: chosen.includes(n), on: { change: (e) => {
      chosen = e.target.checked ? chosen.concat(n) : chosen.filter((c) => c !== n);
      draw().catch(failure);
    } } }), ' ', n)));
  filter.addEventListener('input', boxes);
  boxes();
  // Held-out accuracy overall and per domain (eval/accuracy/<domain>) at one click.
  const perDomain = names.filter((n) => /^eval\/accuracy(\/|$)/.test(n));
  const evalButton = perDomain.length > 1 ? el('button', { type: 'button', id: 'eval-domains', on: { click: () => {
    chosen = perDomain.slice(0, 16);
    boxes();
    draw().catch(failure);
  } } }, 'Eval by domain') : null;
  show(el('h1', {}, 'Curves'), el('p', { class: 'muted' }, 'Drag across the chart to zoom; double-click to reset. ' +
    'A shaded band is the spread of a step (P/min to P/max around P/mean, or around P).'),
    canvas, el('p', {}, pngButton(canvas, 'longtail-curves'), ' ', evalButton), overlay, filter, list);
  await draw();
  const again = () => draw().then(() => poll(again)).catch(failure);
  poll(again);
}

// ---- trajectories ----

const FILTERS = [['domain', 'text'], ['status', ['', 'ready', 'consumed', 'stale', 'filtered', 'failed', 'eval']],
  ['outcome', ['', 'ok', 'reward_failed', 'env_error', 'aborted', 'error']], ['finish', ['', 'terminated', 'truncated', 'none']],
  ['reward_min', 'number'], ['reward_max', 'number'], ['staleness_min', 'number'], ['staleness_max', 'number'],
  ['version', 'number'], ['q', 'search']];
// [field, header, sort key]; the sort key 'id' is arrival order.
const COLS = [['task_id', 'task', 'id'], ['domain', 'domain'], ['status', 'status'], ['outcome', 'outcome'],
  ['finish', 'finish'], ['reward', 'reward', 'reward'], ['ntokens', 'tokens', 'ntokens'], ['turns', 'turns'],
  ['version_min', 'version', 'version'], ['staleness', 'staleness', 'staleness'], ['consumed_step', 'step']];

const NUMERIC = ['reward', 'ntokens', 'turns', 'version_min', 'staleness', 'consumed_step'];

async function trajectories() {
  const q = new URLSearchParams(location.search);
  const form = el('form', { class: 'filters', role: 'search', 'aria-label': 'filter trajectories' },
    FILTERS.map(([k, t]) => el('label', {}, k.replace('_', ' '), Array.isArray(t)
      ? el('select', { name: k }, t.map((o) => el('option', { value: o, selected: q.get(k) === o }, o || 'any')))
      : el('input', { name: k, type: t, step: 'any', value: q.get(k) || '' }))),
    el('button', { type: 'submit' }, 'Apply'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const n = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v !== '') n.set(k, v);
    for (const k of ['sort', 'order', 'run']) if (q.get(k)) n.set(k, q.get(k));
    history.pushState(null, '', '/trajectories?' + n.toString());
    route();
  });
  const api_q = new URLSearchParams(q);
  api_q.delete('run');
  const j = await api('/api/trajectories?' + api_q.toString());
  const sort = q.get('sort') || 'id', order = q.get('order') || 'asc';
  const go = (changes) => {
    const n = new URLSearchParams(q);
    for (const [k, v] of Object.entries(changes)) n.set(k, v);
    history.pushState(null, '', '/trajectories?' + n.toString());
    route();
  };
  const head = el('tr', {}, COLS.map(([k, label, s]) => {
    const sorted = s && s === sort;
    return el('th', { scope: 'col', class: NUMERIC.includes(k) ? 'num' : '',
      'aria-sort': sorted ? (order === 'desc' ? 'descending' : 'ascending') : 'none' },
    s ? el('button', { type: 'button', on: { click: () => go({ sort: s, order: sorted && order === 'asc' ? 'desc' : 'asc', offset: 0 }) } },
      label, sorted ? (order === 'desc' ? ' ▼' : ' ▲') : '') : label);
  }));
  const rows = j.rows.map((r) => el('tr', {}, COLS.map(([k]) => k === 'task_id'
    ? el('td', {}, el('a', { href: withRun('/trajectories/' + r.task_id) }, String(r.task_id)))
    : el('td', { class: NUMERIC.includes(k) ? 'num' : '' }, fmt(r[k])))));
  const off = j.offset, lim = j.limit;
  show(el('h1', {}, 'Trajectories'), form,
    el('table', { id: 'traj-table' }, el('caption', {}, `${fmt(j.total)} trajectories`,
      j.total ? ` — ${off + 1} to ${off + j.rows.length}` : '', sort === 'id' ? ' (arrival order)' : ''), el('thead', {}, head), el('tbody', {}, rows)),
    el('div', { class: 'pager' },
      el('button', { type: 'button', disabled: off === 0, on: { click: () => go({ offset: Math.max(0, off - lim) }) } }, '← Previous'),
      el('button', { type: 'button', disabled: off + lim >= j.total, on: { click: () => go({ offset: off + lim }) } }, 'Next →')));
}

// ---- one trajectory ----

// Control characters (an ANSI escape, say) as their visible pictures (U+2400...), newlines and tabs kept.
function visible(s) {
  return s.replace(/[\x00-\x08\x0b-\x1f\x7f]/g, (c) => (c === '\x7f' ? '\u2421' : String.fromCharCode(0x2400 + c.charCodeAt(0))));
}

// A message's text, shown as text; a capped turn offers the rest slice by slice.
function turn(id, i, m) {
  const pre = el('pre', {}, visible(typeof m.content === 'string' ? m.content : JSON.stringify(m.content ?? m, null, 1)));
  const sec = el('section', { class: 'turn', 'aria-label': `turn ${i}: ${m.role}` },
    el('h3', {}, `${i}: ${m.role || '?'}`, m.content_bytes ? ` — ${fmt(m.content_bytes)} bytes` : ''), pre);
  if (m.tool_calls) sec.append(el('pre', {}, 'tool calls: ' + JSON.stringify(m.tool_calls, null, 1)));
  let next = m.next_offset;
  if (next !== null && next !== undefined) {
    const more = el('button', { type: 'button' }, 'Show more');
    more.addEventListener('click', async () => {
      const s = await api(`/api/trajectories/${id}`, { turn: i, offset: next });
      pre.append(visible(s.content));
      next = s.next_offset;
      if (next === null) more.remove();
    });
    sec.append(more);
  }
  return sec;
}

// The learner's values of token i (t.token_values: what the step that trained it computed, or recomputed),
// null where it has none.  Flag bits as stored (docs/ui.md): 1 in the loss, 2 token mask passed, 4 trajectory
// mask passed, 8 clipped, 16 kept.
const NONE = ['#f3f4f6', 'no learner value (not trained on, or past the learner\'s context)'];
const val = (t, k, i) => (t.token_values && t.token_values[k][i] !== null ? t.token_values[k][i] : null);
const bounds = (t, k) => (t.token_values.loss[k] || [0, Infinity]);
const span = (b) => `[${b[0]}, ${b[1]}]`;

function ratioText(t, i) {
  const x = val(t, 'ratio', i), f = val(t, 'flags', i), b = bounds(t, 'token_bounds');
  const ok = (f & 2) !== 0, head = `x_t = π_old/π_rollout ${x.toFixed(4)}`;
  if (!(f & 1)) return head + ' (left out of the actor loss)';
  return `${head}, ${ok ? 'within' : 'outside'} the token bounds ${span(b)}${ok ? '' : ': rejected'}`;
}

function maskText(t, i) {
  const f = val(t, 'flags', i);
  if (!(f & 1)) return 'not in the actor loss';
  if (f & 16) return `kept: contributed to the loss (${ratioText(t, i)})${f & 8 ? ', clipped' : ''}`;
  if (!(f & 2)) return 'rejected by the MIS token mask: ' + ratioText(t, i);
  if (!(f & 4)) return 'rejected by the trajectory mask (geometric-mean ratio outside its bounds)';
  return f & 8 ? 'clipped: no gradient' : 'not kept';
}

const maxAbs = (t, k) => Math.max(1e-12, ...(t.token_values ? t.token_values[k].filter((v) => v !== null).map(Math.abs) : [0]));

const SHADES = {
  logprob: ['log-probability', (t, i) => { const p = Math.exp(t.logprobs[i]); return [`hsl(${Math.round(120 * p)} 70% 85%)`, 'log p ' + t.logprobs[i].toFixed(4)]; }],
  ratio: ['π_old/π_rollout ratio', (t, i) => {
    if (val(t, 'ratio', i) === null || !t.loss_mask[i]) return NONE;
    const x = val(t, 'ratio', i), ok = (val(t, 'flags', i) & 2) !== 0, l = Math.max(-1, Math.min(1, Math.log2(x)));
    return [ok ? `hsl(${l < 0 ? 210 : 30} 80% ${92 - 30 * Math.abs(l)}%)` : '#f87171', ratioText(t, i)];
  }],
  mis_mask: ['MIS token mask', (t, i) => {
    const f = val(t, 'flags', i);
    if (f === null) return NONE;
    const bg = !(f & 1) ? '#f3f4f6' : f & 16 ? '#bbf7d0' : !(f & 2) ? '#f87171' : !(f & 4) ? '#fdba74' : '#fde68a';
    return [bg, maskText(t, i)];
  }],
  advantage: ['advantage', (t, i) => {
    const a = val(t, 'adv', i);
    if (a === null && t.loss_mask[i] && val(t, 'ratio', i) !== null) return [NONE[0], 'advantage not recomputed (no critic with the weights used)'];
    if (a === null || !t.loss_mask[i]) return NONE;
    const m = Math.abs(a) / maxAbs(t, 'adv');
    return [`hsl(${a < 0 ? 0 : 140} 70% ${95 - 30 * m}%)`, 'advantage Â_t ' + a.toFixed(4)];
  }],
  entropy: ['entropy', (t, i) => {
    const h = val(t, 'entropy', i);
    if (h === null) return NONE;
    return [`hsl(270 70% ${96 - 30 * (h / maxAbs(t, 'entropy'))}%)`, 'entropy ' + h.toFixed(4) + ' nats'];
  }],
  version: ['policy version', (t, i) => [`hsl(${(t.versions[i] * 47) % 360} 60% 86%)`, 'version ' + t.versions[i]]],
  loss_mask: ['loss mask', (t, i) => [t.loss_mask[i] ? '#dbeafe' : '#f3f4f6', t.loss_mask[i] ? 'trained (mask 1)' : 'masked out (observation)']],
};

// The tokens, one box per context (sequence) of the episode; hovering one shows its value below the picker.
function tokens(t, by, readout) {
  const box = el('div', { class: 'tokens', id: 'tokens' });
  const n = Math.min(t.ntokens, 20000);
  const starts = t.seq_starts && t.seq_starts.length > 1 ? t.seq_starts : [0];
  for (let k = 0; k < starts.length; k++) {
    const a = starts[k], e = Math.min(k + 1 < starts.length ? starts[k + 1] : t.ntokens, n);
    const ctx = starts.length > 1 ? el('section', { class: 'context', 'aria-label': `context ${k}` },
      el('h3', {}, `context ${k} — tokens ${a} to ${Math.max(a, e - 1)}`)) : box;
    for (let i = a; i < e; i++) {
      const [bg, what] = SHADES[by][1](t, i);
      const text = t.token_text && t.token_text[i] !== null ? visible(t.token_text[i]) : String(t.tokens[i]);
      const label = `#${i} id ${t.tokens[i]}: ${what}`;
      const s = el('span', { class: 'tok' + (t.loss_mask[i] ? '' : ' masked'), title: label, 'data-i': String(i) }, text);
      s.style.background = bg;
      s.addEventListener('mouseenter', () => { readout.textContent = label; });
      ctx.append(s);
    }
    if (ctx !== box) box.append(ctx);
  }
  if (t.ntokens > n) box.append(el('p', { class: 'muted' }, `… ${t.ntokens - n} more tokens not shown`));
  return box;
}

// What the learner did with the trajectory: the step and its verdict, the trajectory mask's test, and where
// the per-token values come from.
function learnerFacts(t) {
  const v = t.token_values, tr = t.training;
  const facts = [['training', `${tr.verdict}: ${tr.why}`]];
  for (const q of tr.quarantined) facts.push(['quarantined attempt', `step ${q.step}: ${q.why}`]);
  if (!v) return facts.concat([['learner values', tr.step === null ? 'none: not trained'
    : `none stored by step ${tr.step} (longtail replay --fill-token-values recomputes them, docs/replay.md)`]]);
  const b = bounds(t, 'traj_bounds');
  facts.push(['trajectory mask', v.traj_ratio === null ? 'no loss token'
    : `geometric-mean ratio ${v.traj_ratio.toFixed(5)} ${v.traj_ok ? 'within' : 'outside'} ${span(b)}: ${v.traj_ok ? 'kept' : 'rejected'}` +
      (['mispo', 'gspo'].includes(v.loss.objective) ? '' : ` (not applied by ${v.loss.objective})`)]);
  facts.push(['learner values', v.source === 'stored' ? `stored by step ${v.step} (${v.loss.objective})`
    : `recomputed by replay with ${v.loss.model || 'the weights step ' + v.step + ' started from'} (${v.loss.objective}; not the step's own record)`]);
  return facts;
}

async function inspector(id) {
  const t = await api('/api/trajectories/' + id);
  const facts = [['task', String(t.task_id)], ['group', String(t.group_id)], ['domain', t.domain], ['status', t.status],
    ['outcome', t.outcome], ['finish', t.finish + (t.reason ? ` (${t.reason})` : '')], ['reward', t.reward],
    ['staleness', t.staleness], ['trained by step', t.training.step], ['versions', `${t.version_min}..${t.version_max}`],
    ['worker', t.worker], ['temperature', t.temperature], ['tokens', t.ntokens], ['error', t.error || null]];
  const by = el('select', { 'aria-label': 'colour tokens by', id: 'colour-by' },
    Object.entries(SHADES).map(([k, [label]]) => el('option', { value: k }, label)));
  const readout = el('p', { id: 'token-hover', class: 'muted', 'aria-live': 'polite' }, 'hover a token for its value');
  let box = tokens(t, 'logprob', readout);
  by.addEventListener('change', () => { const b = tokens(t, by.value, readout); box.replaceWith(b); box = b; });
  show(el('h1', {}, `Trajectory ${t.task_id}`),
    el('p', {}, el('a', { href: withRun('/trajectories') }, '← all trajectories')),
    el('dl', { class: 'facts' }, facts.concat(learnerFacts(t)).map(([k, v]) => [el('dt', {}, k), el('dd', {}, fmt(v))])),
    simpleTable('Reward components', ['component', 'value'], Object.entries(t.components)),
    el('h2', {}, 'Conversation'), el('div', { id: 'turns' }, t.messages.map((m, i) => turn(t.task_id, i, m))),
    ...(t.diff ? [el('h2', {}, 'Diff'), el('pre', { class: 'diff', id: 'diff' }, t.diff.split('\n').map(l => el('span', {
      class: /^(diff |--- |\+\+\+ )/.test(l) ? 'dh' : l[0] === '@' ? 'dat' : l[0] === '+' ? 'dadd' : l[0] === '-' ? 'ddel' : ''
    }, l + '\n')))] : []),
    el('h2', {}, 'Tokens'), el('p', {}, el('label', {}, 'colour by ', by),
      el('span', { class: 'muted' }, ' — dashed: not trained on (loss mask 0)')), readout,
    box);
}

// ---- routing ----

async function route() {
  clearTimeout(timer);
  const p = location.pathname;
  for (const [id, path] of [['nav-overview', '/'], ['nav-curves', '/curves'], ['nav-trajectories', '/trajectories']]) {
    const a = document.getElementById(id);
    a.href = withRun(path);
    if (p === path || (path === '/trajectories' && p.startsWith('/trajectories/'))) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  try {
    if (!run) {
      const runs = await api('/api/runs');
      if (runs.multi) return runsList();
    }
    const m = p.match(/^\/trajectories\/(\d+)$/);
    if (m) await inspector(m[1]);
    else if (p === '/curves') await curves();
    else if (p === '/trajectories') await trajectories();
    else await overview();
    document.body.dataset.ready = '1';
  } catch (e) {
    failure(e);
  }
}

window.addEventListener('popstate', route);
route();
