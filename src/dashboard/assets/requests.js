// Requests: the records of GET /api/requests with its filters (kept in the page's URL so a
// filtered view can be bookmarked), newest first, a page at a time; a row opens its detail.
import { api, h, $, fmtInt, fmtMs, fmtCost, fmtDateTime, tokensTotal, statusClass, showFieldError, clearFieldErrors } from './app.js';

const form = $('#filters');
const tbody = $('#req-body');
const more = $('#req-more');
const FIELDS = ['since', 'endpoint', 'model', 'protocol', 'status_class', 'status', 'failed_over', 'q'];
let cursor = null;
let shown = 0;

function fromUrl() {
  const q = new URLSearchParams(location.search);
  for (const f of FIELDS) {
    if (q.has(f)) form.elements[f].value = q.get(f);
  }
}

function query() {
  const q = new URLSearchParams();
  for (const f of FIELDS) {
    const v = form.elements[f].value.trim();
    if (v !== '') q.set(f, v);
  }
  return q;
}

function row(r) {
  const tokens = tokensTotal(r.tokens);
  const href = `/requests/${encodeURIComponent(r.id)}`;
  return h('tr', { class: 'link', tabindex: '0', dataset: { id: r.id } },
    h('td', null, h('a', { href, tabindex: '-1' }, fmtDateTime(r.started_at_ms))),
    h('td', { class: 'hide-narrow' }, r.protocol),
    h('td', { class: 'trunc', title: r.model_sent && r.model_sent !== r.model_requested ? `sent as ${r.model_sent}` : '' }, r.model_requested || '–'),
    h('td', null, r.endpoint || '–'),
    h('td', null, h('span', { class: `st ${statusClass(r.status)}` }, r.status), r.stream ? h('span', { class: 'muted', title: 'stream' }, ' ≋') : null),
    h('td', { class: 'num' }, fmtMs(r.total_ms)),
    h('td', { class: 'num hide-narrow' }, r.attempts, r.failed_over ? h('span', { class: 'tag', title: 'failed over' }, '↷') : null),
    h('td', { class: 'num hide-narrow' }, tokens === null ? '–' : fmtInt(tokens)),
    h('td', { class: 'num hide-narrow' }, fmtCost(r.cost_usd)),
    h('td', { class: 'trunc hide-narrow', title: r.error || '' }, r.error || ''));
}

async function load(append) {
  clearFieldErrors(form);
  $('#filters-error').textContent = '';
  const q = query();
  q.set('limit', '50');
  if (append && cursor) q.set('cursor', cursor);
  try {
    const page = await api('GET', `/api/requests?${q}`);
    const rows = page.requests.map(row);
    if (append) tbody.append(...rows); else { tbody.replaceChildren(...rows); shown = 0; }
    shown += rows.length;
    cursor = page.next_cursor;
    more.hidden = !cursor;
    $('#req-empty').hidden = shown > 0;
    $('#req-count').textContent = shown ? `${shown} shown${cursor ? ', more available' : ''}` : '';
  } catch (err) {
    if (!showFieldError(form, err.field, err.message)) $('#filters-error').textContent = err.message;
  }
}

function open(tr) {
  location.assign(`/requests/${encodeURIComponent(tr.dataset.id)}`);
}

tbody.addEventListener('click', (ev) => { const tr = ev.target.closest('tr[data-id]'); if (tr) open(tr); });
tbody.addEventListener('keydown', (ev) => {
  const tr = ev.target.closest('tr[data-id]');
  if (tr && (ev.key === 'Enter' || ev.key === ' ')) { ev.preventDefault(); open(tr); }
});

form.addEventListener('submit', (ev) => {
  ev.preventDefault();
  const q = query();
  history.replaceState(null, '', q.toString() ? `?${q}` : location.pathname);
  load(false);
});
form.addEventListener('reset', () => {
  setTimeout(() => { history.replaceState(null, '', location.pathname); load(false); });
});
more.addEventListener('click', () => load(true));

fromUrl();
load(false);
