// Shared by every page: the admin API client (CSRF header, login redirect), a small DOM
// builder, formatting, the health badge (the server's `badge`), the live event stream and toasts.
// Plain ES modules, no build step: what is here is what the browser runs.

const csrf = document.querySelector('meta[name="ccmesh-csrf"]')?.content || '';

/** An admin API error with the API's message and offending field. */
export class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.type = e.type || null;
    this.field = e.field || null;
  }
}

// Set once the page is on its way elsewhere (a link, the log-out form): a refusal heard after
// that (the live feed ending with the session) must not send the visitor somewhere else.
let leaving = false;
addEventListener('beforeunload', () => { leaving = true; });

function toLogin() {
  if (leaving) return;
  const next = location.pathname + location.search;
  location.assign('/login' + (next === '/' ? '' : '?next=' + encodeURIComponent(next)));
}

/** Call the admin API; resolves to the JSON answer (null for 204), rejects with ApiError. */
export async function api(method, path, body) {
  const headers = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && csrf) headers['x-ccmesh-csrf'] = csrf;
  const res = await fetch(path, {
    method, headers, credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status === 401 && csrf) { toLogin(); throw new ApiError(401, null); }
  if (res.status === 204) return null;
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = { error: { message: text } }; }
  if (!res.ok) throw new ApiError(res.status, json);
  return json;
}

/** `h('td', {class: 'x', onclick: f}, 'text', child)`: text is always text, never HTML. */
export function h(tag, attrs, ...children) {
  const svg = tag.startsWith('svg:');
  const el = svg ? document.createElementNS('http://www.w3.org/2000/svg', tag.slice(4)) : document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (!svg && (k === 'value' || k === 'checked' || k === 'hidden')) el[k] = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

// ------------------------------------------------------------------------------- formatting

const nf = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
export function fmtInt(n) {
  if (n === null || n === undefined) return '–';
  if (Math.abs(n) >= 1e9) return nf.format(n / 1e9) + ' G';
  if (Math.abs(n) >= 1e6) return nf.format(n / 1e6) + ' M';
  if (Math.abs(n) >= 1e4) return nf.format(n / 1e3) + ' k';
  return String(Math.round(n));
}
export function fmtMs(ms) {
  if (ms === null || ms === undefined) return '–';
  if (ms >= 10000) return (ms / 1000).toFixed(1) + ' s';
  if (ms >= 100) return String(Math.round(ms));
  return ms.toFixed(1);
}
export function fmtCost(usd) {
  if (usd === null || usd === undefined) return '–';
  if (usd === 0) return '$0';
  if (usd < 0.01) return '$' + usd.toPrecision(2);
  return '$' + usd.toFixed(usd < 10 ? 3 : 2);
}
export function fmtPct(x) {
  if (x === null || x === undefined || Number.isNaN(x)) return '–';
  return (x * 100).toFixed(x < 0.1 && x > 0 ? 1 : 0) + '%';
}
export function fmtTime(ms) {
  const d = new Date(ms);
  return d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
}
export function fmtDateTime(ms) {
  const d = new Date(ms);
  return d.toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
}
export function fmtSecs(ms) {
  const s = Math.ceil(ms / 1000);
  return s >= 120 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${s} s`;
}
export function tokensTotal(t) {
  if (!t) return null;
  const parts = [t.input, t.output, t.cache_read, t.cache_write].filter((v) => v !== null && v !== undefined);
  return parts.length ? parts.reduce((a, b) => a + b, 0) : null;
}
export function statusClass(status) {
  if (status >= 500 || status === 0) return 's5';
  if (status >= 400) return 's4';
  if (status >= 300) return 's3';
  return 's2';
}

// ------------------------------------------------------------------------------- health

/** Which protocol's breaker numbers are named in a badge: the endpoint's own family. */
export const PROTOCOLS = ['claude', 'openai', 'responses', 'gemini'];

/**
 * The badge of one `/api/health` entry, from the server's own `badge` field (SPEC §7: the one
 * rule `ccmesh health` shows too): green healthy (closed, no failure in a row), yellow degraded
 * (closed but failing: consecutive failures > 0, below the threshold), orange recovering
 * (half-open), red open (broken or rate-limited, with the cooldown left, then "probe due": the
 * next request probes it); grey unknown when there is no live data. This only adds the words
 * and the countdown. `settings` (optional) names the thresholds that apply.
 */
export function badgeInfo(hl, settings, now = performance.now()) {
  if (!hl) return { state: 'unknown', label: 'unknown', detail: 'no health data' };
  const withError = (text) => text + (hl.last_error ? `; last error: ${hl.last_error}` : '');
  switch (hl.badge) {
    case 'open': {
      const left = Math.max(0, (hl.cooldown_remaining_ms || 0) - (now - (hl._at || now)));
      const why = hl.open_reason === 'rate_limited' ? 'rate-limited' : 'broken';
      return {
        state: 'open', label: 'open', sub: `${why} · ${left > 0 ? fmtSecs(left) + ' left' : 'probe due'}`,
        detail: withError(`open (${why}); ${left > 0 ? 'cooldown ' + fmtSecs(left) + ' left' : 'cooled down: the next request probes it'}`),
        cooling: left > 0,
      };
    }
    case 'recovering':
      return { state: 'recovering', label: 'recovering', sub: 'half-open', detail: withError('half-open: a probe request decides') };
    case 'degraded': {
      const n = hl.consecutive_failures;
      const thresholds = settings
        ? PROTOCOLS.map((p) => `${p} ${settings.breaker[p].failure_threshold}`).join(' · ')
        : null;
      return {
        state: 'degraded', label: 'degraded', sub: `${n} failure${n === 1 ? '' : 's'} in a row`,
        detail: withError(`closed but failing: ${n} failure${n === 1 ? '' : 's'} in a row, not yet tripped` + (thresholds ? ` (opens at ${thresholds})` : '')),
      };
    }
    case 'healthy':
      return { state: 'healthy', label: 'healthy', detail: `closed; success rate ${fmtPct(hl.success_rate)} over ${hl.requests} requests` };
    default: {
      const test = hl.test_status === 'available' ? 'last test: available'
        : hl.test_status === 'unavailable' ? 'last test: unavailable' + (hl.last_error ? ` — ${hl.last_error}` : '')
        : 'never tested';
      const when = hl.test_at ? ` (${fmtDateTime(Date.parse(hl.test_at))})` : '';
      const sub = !hl.test_status || hl.test_status === 'untested' ? 'untested' : `test: ${hl.test_status}`;
      return { state: 'unknown', label: 'unknown', sub, detail: `no traffic since the gateway started; ${test}${when}` };
    }
  }
}

/** A badge element. */
export function badge(hl, settings) {
  const b = badgeInfo(hl, settings);
  return h('span', { class: `badge ${b.state}`, title: b.detail, dataset: { state: b.state } },
    h('span', { class: 'dot', 'aria-hidden': 'true' }), b.label, b.sub ? h('small', null, b.sub) : null);
}

// ------------------------------------------------------------------------------- live events

const listeners = new Map();
let source = null;
let retryTimer = null;

function setLiveStatus(state, text) {
  const el = document.getElementById('live-status');
  if (!el) return;
  el.hidden = false;
  el.className = 'live-status ' + state;
  el.textContent = text;
}

function emit(kind, data) {
  for (const fn of listeners.get(kind) || []) {
    try { fn(data); } catch (e) { console.error(e); }
  }
}

function connect() {
  clearTimeout(retryTimer);
  source = new EventSource('/api/events');
  source.addEventListener('open', () => { setLiveStatus('on', 'live'); emit('open', null); });
  for (const kind of ['hello', 'request', 'breaker', 'config', 'lagged']) {
    source.addEventListener(kind, (ev) => {
      let data = null;
      try { data = JSON.parse(ev.data); } catch { return; }
      emit(kind, data);
    });
  }
  source.addEventListener('error', () => {
    setLiveStatus('off', 'reconnecting');
    if (source.readyState === EventSource.CLOSED) {
      // Refused (e.g. the session expired): find out why, then try again later.
      source = null;
      api('GET', '/api/current').catch(() => {});
      retryTimer = setTimeout(connect, 3000);
    }
  });
}

/** Subscribe to live events (`hello`, `request`, `breaker`, `config`, `lagged`, `open`). */
export function live(kind, fn) {
  if (!listeners.has(kind)) listeners.set(kind, []);
  listeners.get(kind).push(fn);
  if (!source) connect();
}

// ------------------------------------------------------------------------------- small helpers

/** Run `fn` at most once per animation frame, however often it is asked for. */
export function perFrame(fn) {
  let queued = false;
  return () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; fn(); });
  };
}

/** Run `fn` at most every `ms`, trailing call included. */
export function throttle(fn, ms) {
  let last = 0;
  let timer = null;
  return () => {
    const wait = last + ms - Date.now();
    if (wait <= 0) { last = Date.now(); fn(); return; }
    if (!timer) timer = setTimeout(() => { timer = null; last = Date.now(); fn(); }, wait);
  };
}

export function toast(message, kind = 'info') {
  const box = document.getElementById('toasts');
  if (!box) return;
  const t = h('div', { class: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, message);
  box.append(t);
  setTimeout(() => t.remove(), kind === 'error' ? 8000 : 4000);
}

/** Show `message` at the field named `field` inside `root` (`[data-error-for]`). */
export function showFieldError(root, field, message) {
  const slot = field && root.querySelector(`[data-error-for="${CSS.escape(field)}"]`);
  if (!slot) return false;
  slot.textContent = message;
  const input = root.querySelector(`[name="${CSS.escape(field)}"]`);
  if (input) { input.setAttribute('aria-invalid', 'true'); input.focus(); }
  return true;
}

export function clearFieldErrors(root) {
  for (const el of root.querySelectorAll('[data-error-for]')) el.textContent = '';
  for (const el of root.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
}
