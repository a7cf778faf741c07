// One request: what was asked, what it cost, and its decision trail — every attempt in order,
// its outcome and the breaker transition it caused — drawn as a timeline and a table.
import { api, h, $, fmtInt, fmtMs, fmtCost, fmtDateTime, statusClass } from './app.js';

const box = $('#detail');
const id = box.dataset.id;

const CLASS_TEXT = {
  success: 'success', neutral: 'neutral (returned as is; the breaker saw nothing)', failure: 'failure',
  rate_limited: 'rate-limited', transient: 'transient (network: retried on the same endpoint)', cancelled: 'cancelled (the client went away)',
};

function kv(pairs) {
  return h('dl', { class: 'kv' }, pairs.filter(Boolean).flatMap(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
}

/** Attempts as bars on one time axis: when each was sent, how long it took, how it ended. */
function timeline(r, width) {
  const attempts = r.attempts || [];
  const total = Math.max(r.total_ms || 0, ...attempts.map((a) => a.started_ms + a.duration_ms), 1);
  const W = Math.max(320, width);
  const labelW = Math.min(200, Math.floor(W * 0.36));
  const lane = 24;
  const top = 4;
  const H = top + attempts.length * lane + 20;
  const x = (ms) => labelW + (ms / total) * (W - labelW - 8);
  const svg = h('svg:svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: 'timeline', role: 'img', 'aria-label': 'attempt timeline' });
  attempts.forEach((a, i) => {
    const y = top + i * lane;
    const label = `${i + 1}. ${a.endpoint} · ${a.status ?? a.error_kind ?? a.classification}`;
    svg.append(h('svg:text', { class: 'label', x: labelW - 8, y: y + 13, 'text-anchor': 'end' }, label.length > 32 ? label.slice(0, 31) + '…' : label));
    svg.append(h('svg:rect', { class: 'lane', x: labelW, y, width: W - labelW - 8, height: lane - 6, rx: 3 }));
    const bar = h('svg:rect', { class: `bar ${a.classification}`, x: x(a.started_ms), y, width: Math.max(2, x(a.started_ms + a.duration_ms) - x(a.started_ms)), height: lane - 6, rx: 3 });
    bar.append(h('svg:title', null, `${a.endpoint}: ${a.classification}, sent at ${fmtMs(a.started_ms)} ms, took ${fmtMs(a.duration_ms)} ms${a.breaker ? '; breaker ' + a.breaker : ''}`));
    svg.append(bar);
  });
  const axisY = top + attempts.length * lane + 12;
  for (let k = 0; k <= 4; k++) {
    const ms = (total * k) / 4;
    svg.append(h('svg:text', { x: x(ms), y: axisY, 'text-anchor': k === 0 ? 'start' : k === 4 ? 'end' : 'middle' }, `${fmtMs(ms)} ms`));
  }
  return svg;
}

function trailTable(r) {
  return h('div', { class: 'table-wrap' }, h('table', { class: 'trail', id: 'trail' },
    h('thead', null, h('tr', null, ['#', 'endpoint', 'format', 'start (ms)', 'duration (ms)', 'status', 'outcome', 'error', 'breaker'].map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', null, (r.attempts || []).map((a, i) => h('tr', { dataset: { classification: a.classification } },
      h('td', null, String(i + 1)),
      h('td', null, a.endpoint),
      h('td', null, a.format),
      h('td', { class: 'num' }, fmtMs(a.started_ms)),
      h('td', { class: 'num' }, fmtMs(a.duration_ms)),
      h('td', null, a.status !== null ? h('span', { class: `st ${statusClass(a.status)}` }, a.status) : '–'),
      h('td', null, h('span', { class: `cls ${a.classification}` }, CLASS_TEXT[a.classification] || a.classification)),
      h('td', { class: 'wrap-anywhere' }, [a.error_kind, a.error].filter(Boolean).join(': ') || '–'),
      h('td', null, a.breaker ? h('span', { class: 'tag' }, a.breaker) : '–'))))));
}

function tokens(t) {
  if (!t || (t.input === null && t.output === null)) return 'unknown';
  return [`${fmtInt(t.input)} in`, `${fmtInt(t.output)} out`, t.cache_read ? `${fmtInt(t.cache_read)} cache read` : null, t.cache_write ? `${fmtInt(t.cache_write)} cache write` : null].filter(Boolean).join(' · ');
}

function render(r) {
  const e = r.error;
  const parts = [
    h('section', { class: 'cards' },
      h('div', { class: 'card' }, h('div', { class: 'label' }, 'status'), h('div', { class: `value st ${statusClass(r.status)}` }, r.status), h('div', { class: 'sub' }, r.failed_over ? 'failed over' : `${(r.attempts || []).length} attempt(s)`)),
      h('div', { class: 'card' }, h('div', { class: 'label' }, 'total'), h('div', { class: 'value' }, `${fmtMs(r.total_ms)} ms`), h('div', { class: 'sub' }, `first byte ${fmtMs(r.first_byte_ms)} ms`)),
      h('div', { class: 'card' }, h('div', { class: 'label' }, 'gateway overhead'), h('div', { class: 'value' }, `${fmtMs(r.overhead_ms)} ms`), h('div', { class: 'sub' }, 'time spent in ccmesh')),
      h('div', { class: 'card' }, h('div', { class: 'label' }, 'cost'), h('div', { class: 'value' }, fmtCost(r.cost_usd)), h('div', { class: 'sub' }, r.cost_usd === null ? 'no price or usage unknown' : 'USD'))),
    h('section', { class: 'panel' }, h('h2', null, 'Request'), kv([
      ['started', `${fmtDateTime(r.started_at_ms)} (${r.started_at})`],
      ['protocol', `${r.protocol} — ${r.method} ${r.path}${r.stream ? ' (stream)' : ''}`],
      ['model', [r.model_requested || '–', r.model_sent && r.model_sent !== r.model_requested ? ` → sent as ${r.model_sent}` : '', r.model_answered ? ` → answered by ${r.model_answered}` : ''].join('')],
      ['endpoint', r.endpoint || 'none'],
      ['tokens', tokens(r.tokens)],
      r.conversion ? ['conversion', r.conversion] : null,
      r.losses && r.losses.length ? ['not converted', r.losses.join('; ')] : null,
      ['client', r.user_agent || '–'],
      r.session_id ? ['session', r.session_id] : null,
    ])),
    h('section', { class: 'panel' }, h('h2', null, 'Decision trail'),
      (r.attempts || []).length ? [h('div', { id: 'timeline' }), trailTable(r)] : h('p', { class: 'muted' }, 'No upstream attempt: the gateway answered by itself (see the error).')),
  ];
  if (e) {
    parts.push(h('section', { class: 'panel', id: 'error' }, h('h2', null, 'Error'),
      kv([['source', e.source], ['kind', e.kind || '–'], ['message', e.message]]),
      e.upstream_body ? [h('h3', { class: 'muted' }, 'upstream body (cut to 4 KiB, keys redacted)'), h('pre', { class: 'body' }, e.upstream_body)] : null));
  }
  box.replaceChildren(...parts);
  const holder = document.getElementById('timeline');
  if (holder) {
    const draw = () => holder.replaceChildren(timeline(r, holder.clientWidth));
    new ResizeObserver(draw).observe(holder);
    draw();
  }
}

async function load() {
  // A record is written in the background a moment after the request ends: retry briefly.
  for (let i = 0; i < 10; i++) {
    try { render(await api('GET', `/api/requests/${encodeURIComponent(id)}`)); return; }
    catch (err) {
      if (err.status !== 404 || i === 9) { box.replaceChildren(h('p', { class: 'form-error' }, err.message)); return; }
      await new Promise((res) => setTimeout(res, 300));
    }
  }
}

load();
