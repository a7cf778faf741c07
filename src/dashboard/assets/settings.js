// Settings: the server renders the form with the current values, ranges and seed defaults; this
// module sends only what changed as one PATCH /api/settings (applied to the next request, no
// restart), shows a refusal next to the field it names, and manages the price table.
import { api, h, $, $$, toast, live, clearFieldErrors, showFieldError } from './app.js';

const form = $('#settings-form');
const status = $('#settings-status');

function inputs() {
  return $$('input[name], select[name], textarea[name]', form);
}

function valueOf(el) {
  if (el.type === 'checkbox') return el.checked;
  if (el.dataset.json) {
    // A JSON field: what does not parse is sent as it is, and the server names the problem.
    try { return JSON.parse(el.value); } catch { return el.value; }
  }
  if (el.tagName === 'SELECT') return el.value;
  const v = el.value.trim();
  return v === '' ? null : Number(v);
}

function setValue(el, v) {
  if (el.type === 'checkbox') el.checked = v === true || v === 'true';
  else if (el.dataset.json) el.value = typeof v === 'string' ? v : JSON.stringify(v, null, 2);
  else el.value = v === null || v === undefined ? '' : String(v);
}

function at(doc, path) {
  return path.split('.').reduce((cur, k) => (cur === undefined || cur === null ? undefined : cur[k]), doc);
}

/** Remember what the page shows as saved, to send only changes. */
function remember(doc) {
  for (const el of inputs()) {
    const v = doc ? at(doc, el.name) : valueOf(el);
    if (doc && v !== undefined) setValue(el, v);
    el.dataset.saved = JSON.stringify(valueOf(el));
  }
}

function patchOf() {
  const patch = {};
  let n = 0;
  for (const el of inputs()) {
    const v = valueOf(el);
    if (JSON.stringify(v) === el.dataset.saved) continue;
    const parts = el.name.split('.');
    let cur = patch;
    for (const p of parts.slice(0, -1)) cur = cur[p] ??= {};
    cur[parts[parts.length - 1]] = typeof v === 'number' && Number.isNaN(v) ? el.value : v;
    n += 1;
  }
  return { patch, n };
}

form.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  clearFieldErrors(form);
  status.className = 'status';
  const { patch, n } = patchOf();
  if (!n) { status.textContent = 'Nothing changed.'; return; }
  const button = $('#settings-save');
  button.disabled = true;
  status.textContent = 'Saving…';
  try {
    const doc = await api('PATCH', '/api/settings', patch);
    remember(doc);
    status.className = 'status ok';
    status.textContent = `Saved ${n} change${n === 1 ? '' : 's'}; applied to the next request.`;
    toast('Settings saved and applied', 'ok');
  } catch (err) {
    status.className = 'status bad';
    status.textContent = 'Not saved: ' + err.message;
    const m = /^(?:unknown settings key ')?([a-z_]+(?:\.[a-z_]+)*)/.exec(err.message || '');
    if (m) showFieldError(form, m[1], err.message);
  } finally {
    button.disabled = false;
  }
});

$('#settings-defaults').addEventListener('click', () => {
  for (const el of inputs()) if (el.dataset.default !== undefined) setValue(el, el.dataset.default);
  status.className = 'status';
  status.textContent = 'Defaults filled in; save to apply them.';
});

// How many fetches of saved values are under way, on the form as `data-refreshing` so that a
// watcher (the browser test) can tell when the page has dealt with all of them.
let refreshing = 0;
function countRefresh(delta) {
  refreshing += delta;
  form.dataset.refreshing = String(refreshing);
}

live('config', (c) => {
  if (c.what !== 'settings') return;
  // Someone else saved: take their values unless this page has unsaved edits — looked at again
  // when the values arrive, since the user may have started editing while they were fetched
  // (taking them then would wipe the edit, and the next save would send nothing).
  if (patchOf().n !== 0) return;
  countRefresh(1);
  api('GET', '/api/settings')
    .then((doc) => { if (patchOf().n === 0) remember(doc); })
    .catch(() => {})
    .finally(() => countRefresh(-1));
});

remember(null);

// ------------------------------------------------------------------------------ prices

const priceBody = $('#price-body');
const priceForm = $('#price-form');
const filter = $('#price-filter');
let prices = [];

const num = (v) => (v === null || v === undefined ? '–' : String(Math.round(v * 10000) / 10000));

function fillPrice(p) {
  priceForm.elements.model.value = p.model;
  for (const k of ['input', 'output', 'cache_read', 'cache_write']) priceForm.elements[k].value = p[k] ?? '';
  priceForm.elements.input.focus();
}

function drawPrices() {
  const f = filter.value.trim().toLowerCase();
  const rows = prices.filter((p) => !f || p.model.toLowerCase().includes(f)).map((p) => h('tr', { dataset: { model: p.model } },
    h('th', { scope: 'row', class: 'mono' }, p.model),
    h('td', { class: 'num' }, num(p.input)), h('td', { class: 'num' }, num(p.output)),
    h('td', { class: 'num' }, num(p.cache_read)), h('td', { class: 'num' }, num(p.cache_write)),
    h('td', null, h('span', { class: p.source === 'custom' ? 'tag fast' : 'tag' }, p.source)),
    h('td', { class: 'actions' },
      h('button', { type: 'button', class: 'small', onclick: () => fillPrice(p) }, p.source === 'custom' ? 'Edit' : 'Override'),
      p.source === 'custom' ? [' ', h('button', { type: 'button', class: 'small danger', onclick: () => removePrice(p.model) }, 'Remove override')] : null)));
  priceBody.replaceChildren(...rows);
}

async function loadPrices() {
  prices = await api('GET', '/api/prices');
  drawPrices();
}

async function removePrice(model) {
  try {
    await api('DELETE', `/api/prices/${encodeURIComponent(model)}`);
    toast(`${model}: override removed`, 'ok');
    await loadPrices();
  } catch (err) {
    toast(err.message, 'error');
  }
}

priceForm.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  clearFieldErrors(priceForm);
  $('#price-error').textContent = '';
  const f = priceForm.elements;
  const model = f.model.value.trim();
  if (!model) { $('#price-error').textContent = 'model: enter a model name or glob'; f.model.focus(); return; }
  const body = {};
  for (const k of ['input', 'output', 'cache_read', 'cache_write']) {
    const v = f[k].value.trim();
    if (v !== '') body[k] = Number(v);
  }
  try {
    await api('PUT', `/api/prices/${encodeURIComponent(model)}`, body);
    toast(`${model}: price saved`, 'ok');
    priceForm.reset();
    await loadPrices();
  } catch (err) {
    $('#price-error').textContent = err.message;
    const field = err.field || (/^([a-z_]+):/.exec(err.message) || [])[1];
    if (field && f[field]) { f[field].setAttribute('aria-invalid', 'true'); f[field].focus(); }
  }
});
filter.addEventListener('input', drawPrices);
loadPrices().catch((err) => toast(`Could not load prices: ${err.message}`, 'error'));
