// berth dashboard: plain JavaScript, no build step, no framework.  Every
// action is a call of hostd's JSON API (docs/api.md), the same the CLI
// makes, with the API token as `Authorization: Bearer`.
'use strict';

const REFRESH_MS = 3000;
const SERIES_MS = 30000;
const HOUR = 3600;
const SVG = 'http://www.w3.org/2000/svg';
const $ = (id) => document.getElementById(id);

const state = {
  token: sessionStorage.getItem('berth-token') || '',
  machines: [],        // GET /v1/machines
  usage: null,         // GET /v1/usage
  series: null,        // GET /v1/usage?since=&step=3600: the last 24 hours
  seriesAt: 0,         // Date.now() when series was read
  readAt: 0,           // performance.now() when usage was read
  busy: {},            // machine name -> what is being done
  timer: null,
  ticker: null,
  loading: false,
  again: false,        // a forced refresh is due after the one under way
};

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body) {
  const opts = { method, headers: { Authorization: 'Bearer ' + state.token } };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  let r;
  try {
    r = await fetch(path, opts);
  } catch (e) {
    throw new ApiError(0, 'network', 'cannot reach berth: ' + e.message);
  }
  let j = null;
  try { j = await r.json(); } catch (e) { /* not JSON */ }
  if (!r.ok) {
    const err = (j && j.error) || {};
    throw new ApiError(r.status, err.code || 'http_' + r.status,
      err.message || r.status + ' ' + r.statusText);
  }
  return j;
}

// ---- money: the API gives nano-units (integers) -----------------------------

function money(nano, digits = 6) {
  const cur = state.usage ? state.usage.currency : '';
  return (nano / 1e9).toFixed(digits) + (cur ? ' ' + cur : '');
}

function usageOf(id) {
  if (!state.usage) return null;
  return state.usage.machines.find((u) => u.machine_id === id) || null;
}

// What a machine has cost up to now: its total when read, plus its rate
// since then (the live per-second counter).
function liveNano(u) {
  if (!u) return 0;
  const s = (performance.now() - state.readAt) / 1000;
  return u.total_nano + u.per_hour_nano * s / 3600;
}

// ---- errors -------------------------------------------------------------------

function showError(msg) {
  $('error-text').textContent = msg;
  $('error').hidden = false;
}
function clearError() { $('error').hidden = true; }

function handle(e) {
  if (e instanceof ApiError && e.status === 401) {
    logout('Your token was refused: ' + e.message);
    return;
  }
  showError(e.message || String(e));
}

// ---- login --------------------------------------------------------------------

function showLogin(msg) {
  $('dash').hidden = true;
  $('logout').hidden = true;
  $('login').hidden = false;
  $('login-error').hidden = !msg;
  $('login-error').textContent = msg || '';
  $('token').focus();
}

function logout(msg) {
  closeTerminal();
  state.token = '';
  sessionStorage.removeItem('berth-token');
  clearInterval(state.timer);
  clearInterval(state.ticker);
  state.timer = state.ticker = null;
  showLogin(msg);
}

async function login(token) {
  state.token = token;
  try {
    await refresh(true, true);
  } catch (e) {
    state.token = '';
    const msg = e instanceof ApiError && e.status === 401
      ? 'This token was refused: ' + e.message : e.message;
    showLogin(msg);
    return;
  }
  sessionStorage.setItem('berth-token', token);
  $('login').hidden = true;
  $('dash').hidden = false;
  $('logout').hidden = false;
  loadImages();
  clearInterval(state.timer);
  clearInterval(state.ticker);
  state.timer = setInterval(() => refresh().catch(handle), REFRESH_MS);
  state.ticker = setInterval(tick, 1000);
}

// ---- data -----------------------------------------------------------------------

// THROWING: the login's first call (errors go to the caller); FORCE: after
// an action, whose outcome must show: a refresh already under way may have
// read the state before it, so one more follows it.
async function refresh(throwing, force) {
  if (state.loading && !throwing) {
    if (force) state.again = true;
    return;
  }
  state.loading = true;
  try {
    const [ms, usage, evs] = await Promise.all([api('GET', '/v1/machines'),
      api('GET', '/v1/usage'), api('GET', '/v1/events?limit=500')]);
    state.machines = ms.machines;
    state.usage = usage;
    state.events = evs.events;
    state.readAt = performance.now();
    if (force || Date.now() - state.seriesAt > SERIES_MS) {
      // 24 hourly buckets ending with the current hour, in hostd's time.
      const since = Math.floor(usage.until / HOUR) * HOUR - 23 * HOUR;
      state.series = await api('GET', `/v1/usage?since=${since}&step=${HOUR}`);
      state.seriesAt = Date.now();
    }
    render();
  } finally {
    state.loading = false;
  }
  if (state.again) {
    state.again = false;
    await refresh(false, true);
  }
}

async function loadImages() {
  try {
    const r = await api('GET', '/v1/images');
    const sel = document.querySelector('#create-form select[name=image]');
    sel.replaceChildren();
    for (const img of r.images) {
      const o = document.createElement('option');
      o.value = o.textContent = img.name;
      sel.append(o);
    }
  } catch (e) { handle(e); }
}

// ---- rendering ------------------------------------------------------------------

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-')) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
}

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
}

function size(bytes) {
  const u = ['B', 'K', 'M', 'G', 'T'];
  let i = 0;
  while (bytes >= 1024 && i < u.length - 1) { bytes /= 1024; i++; }
  return (Math.round(bytes * 10) / 10) + u[i];
}

// Which actions a machine in STATE offers: [label, action].
function actionsFor(st) {
  const a = [];
  if (st === 'stopped' || st === 'suspended') a.push(['Start', 'start']);
  if (st === 'paused') a.push(['Resume', 'resume']);
  if (st === 'running') a.push(['Stop', 'stop'], ['Suspend', 'suspend']);
  if (st !== 'creating' && st !== 'deleting') {
    a.push(['Terminal', 'terminal'], ['Checkpoint', 'checkpoint'], ['Fork', 'fork'],
      ['Desktop', 'desktop'], ['Delete', 'delete']);
  }
  return a;
}

function seriesOf(id) {
  if (!state.series) return null;
  const u = state.series.machines.find((x) => x.machine_id === id);
  return u ? u.series : null;
}

// Bars of VALUES (nano-units per hour) in a W×H SVG; the newest on the
// right.  Each bar's title says its hour and amount.
function bars(values, W, H, cls, since) {
  const max = Math.max(...values, 1);
  const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', class: cls,
    role: 'img' });
  const bw = W / values.length;
  values.forEach((v, i) => {
    const h = v > 0 ? Math.max(H * v / max, 1) : 0;
    const t = new Date((since + i * HOUR) * 1000);
    g.append(svg('rect', { x: i * bw + bw * 0.1, y: H - h, width: bw * 0.8, height: h,
      class: 'compute', 'data-nano': v },
      svg('title', {}, `${t.toLocaleString()}: ${money(v)}`)));
  });
  return g;
}

// A machine's spend per hour over the last 24 hours.
function sparkline(id) {
  const v = seriesOf(id) || new Array(24).fill(0);
  const b = bars(v, 240, 28, 'spark', state.series ? state.series.since : 0);
  b.setAttribute('aria-label', 'spend per hour, last 24 hours');
  return b;
}

// What the machine's guest may reach: its egress policy ("open", "none" or
// its rules), and whether it is the host's default.
function egressLine(m) {
  const g = m.egress;
  if (!g) return el('div', { class: 'egress' });
  const text = g.policy + (g.truncated ? '…' : '');
  return el('div', { class: 'egress', 'data-egress': g.policy, title: g.default
    ? "the host's default egress policy" : "this machine's own egress policy",
    textContent: 'egress: ' + text + (g.default ? ' (default)' : '') });
}

// "3 min ago" for an ISO time.
function ago(iso) {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  return s < 60 ? s + ' s ago' : s < 3600 ? Math.round(s / 60) + ' min ago'
    : s < 86400 ? Math.round(s / 3600) + ' h ago' : Math.round(s / 86400) + ' d ago';
}

// The machine's last event and why ("suspended 3 min ago: idle for 900s
// (timeout 900s)"), its last five in the tooltip.
function eventLine(m) {
  const mine = (state.events || []).filter((e) => e.machine === m.name);
  if (!mine.length) return el('div', { class: 'event' });
  const last = mine[mine.length - 1];
  const why = (e) => e.cause.split('; ').pop();
  return el('div', { class: 'event', 'data-kind': last.kind,
    title: mine.slice(-5).reverse().map((e) => `${e.time} ${e.kind}: ${e.cause}`).join('\n'),
    textContent: `${last.kind} ${ago(last.time)}: ${why(last)}` });
}

function machineCard(m) {
  const u = usageOf(m.id);
  const busy = state.busy[m.name];
  const shown = busy || m.state;
  const card = el('article', { class: 'machine' + (busy ? ' busy' : ''), 'data-machine': m.name,
    'data-state': m.state });
  const actions = el('div', { class: 'actions' });
  for (const [label, act] of actionsFor(m.state)) {
    actions.append(el('button', { type: 'button', textContent: label, disabled: !!busy,
      className: act === 'delete' ? 'danger' : '', onclick: () => act === 'desktop'
        ? desktop(m.name) : act === 'terminal' ? terminal(m.name) : action(m.name, act),
      'data-action': act }));
  }
  card.append(
    el('div', { class: 'top' }, el('span', { class: 'name', textContent: m.name }),
      el('span', { class: 'state', textContent: shown })),
    el('div', { class: 'spec', textContent: `${m.image} · ${m.vcpus} vCPU · ${size(m.memory)}` +
      (m.allocated !== undefined ? ` · disk ${size(m.allocated)}` : '') }),
    egressLine(m),
    eventLine(m),
    el('div', { class: 'cost' }, el('strong', { class: 'counter', 'data-id': m.id,
      textContent: money(liveNano(u)) }), ' ',
    el('span', { class: 'hint', textContent: u ? '(' + money(u.per_hour_nano, 4) + '/h)' : '' })),
    sparkline(m.id),
    actions);
  return card;
}

function render() {
  const list = $('machines');
  list.replaceChildren(...state.machines.map(machineCard));
  $('empty').hidden = state.machines.length > 0;
  $('count').textContent = String(state.machines.length);
  const u = state.usage;
  const rate = u.machines.reduce((s, x) => s + x.per_hour_nano, 0);
  $('rate').textContent = money(rate, 4) + '/h';
  $('usage-note').textContent = 'since ' +
    (u.since ? new Date(u.since * 1000).toLocaleString() : 'the beginning');
  tick();
  renderSeries();
  renderChart();
  termWatch();
}

// Every second: the counters move by the machines' rates.
function tick() {
  if (!state.usage) return;
  let total = 0;
  for (const u of state.usage.machines) total += liveNano(u);
  $('total').textContent = money(total);
  for (const c of document.querySelectorAll('.counter')) {
    c.textContent = money(liveNano(usageOf(c.dataset.id)));
  }
}

// The total spend per hour over the last 24 hours, with hour labels.
function renderSeries() {
  const s = state.series;
  if (!s) return;
  const W = Math.max(300, Math.min(900, $('hours').clientWidth - 24 || 600)), H = 120, AX = 16;
  const chart = svg('svg', { viewBox: `0 0 ${W} ${H + AX}`, role: 'img',
    'aria-label': 'total spend per hour, last 24 hours', class: 'hours' });
  const inner = bars(s.series, W, H, '', s.since);
  inner.setAttribute('width', W);
  inner.setAttribute('height', H);
  chart.append(inner);
  s.series.forEach((v, i) => {
    if (i % 6) return;
    const t = new Date((s.since + i * HOUR) * 1000);
    chart.append(svg('text', { x: i * W / s.series.length, y: H + AX - 3, 'font-size': 12,
      fill: 'currentColor' }, t.getHours().toString().padStart(2, '0') + ':00'));
  });
  const sum = s.series.reduce((a, b) => a + b, 0);
  $('hours').replaceChildren(el('div', { class: 'legend' },
    el('span', { textContent: 'Last 24 hours, per hour: ' + money(sum) + ' in all' })), chart);
}

// The usage chart: one bar per machine (deleted ones too) split into
// compute and storage, and the total.
function renderChart() {
  const u = state.usage;
  const rows = u.machines.map((m) => ({
    label: m.name + (m.deleted ? ' (deleted)' : ''),
    compute: parseFloat(m.compute), storage: parseFloat(m.storage), nano: m.total_nano,
  }));
  rows.push({ label: 'Total', compute: rows.reduce((s, r) => s + r.compute, 0),
    storage: rows.reduce((s, r) => s + r.storage, 0), nano: u.total_nano, total: true });
  const max = Math.max(...rows.map((r) => r.compute + r.storage), 1e-12);
  // As wide as the page shows it, so the text keeps its size.
  const W = Math.max(300, Math.min(900, $('chart').clientWidth - 24 || 600));
  const LW = Math.min(150, W * 0.28), VW = 130, BH = 18, GAP = 8;
  const H = rows.length * (BH + GAP);
  const chart = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img',
    'aria-label': 'spend per machine and in total' });
  rows.forEach((r, i) => {
    const y = i * (BH + GAP);
    const span = W - LW - VW;
    const cw = span * r.compute / max, sw = span * r.storage / max;
    const g = svg('g', { class: r.total ? 'total' : 'row' });
    g.append(svg('text', { x: 0, y: y + BH - 4, 'font-size': 13,
      'font-weight': r.total ? 700 : 400, fill: 'currentColor' }, r.label.slice(0, 20)));
    g.append(svg('rect', { x: LW, y, width: Math.max(cw, 0), height: BH, class: 'compute' },
      svg('title', {}, 'compute ' + r.compute.toFixed(6))));
    g.append(svg('rect', { x: LW + cw, y, width: Math.max(sw, 0), height: BH,
      class: 'storage' }, svg('title', {}, 'storage ' + r.storage.toFixed(6))));
    g.append(svg('text', { x: W - VW + 6, y: y + BH - 4, 'font-size': 13, fill: 'currentColor' },
      money(r.nano)));
    chart.append(g);
  });
  const legend = el('div', { class: 'legend' },
    el('span', { textContent: 'Since the beginning, per machine and in total:' }),
    el('span', {}, el('span', { class: 'swatch compute' }), 'compute'),
    el('span', {}, el('span', { class: 'swatch storage' }), 'storage'));
  $('chart').replaceChildren(chart, legend);
}

// ---- actions --------------------------------------------------------------------

const enc = encodeURIComponent;

async function act(name, doing, fn) {
  state.busy[name] = doing;
  render();
  try {
    await fn();
    clearError();
  } catch (e) {
    handle(e);
  } finally {
    delete state.busy[name];
    await refresh(false, true).catch(handle);
  }
}

function action(name, a) {
  const base = '/v1/machines/' + enc(name);
  switch (a) {
    case 'start': case 'stop': case 'suspend': case 'resume':
      return act(name, { start: 'starting…', stop: 'stopping…', suspend: 'suspending…',
        resume: 'resuming…' }[a], () => api('POST', base + '/' + a));
    case 'checkpoint': {
      const ck = prompt('Checkpoint name (empty: a generated one)', '');
      if (ck === null) return;
      return act(name, 'checkpointing…',
        () => api('POST', base + '/checkpoints', ck ? { name: ck } : {}));
    }
    case 'fork': {
      const nn = prompt('Name of the new machine', name + '-fork');
      if (!nn) return;
      return act(name, 'forking…', () => api('POST', base + '/fork', { name: nn }));
    }
    case 'delete':
      if (!confirm(`Delete ${name} and its disk? This cannot be undone.`)) return;
      return act(name, 'deleting…', () => api('DELETE', base));
  }
}

// The desktop: a one-time URL from the API, opened in a new tab.  The tab
// is opened at the click (popup blockers allow that) and sent there once
// the URL is known.
async function desktop(name) {
  const w = window.open('about:blank', '_blank');
  try {
    const r = await api('POST', '/v1/machines/' + enc(name) + '/desktop');
    if (!r || !r.url) throw new Error('the API gave no desktop URL');
    // Only a web page: the blank tab shares this page's origin (and its
    // token), so nothing else (javascript:, data:) may be loaded into it.
    const u = new URL(r.url, window.location.href);
    if (u.protocol !== 'http:' && u.protocol !== 'https:')
      throw new Error('the API gave a desktop URL that is not http(s): ' + u.protocol);
    if (w) { w.opener = null; w.location = u.href; } else window.location.assign(u.href);
    clearError();
  } catch (e) {
    if (w) w.close();
    handle(e);
  }
}

async function create(form) {
  const f = new FormData(form);
  const body = { name: f.get('name').trim(), image: f.get('image') || undefined,
    vcpus: parseInt(f.get('vcpus'), 10), memory: f.get('memory'), start: true };
  const btn = form.querySelector('button[type=submit]');
  btn.disabled = true;
  btn.textContent = 'Creating…';
  try {
    await api('POST', '/v1/machines', body);
    form.reset();
    clearError();
  } catch (e) {
    handle(e);
  } finally {
    btn.disabled = false;
    btn.textContent = 'Create';
    await refresh(false, true).catch(handle);
  }
}

// ---- the terminal: a login shell on a PTY, over a WebSocket ---------------------
//
// GET /v1/machines/NAME/exec/ws (docs/api.md, "Commands over a WebSocket"): the
// first message is the command (the token with it: a browser cannot send
// Authorization on a WebSocket), output comes as binary messages (a byte
// saying stdout or stderr, then the bytes), what is typed goes as binary
// messages, a resize as {"resize": ...}.  The page's xterm.js and its fit
// addon (npm @xterm/xterm, @xterm/addon-fit) are berth-web's, under /xterm/,
// loaded the first time a terminal opens.  Closing the terminal (or the
// page) ends the shell.

const XTERM_JS = ['/xterm/xterm/lib/xterm.js', '/xterm/addon-fit/lib/addon-fit.js'];
const XTERM_CSS = '/xterm/xterm/css/xterm.css';
// The login shell of the image's user, as ssh would start it.
const SHELL = 'exec "${SHELL:-/bin/sh}" -l';

const term = {
  name: null,          // the machine
  xterm: null,         // the Terminal
  fit: null,           // its FitAddon
  observer: null,      // the ResizeObserver that refits it
  ws: null,            // the WebSocket of the shell now (null: none)
  sent: '',            // the size the shell was last told, "COLSxROWS"
  ended: false,        // the shell's end came (exit or error): the close is no loss
  loading: null,       // the promise of xterm's scripts
};

function loadScript(src) {
  return new Promise((resolve, reject) => {
    const s = el('script', { src });
    s.onload = resolve;
    s.onerror = () => reject(new Error('cannot load ' + src));
    document.head.append(s);
  });
}

// xterm.js 6.0 writes its DOM renderer's theme and sizes, and its
// scrollbar's colours, into <style> elements it makes (textContent), which
// the page's Content-Security-Policy refuses (style-src 'self', no
// 'unsafe-inline'): every rule of theirs would be dropped, and the
// terminal drawn without its colours and line heights.  So a <style> asked
// of document.createElement (by xterm alone: the page makes none) is an
// inert <template> element whose CSS text goes into a constructed
// stylesheet of the document's (CSSOM, which the policy allows), taken
// away with it.  Likewise the colours of a row's cells that have no class
// (24-bit colours, the selection), which xterm sets with
// setAttribute('style') on their <span>: set through CSSOM instead (the
// page sets no span's style attribute).
function styleShim() {
  const setAttr = HTMLSpanElement.prototype.setAttribute;
  HTMLSpanElement.prototype.setAttribute = function (name, value) {
    if (String(name).toLowerCase() !== 'style') return setAttr.call(this, name, value);
    this.style.cssText = String(value);
    return undefined;
  };
  const create = document.createElement;
  document.createElement = function (tag, options) {
    if (String(tag).toLowerCase() !== 'style') return create.call(this, tag, options);
    const holder = create.call(this, 'template');
    const sheet = new CSSStyleSheet();
    let text = '';
    const set = (v) => { text = String(v); sheet.replaceSync(text); };
    Object.defineProperty(holder, 'textContent', { get: () => text, set });
    Object.defineProperty(holder, 'innerText', { get: () => text, set });
    Object.defineProperty(holder, 'sheet', { get: () => sheet });
    document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
    const remove = holder.remove.bind(holder);
    holder.remove = () => {
      document.adoptedStyleSheets = document.adoptedStyleSheets.filter((x) => x !== sheet);
      remove();
    };
    return holder;
  };
}

function loadXterm() {
  if (!term.loading) {
    styleShim();
    document.head.append(el('link', { rel: 'stylesheet', href: XTERM_CSS }));
    term.loading = Promise.all(XTERM_JS.map(loadScript)).then(() => {
      if (!window.Terminal || !window.FitAddon) throw new Error('xterm.js did not load');
    });
    term.loading.catch(() => { term.loading = null; });
  }
  return term.loading;
}

// What the terminal's bar says; STATE (connecting, connected, asleep,
// ended, lost, closed) is also #term's data-state (the tests wait on it).
function termState(st, text) {
  $('term').dataset.state = st;
  $('term-status').textContent = text;
  $('term-reconnect').hidden = !['asleep', 'ended', 'lost'].includes(st);
}

function termSize() {
  const x = term.xterm;
  $('term').dataset.cols = x.cols;
  $('term').dataset.rows = x.rows;
  const size = `${x.cols}x${x.rows}`;
  const ws = term.ws;
  // After the command (the first message), which has the size it starts with.
  if (ws && ws.readyState === WebSocket.OPEN && term.sent && size !== term.sent) {
    ws.send(JSON.stringify({ resize: { cols: x.cols, rows: x.rows } }));
    term.sent = size;
  }
}

function termFit() {
  if (!term.xterm || $('term').hidden) return;
  try { term.fit.fit(); } catch (e) { /* not laid out yet */ }
  termSize();
}

function termSend(bytes) {
  const ws = term.ws;
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(bytes);
}

async function copySelection() {
  const text = term.xterm.getSelection();
  if (!text) return;
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {
    // No async clipboard (an http:// page that is not localhost's).
    const t = el('textarea', { value: text });
    document.body.append(t);
    t.select();
    document.execCommand('copy');
    t.remove();
    term.xterm.focus();
  }
}

// Ctrl+Shift+C copies the selection; Ctrl+Shift+V is left to the browser,
// whose paste event xterm sends as typed (Ctrl+C and Ctrl+V stay the
// terminal's).
function termKeys(ev) {
  if (ev.type !== 'keydown' || !ev.ctrlKey || !ev.shiftKey || ev.altKey || ev.metaKey) return true;
  if (ev.code === 'KeyC') {
    ev.preventDefault();
    copySelection();
    return false;
  }
  return ev.code !== 'KeyV';
}

async function terminal(name) {
  if (term.name && term.name !== name) closeTerminal();
  term.name = name;
  $('term-title').textContent = name;
  $('term').hidden = false;
  document.body.classList.add('term-open');
  termState('connecting', 'loading the terminal…');
  try {
    await loadXterm();
  } catch (e) {
    termState('closed', 'the terminal cannot load: ' + e.message);
    return;
  }
  if (term.name !== name) return;
  if (!term.xterm) {
    const x = new window.Terminal({ cursorBlink: true, scrollback: 5000, fontSize: 14,
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace' });
    term.fit = new window.FitAddon.FitAddon();
    x.loadAddon(term.fit);
    x.open($('term-screen'));
    const utf8 = new TextEncoder();
    x.onData((d) => termSend(utf8.encode(d)));
    x.onBinary((d) => termSend(Uint8Array.from(d, (c) => c.charCodeAt(0) & 255)));
    x.onResize(termSize);
    x.attachCustomKeyEventHandler(termKeys);
    term.xterm = x;
    term.observer = new ResizeObserver(() => requestAnimationFrame(termFit));
    term.observer.observe($('term-screen'));
  }
  termFit();
  if (!term.ws) connect();
  term.xterm.focus();
}

// A new shell (the one before, if any, ends): a machine that sleeps is
// woken by it.
function connect() {
  const old = term.ws;
  term.ws = null;
  if (old) old.close(1000);
  const x = term.xterm, name = term.name;
  const m = state.machines.find((mm) => mm.name === name);
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const ws = new WebSocket(`${proto}//${location.host}/v1/machines/${enc(name)}/exec/ws`);
  ws.binaryType = 'arraybuffer';
  term.ws = ws;
  term.sent = '';
  term.ended = false;
  termState('connecting', m && m.state !== 'running' ? `waking ${name}…` : 'connecting…');
  ws.onopen = () => {
    termFit();
    ws.send(JSON.stringify({ token: state.token, cmd: SHELL,
      pty: { cols: x.cols, rows: x.rows, term: 'xterm-256color' } }));
    term.sent = `${x.cols}x${x.rows}`;
  };
  ws.onmessage = (ev) => {
    if (ws !== term.ws) return;
    if (typeof ev.data !== 'string') {
      const b = new Uint8Array(ev.data);
      if (b[0] === 1 || b[0] === 2) x.write(b.subarray(1));
      return;
    }
    const j = JSON.parse(ev.data);
    if (j.id !== undefined) {
      termState('connected', j.woke_ms ? `connected (${name} woke in ` +
        `${(j.woke_ms / 1000).toFixed(1)} s)` : 'connected');
      termFit();
      x.focus();
    } else if (j.exit !== undefined) {
      term.ended = true;
      termState('ended', `the shell ended (exit ${j.exit}${j.signal ? ', ' + j.signal : ''})`);
    } else if (j.refused) {
      $('term-status').textContent = `${j.refused} refused: ${j.error.message}`;
    } else if (j.error) {
      term.ended = true;
      if (j.error.code === 'unauthorized' || j.error.code === 'invalid_token') {
        logout('Your token was refused: ' + j.error.message);
        return;
      }
      termState('ended', j.error.message);
    }
  };
  ws.onclose = (ev) => {
    if (ws !== term.ws) return;
    term.ws = null;
    if (term.ended) return;
    termState('lost', `the connection was lost (${ev.code}${ev.reason ? ': ' + ev.reason : ''})`);
    x.write('\r\n\x1b[2m[disconnected]\x1b[0m\r\n');
  };
}

// After each refresh: a machine that sleeps leaves its shell waiting (with
// network = routed it goes on after the wake); Reconnect wakes it with a
// new one.
function termWatch() {
  if (!term.name || !term.ws) return;
  const m = state.machines.find((mm) => mm.name === term.name);
  const st = $('term').dataset.state;
  if (!m) {
    term.ended = true;
    term.ws.close(1000);
    termState('ended', `${term.name} is gone`);
  } else if (m.state !== 'running' && st === 'connected') {
    termState('asleep', `${term.name} is ${m.state}: the shell waits for it; Reconnect ` +
      'wakes it with a new one');
  } else if (m.state === 'running' && st === 'asleep') {
    termState('connected', 'connected');
  }
}

function closeTerminal() {
  const ws = term.ws;
  term.ws = null;
  if (ws) ws.close(1000);
  if (term.observer) term.observer.disconnect();
  if (term.xterm) term.xterm.dispose();
  term.xterm = term.fit = term.observer = term.name = null;
  term.sent = '';
  $('term').hidden = true;
  document.body.classList.remove('term-open');
  termState('closed', '');
}

// ---- CSV: the columns of `berth usage --csv`, from a fresh /v1/usage ------------

function csvField(s) {
  s = String(s);
  return /[",\n\r]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
}

async function downloadCsv() {
  try {
    const u = await api('GET', '/v1/usage');
    const lines = ['machine_id,owner,name,deleted,running_s,storage_gib_s,compute,storage,total,currency'];
    for (const m of u.machines) {
      lines.push([m.machine_id, m.owner, m.name, m.deleted ? 'true' : 'false', m.running_s,
        m.storage_gib_s, m.compute, m.storage, m.total, u.currency].map(csvField).join(','));
    }
    const blob = new Blob([lines.join('\n') + '\n'], { type: 'text/csv' });
    const a = el('a', { href: URL.createObjectURL(blob),
      download: 'berth-usage-' + new Date().toISOString().slice(0, 10) + '.csv' });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  } catch (e) { handle(e); }
}

// ---- start ----------------------------------------------------------------------

document.addEventListener('DOMContentLoaded', () => {
  $('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    login($('token').value.trim());
  });
  $('logout').addEventListener('click', () => logout());
  $('error-close').addEventListener('click', clearError);
  $('create-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    create(ev.target);
  });
  $('csv').addEventListener('click', downloadCsv);
  $('term-close').addEventListener('click', closeTerminal);
  $('term-reconnect').addEventListener('click', () => { if (term.name) connect(); });
  window.addEventListener('resize', () => { if (state.usage) { renderSeries(); renderChart(); } });
  if (state.token) login(state.token);
  else showLogin();
});
