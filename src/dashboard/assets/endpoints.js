// Endpoints: the table in global order with health badges, the fast queue, the add / edit /
// clone / delete form, and the per-endpoint actions. Reordering works by drag and drop (HTML5)
// and by keyboard (arrow keys on a row's handle; F adds to the fast queue; Delete removes from
// it), and on touch screens by the ▲/▼ buttons. Every change goes straight to the admin API
// (PUT /api/order, PUT /api/fast-queue, PATCH …) and takes effect for the next request.
import {
  api, h, $, $$, live, throttle, perFrame, badge, badgeInfo, toast, fmtPct, fmtDateTime, fmtMs, fmtSecs,
  showFieldError, clearFieldErrors, PROTOCOLS,
} from './app.js';

const FORMAT_PROTOCOL = { anthropic: 'claude', openai: 'openai', responses: 'responses', gemini: 'gemini' };

const state = {
  endpoints: [],          // in global order
  health: new Map(),
  settings: null,
  current: {},
  expanded: new Set(),
  drag: null,             // {name, from: 'order' | 'fast'}
  // Endpoints whose on/off change is on its way: their switch waits for the answer, so two quick
  // toggles cannot reach the server out of order and leave it in the state clicked first.
  toggling: new Set(),
};

const body = $('#ep-body');
const fastList = $('#fast-queue');
const announce = (text) => { $('#reorder-status').textContent = text; };

// ------------------------------------------------------------------------------ loading

async function loadAll() {
  const [eps, health, settings, current] = await Promise.all([
    fetchEndpoints(), api('GET', '/api/health'), api('GET', '/api/settings'), api('GET', '/api/current'),
  ]);
  state.settings = settings;
  state.current = current;
  setHealth(health, false);
  if (eps) setEndpoints(eps);
}

// A list fetched while one of this page's changes was on its way may show the server from before
// that change, and answers can arrive in any order: drawn after the change's own answer, it would
// undo the change on the page while the server kept it. Such a list is not shown; a fresh one is
// asked for instead, so the page still learns what other clients changed meanwhile.
let changesInFlight = 0;
let changesAnswered = 0;

/** Runs one change to the endpoints on the server (`call` returns the API's promise). */
async function change(call) {
  changesInFlight += 1;
  try {
    return await call();
  } finally {
    changesInFlight -= 1;
    changesAnswered += 1;
  }
}

/** GET /api/endpoints, or null when a change of this page may have overtaken the answer. */
async function fetchEndpoints() {
  // A change on its way when the list was asked for is, by the answer, still on its way or
  // counted as answered: these two checks cover it.
  const answeredBefore = changesAnswered;
  const list = await api('GET', '/api/endpoints');
  if (changesInFlight === 0 && changesAnswered === answeredBefore) return list;
  reloadEndpoints();
  return null;
}

let drawn = '';
/** Redraw only when something changed: a config event often repeats what this page just saved,
 * and a redraw under the pointer would swallow a click. */
function setEndpoints(list) {
  state.endpoints = list;
  const now = JSON.stringify(list);
  if (now === drawn) return;
  render();
}

function setHealth(list, draw = true) {
  const at = performance.now();
  state.health = new Map(list.map((e) => [e.name, Object.assign(e, { _at: at })]));
  if (draw) scheduleHealth();
}

const reloadHealth = throttle(() => {
  api('GET', '/api/health').then((l) => setHealth(l)).catch(() => {});
  api('GET', '/api/current').then((c) => { state.current = c; scheduleHealth(); }).catch(() => {});
}, 1000);
const reloadEndpoints = throttle(() => fetchEndpoints().then((l) => { if (l) setEndpoints(l); }).catch(() => {}), 300);

// ------------------------------------------------------------------------------ rendering

function fastOrder() {
  return state.endpoints.filter((e) => e.fast)
    .sort((a, b) => (a.fast_sort_order ?? 1e9) - (b.fast_sort_order ?? 1e9) || a.sort_order - b.sort_order || a.name.localeCompare(b.name));
}

/** The protocols whose next request starts at `name` (`next` of GET /api/current). */
function currentFor(name) {
  return PROTOCOLS.filter((p) => (state.current.next ? state.current.next[p] : state.current[p]) === name);
}

function focusKey() {
  const el = document.activeElement;
  return el && el.dataset && el.dataset.focus ? el.dataset.focus : null;
}

function restoreFocus(key) {
  if (!key) return;
  const el = document.querySelector(`[data-focus="${CSS.escape(key)}"]`);
  if (el) el.focus();
}

function render() {
  drawn = JSON.stringify(state.endpoints);
  const key = focusKey();
  renderTable();
  renderFast();
  restoreFocus(key);
  const n = state.endpoints.length;
  const enabled = state.endpoints.filter((e) => e.enabled).length;
  $('#ep-summary').textContent = n ? `${n} endpoint${n === 1 ? '' : 's'}, ${enabled} enabled, ${fastOrder().length} in the fast queue` : '';
  $('#ep-empty').hidden = n > 0;
}

function moveButtons(list, name) {
  return h('span', { class: 'move-buttons' },
    h('button', { type: 'button', class: 'icon small', 'aria-label': `Move ${name} up`, onclick: () => move(list, name, -1) }, '▲'),
    h('button', { type: 'button', class: 'icon small', 'aria-label': `Move ${name} down`, onclick: () => move(list, name, +1) }, '▼'));
}

function renderTable() {
  const rows = [];
  const n = state.endpoints.length;
  const fast = fastOrder().map((e) => e.name);
  state.endpoints.forEach((e, i) => {
    const hl = state.health.get(e.name);
    const models = e.models.length ? e.models.map((m) => h('span', { class: 'tag' }, m))
      : e.serves_every_model
        ? h('span', { class: 'tag warn', dataset: { warn: 'every-model' }, title: 'This endpoint lists no model, so a request for any model can be sent to it (models its map does not name go unchanged). List what it serves in Models, or map "*" to one model.' }, '⚠ every model')
        : h('span', { class: 'muted', title: 'every model, sent to the model the "*" map key names' }, 'all (mapped)');
    const cur = currentFor(e.name);
    const tr = h('tr', { draggable: 'true', dataset: { name: e.name }, class: e.enabled ? '' : 'disabled' },
      h('td', { class: 'handle-cell' },
        h('button', {
          type: 'button', class: 'handle', dataset: { focus: `order:${e.name}`, list: 'order', name: e.name },
          'aria-label': `Reorder ${e.name}, position ${i + 1} of ${n}: arrow keys move it, F adds it to the fast queue`,
          title: 'drag, or use ↑/↓ (F: fast queue)',
        }, '⠿'),
        moveButtons('order', e.name)),
      h('th', { scope: 'row', class: 'wrap-anywhere' }, e.name,
        cur.map((p) => h('span', { class: 'tag current', title: `the next ${p} request starts here` }, `current ${p}`))),
      h('td', { 'data-label': 'format' }, e.format),
      h('td', { class: 'trunc', title: e.base_url, 'data-label': 'base URL' }, e.base_url),
      h('td', { class: 'models', 'data-label': 'models' }, models),
      h('td', { 'data-label': 'enabled' }, h('label', { class: 'switch', title: e.enabled ? 'enabled' : 'disabled' },
        h('input', {
          type: 'checkbox', role: 'switch', checked: e.enabled, dataset: { focus: `enabled:${e.name}` },
          disabled: state.toggling.has(e.name),
          'aria-label': `${e.name} enabled`, onchange: (ev) => setEnabled(e, ev.target),
        }), h('span'))),
      h('td', { 'data-label': 'fast' }, e.fast ? h('span', { class: 'tag fast', title: 'position in the fast queue' }, `★ ${fast.indexOf(e.name) + 1}`) : h('span', { class: 'muted' }, '–')),
      h('td', { class: 'health-cell', 'data-label': 'health' }, h('button', {
        type: 'button', class: 'link-like', 'aria-expanded': String(state.expanded.has(e.name)),
        dataset: { focus: `health:${e.name}` }, title: badgeInfo(hl, state.settings).detail,
        onclick: () => toggleDetails(e.name),
      }, badge(hl, state.settings))),
      h('td', { class: 'actions', 'data-label': '' },
        h('button', { type: 'button', class: 'small', dataset: { focus: `test:${e.name}` }, onclick: (ev) => runTest(e, ev.target) }, 'Test'), ' ',
        h('button', { type: 'button', class: 'small', onclick: () => resetBreaker(e) }, 'Reset'), ' ',
        h('button', { type: 'button', class: 'small', title: `make ${e.name} the current endpoint for ${FORMAT_PROTOCOL[e.format]} requests`, onclick: () => makeCurrent(e, FORMAT_PROTOCOL[e.format]) }, 'Make current'), ' ',
        h('button', { type: 'button', class: 'small', onclick: () => openForm('edit', e) }, 'Edit'), ' ',
        h('button', { type: 'button', class: 'small', onclick: () => openForm('clone', e) }, 'Clone'), ' ',
        h('button', { type: 'button', class: 'small danger', onclick: () => confirmDelete(e) }, 'Delete')));
    rows.push(tr);
    if (state.expanded.has(e.name)) rows.push(detailsRow(e));
  });
  body.replaceChildren(...rows);
}

function thresholdsText(p) {
  const b = state.settings?.breaker?.[p];
  if (!b) return '';
  return `opens at ${b.failure_threshold} failures in a row or ${fmtPct(b.error_rate_threshold)} errors of ≥ ${b.min_requests} in ${b.error_rate_window_secs} s; cooldown ${b.timeout_secs} s broken / ${b.rate_limit_timeout_secs}–${b.max_rate_limit_timeout_secs} s rate-limited; closes after ${b.success_threshold} probes`;
}

function detailsRow(e) {
  const hl = state.health.get(e.name) || {};
  const live = hl.source === 'live';
  const b = badgeInfo(hl, state.settings);
  const kv = [
    ['state', b.detail],
    live ? ['consecutive failures', String(hl.consecutive_failures)] : null,
    live ? ['success rate', `${fmtPct(hl.success_rate)} of ${hl.requests} requests since start`] : null,
    ['last error', hl.last_error || '–'],
    live && hl.last_failure_at ? ['last failure', fmtDateTime(Date.parse(hl.last_failure_at))] : null,
    live && hl.last_success_at ? ['last success', fmtDateTime(Date.parse(hl.last_success_at))] : null,
    ['last test', e.test_status === 'untested' ? 'never' : `${e.test_status}${e.test_latency_ms !== null ? ` in ${fmtMs(e.test_latency_ms)} ms` : ''}${e.test_at ? ', ' + fmtDateTime(Date.parse(e.test_at)) : ''}${e.test_error ? ' — ' + e.test_error : ''}`],
    ...PROTOCOLS.map((p) => [`thresholds (${p} requests)`, thresholdsText(p)]),
    ['model map', Object.keys(e.model_map).length ? Object.entries(e.model_map).map(([k, v]) => `${k} → ${v}`).join(', ') : '–'],
    ['headers', Object.keys(e.headers).length ? Object.keys(e.headers).join(', ') : '–'],
    ['test model', e.test_model || '–'],
    ['price multiplier', String(e.price_multiplier)],
    ['API key', e.api_key || '(none)'],
  ].filter(Boolean);
  return h('tr', { class: 'details', dataset: { detailsFor: e.name } },
    h('td', { colspan: '9' },
      h('dl', { class: 'kv' }, kv.flatMap(([k, v]) => [h('dt', null, k), h('dd', null, v)])),
      h('div', { class: 'form-actions' }, h('span', { class: 'muted' }, 'make current for:'),
        PROTOCOLS.map((p) => h('button', { type: 'button', class: 'small', onclick: () => makeCurrent(e, p) }, p)))));
}

/** Health changed: update badges (and open details) in place, keeping focus and drags. */
function drawHealth() {
  let cooling = false;
  for (const e of state.endpoints) {
    const hl = state.health.get(e.name);
    const b = badgeInfo(hl, state.settings);
    cooling ||= !!b.cooling;
    const tr = body.querySelector(`tr[data-name="${CSS.escape(e.name)}"]`);
    if (!tr) continue;
    const btn = tr.querySelector('.health-cell button');
    const key = `${b.state}|${b.sub || ''}|${b.detail}`;
    if (btn.dataset.key !== key) {
      btn.dataset.key = key;
      btn.title = b.detail;
      btn.replaceChildren(badge(hl, state.settings));
    }
    const det = body.querySelector(`tr[data-details-for="${CSS.escape(e.name)}"]`);
    if (det && !det.contains(document.activeElement)) det.replaceWith(detailsRow(e));
    const th = tr.querySelector('th');
    const cur = currentFor(e.name).join(',');
    if (th.dataset.cur !== cur) {
      th.dataset.cur = cur;
      th.replaceChildren(e.name, ...currentFor(e.name).map((p) => h('span', { class: 'tag current', title: `the next ${p} request starts here` }, `current ${p}`)));
    }
  }
  for (const li of fastList.children) {
    const hl = state.health.get(li.dataset.name);
    li.querySelector('.b').replaceChildren(badge(hl, state.settings));
  }
  if (cooling) setTimeout(scheduleHealth, 1000);
}
const scheduleHealth = perFrame(drawHealth);

function toggleDetails(name) {
  if (state.expanded.has(name)) state.expanded.delete(name); else state.expanded.add(name);
  render();
}

function renderFast() {
  const fast = fastOrder();
  fastList.replaceChildren(...fast.map((e, i) => h('li', { draggable: 'true', dataset: { name: e.name } },
    h('button', {
      type: 'button', class: 'handle', dataset: { focus: `fast:${e.name}`, list: 'fast', name: e.name },
      'aria-label': `${e.name}, fast queue position ${i + 1} of ${fast.length}: arrow keys move it, Delete removes it`,
      title: 'drag, or use ←/→ (Delete removes)',
    }, '⠿'),
    h('span', { class: 'name' }, e.name),
    h('span', { class: 'b' }, badge(state.health.get(e.name), state.settings)),
    moveButtons('fast', e.name),
    h('button', { type: 'button', class: 'icon small', 'aria-label': `Remove ${e.name} from the fast queue`, title: 'remove from the fast queue', onclick: () => saveFast(fast.map((x) => x.name).filter((n) => n !== e.name), `${e.name} removed from the fast queue`) }, '✕'))));
  $('#fast-empty').hidden = fast.length > 0;
}

// ------------------------------------------------------------------------------ saving order

let saving = Promise.resolve();

/** Saves run one after another, so quick key presses cannot race each other. */
function serial(fn) {
  saving = saving.then(fn, fn);
  return saving;
}

function saveOrder(names, message) {
  // Show the new order at once; the API's answer replaces it.
  const byName = new Map(state.endpoints.map((e) => [e.name, e]));
  state.endpoints = names.map((n) => byName.get(n)).filter(Boolean);
  render();
  return serial(async () => {
    try {
      setEndpoints(await change(() => api('PUT', '/api/order', { endpoints: names })));
      if (message) announce(message);
    } catch (err) {
      toast(`Could not save the order: ${err.message}`, 'error');
      reloadEndpoints();
    }
  });
}

function saveFast(names, message) {
  const pos = new Map(names.map((n, i) => [n, i]));
  state.endpoints = state.endpoints.map((e) => ({ ...e, fast: pos.has(e.name), fast_sort_order: pos.has(e.name) ? pos.get(e.name) : e.fast_sort_order }));
  render();
  return serial(async () => {
    try {
      setEndpoints(await change(() => api('PUT', '/api/fast-queue', { endpoints: names })));
      if (message) { announce(message); toast(message, 'ok'); }
    } catch (err) {
      toast(`Could not save the fast queue: ${err.message}`, 'error');
      reloadEndpoints();
    }
  });
}

function move(list, name, delta) {
  const names = list === 'fast' ? fastOrder().map((e) => e.name) : state.endpoints.map((e) => e.name);
  const i = names.indexOf(name);
  const j = i + delta;
  if (i < 0 || j < 0 || j >= names.length) return;
  names.splice(i, 1);
  names.splice(j, 0, name);
  const msg = `${name} moved to position ${j + 1} of ${names.length}${list === 'fast' ? ' in the fast queue' : ''}`;
  if (list === 'fast') saveFast(names, msg); else saveOrder(names, msg);
}

function addToFast(name, at) {
  const names = fastOrder().map((e) => e.name).filter((n) => n !== name);
  names.splice(at === undefined ? names.length : at, 0, name);
  saveFast(names, `${name} is now number ${names.indexOf(name) + 1} in the fast queue`);
}

// Keyboard on handles.
document.addEventListener('keydown', (ev) => {
  const t = ev.target;
  if (!(t instanceof HTMLElement) || !t.classList.contains('handle')) return;
  const { list, name } = t.dataset;
  const back = ev.key === 'ArrowUp' || (list === 'fast' && ev.key === 'ArrowLeft');
  const fwd = ev.key === 'ArrowDown' || (list === 'fast' && ev.key === 'ArrowRight');
  if (back || fwd) { ev.preventDefault(); move(list, name, back ? -1 : +1); }
  else if (list === 'order' && (ev.key === 'f' || ev.key === 'F')) {
    ev.preventDefault();
    const fast = fastOrder().map((e) => e.name);
    if (fast.includes(name)) saveFast(fast.filter((n) => n !== name), `${name} removed from the fast queue`);
    else addToFast(name);
  } else if (list === 'fast' && (ev.key === 'Delete' || ev.key === 'Backspace')) {
    ev.preventDefault();
    saveFast(fastOrder().map((e) => e.name).filter((n) => n !== name), `${name} removed from the fast queue`);
  }
});

// ------------------------------------------------------------------------------ drag and drop

function clearMarks() {
  for (const el of $$('.drop-before, .drop-after, .drop-target, .dragging')) el.classList.remove('drop-before', 'drop-after', 'drop-target', 'dragging');
}

document.addEventListener('dragstart', (ev) => {
  const item = ev.target instanceof Element && ev.target.closest('[draggable="true"][data-name]');
  if (!item) return;
  state.drag = { name: item.dataset.name, from: item.parentElement === fastList ? 'fast' : 'order' };
  ev.dataTransfer.effectAllowed = 'move';
  ev.dataTransfer.setData('text/plain', item.dataset.name);
  item.classList.add('dragging');
});
// A drop redraws the lists, which detaches the dragged element: its `dragend` then reaches no
// listener here, so the drop ends the drag too. A drag left set would stop the page from
// reloading the list on other clients' changes.
function endDrag() { state.drag = null; clearMarks(); }
document.addEventListener('dragend', endDrag);

/** Where in `items` a drop at (x, y) lands: the index to insert before. */
function dropIndex(items, x, y, horizontal) {
  for (let i = 0; i < items.length; i++) {
    const r = items[i].getBoundingClientRect();
    if (horizontal) {
      if (y < r.top) return i;
      if (y <= r.bottom && x < r.left + r.width / 2) return i;
    } else if (y < r.top + r.height / 2) return i;
  }
  return items.length;
}

function tableRows() { return $$('tr[data-name]', body); }

body.addEventListener('dragover', (ev) => {
  if (!state.drag || state.drag.from !== 'order') return;
  ev.preventDefault();
  ev.dataTransfer.dropEffect = 'move';
  const rows = tableRows();
  const i = dropIndex(rows, ev.clientX, ev.clientY, false);
  for (const r of rows) r.classList.remove('drop-before');
  if (rows[i]) rows[i].classList.add('drop-before');
});
body.addEventListener('drop', (ev) => {
  if (!state.drag || state.drag.from !== 'order') return;
  ev.preventDefault();
  const rows = tableRows();
  const i = dropIndex(rows, ev.clientX, ev.clientY, false);
  const name = state.drag.name;
  const names = state.endpoints.map((e) => e.name);
  const from = names.indexOf(name);
  let at = i;
  if (from >= 0) { names.splice(from, 1); if (from < at) at -= 1; }
  names.splice(at, 0, name);
  endDrag();
  saveOrder(names, `${name} moved to position ${at + 1} of ${names.length}`);
});

for (const zone of [$('#fast-panel')]) {
  zone.addEventListener('dragover', (ev) => {
    if (!state.drag) return;
    ev.preventDefault();
    ev.dataTransfer.dropEffect = 'move';
    fastList.classList.add('drop-target');
    $('#fast-empty').classList.add('drop-target');
    const items = Array.from(fastList.children);
    const i = dropIndex(items, ev.clientX, ev.clientY, true);
    for (const li of items) li.classList.remove('drop-before');
    if (items[i]) items[i].classList.add('drop-before');
  });
  zone.addEventListener('dragleave', (ev) => {
    if (ev.relatedTarget && $('#fast-panel').contains(ev.relatedTarget)) return;
    fastList.classList.remove('drop-target');
    $('#fast-empty').classList.remove('drop-target');
  });
  zone.addEventListener('drop', (ev) => {
    if (!state.drag) return;
    ev.preventDefault();
    ev.stopPropagation();
    const items = Array.from(fastList.children);
    let i = dropIndex(items, ev.clientX, ev.clientY, true);
    const name = state.drag.name;
    const names = items.map((li) => li.dataset.name);
    const from = names.indexOf(name);
    if (from >= 0) { names.splice(from, 1); if (from < i) i -= 1; }
    names.splice(i, 0, name);
    endDrag();
    saveFast(names, `${name} is now number ${i + 1} in the fast queue`);
  });
}

// ------------------------------------------------------------------------------ actions

async function setEnabled(e, input) {
  const want = input.checked;
  state.toggling.add(e.name);
  input.disabled = true;
  try {
    const updated = await change(() => api('PATCH', `/api/endpoints/${encodeURIComponent(e.name)}`, { enabled: want }));
    state.endpoints = state.endpoints.map((x) => (x.name === e.name ? updated : x));
    toast(`${e.name} ${want ? 'enabled' : 'disabled'}`, 'ok');
  } catch (err) {
    input.checked = !want;
    toast(`Could not change ${e.name}: ${err.message}`, 'error');
  } finally {
    state.toggling.delete(e.name);
    input.disabled = false;
    render();
  }
}

async function runTest(e, button) {
  button.disabled = true;
  button.textContent = 'Testing…';
  try {
    const updated = await change(() => api('POST', `/api/endpoints/${encodeURIComponent(e.name)}/test`));
    const ok = updated.test_status === 'available';
    toast(ok ? `${e.name}: available (${fmtMs(updated.test_latency_ms)} ms)` : `${e.name}: unavailable — ${updated.test_error || ''}`, ok ? 'ok' : 'error');
    state.endpoints = state.endpoints.map((x) => (x.name === e.name ? updated : x));
    render();
    reloadHealth();
  } catch (err) {
    toast(`${e.name}: ${err.message}`, 'error');
    button.disabled = false;
    button.textContent = 'Test';
  }
}

async function resetBreaker(e) {
  try {
    const hl = await api('POST', `/api/endpoints/${encodeURIComponent(e.name)}/reset`);
    state.health.set(e.name, Object.assign(hl, { _at: performance.now() }));
    scheduleHealth();
    toast(`${e.name}: breaker reset to closed`, 'ok');
  } catch (err) {
    toast(`${e.name}: ${err.message}`, 'error');
  }
}

async function makeCurrent(e, protocol) {
  try {
    state.current = await api('PUT', '/api/current', { protocol, endpoint: e.name });
    scheduleHealth();
    toast(`The next ${protocol} request starts at ${e.name}`, 'ok');
  } catch (err) {
    toast(err.message, 'error');
  }
}

const confirmDialog = $('#confirm-dialog');
function confirmDelete(e) {
  $('#confirm-text').textContent = `Delete the endpoint ${e.name}? Requests stop going to it at once.`;
  confirmDialog.returnValue = '';
  confirmDialog.showModal();
  confirmDialog.addEventListener('close', async () => {
    if (confirmDialog.returnValue !== 'yes') return;
    try {
      await change(() => api('DELETE', `/api/endpoints/${encodeURIComponent(e.name)}`));
      toast(`${e.name} deleted`, 'ok');
      state.expanded.delete(e.name);
      reloadEndpoints();
    } catch (err) {
      toast(`Could not delete ${e.name}: ${err.message}`, 'error');
    }
  }, { once: true });
}

// ------------------------------------------------------------------------------ the form

const dialog = $('#ep-dialog');
const form = $('#ep-form');
let editing = null; // {mode, name}

function lines(text) {
  return text.split(/\r?\n/).map((l) => l.trim()).filter(Boolean);
}

/** Parse `a = b` lines; throws {field, message} on a malformed line. */
function pairs(field, text, sep) {
  const out = {};
  lines(text).forEach((line, i) => {
    const at = line.indexOf(sep);
    if (at <= 0) throw { field, message: `${field}: line ${i + 1} (“${line}”) is not “name ${sep.trim()} value”` };
    out[line.slice(0, at).trim()] = line.slice(at + sep.length).trim();
  });
  return out;
}

function openForm(mode, e) {
  editing = { mode, name: e ? e.name : null };
  clearFieldErrors(form);
  $('#ep-form-error').hidden = true;
  $('#ep-dialog-title').textContent = mode === 'edit' ? `Edit ${e.name}` : mode === 'clone' ? `Clone ${e.name}` : 'Add endpoint';
  const v = e || { name: '', format: 'anthropic', base_url: '', models: [], model_map: {}, headers: {}, test_model: null, price_multiplier: 1, enabled: true, fast: false };
  form.elements.name.value = mode === 'clone' ? `${v.name}-copy` : v.name;
  form.elements.format.value = v.format;
  form.elements.base_url.value = v.base_url;
  form.elements.api_key.value = '';
  form.elements.api_key.placeholder = mode === 'edit' && v.api_key ? `unchanged (${v.api_key})` : '';
  $('#ep-key-help').textContent = mode === 'edit'
    ? 'write-only: leave empty to keep the saved key, which is never sent to the page'
    : mode === 'clone' ? `keys are never sent to the page: enter ${v.name}'s key again` : 'write-only: the gateway never sends a key back to the page';
  form.elements.models.value = v.models.join('\n');
  form.elements.model_map.value = Object.entries(v.model_map).map(([k, x]) => `${k} = ${x}`).join('\n');
  form.elements.headers.value = Object.entries(v.headers).map(([k, x]) => `${k}: ${x}`).join('\n');
  form.elements.test_model.value = v.test_model || '';
  form.elements.price_multiplier.value = v.price_multiplier ?? 1;
  form.elements.enabled.checked = v.enabled;
  form.elements.fast.checked = mode === 'clone' ? false : v.fast;
  form.elements.preset.value = '';
  $('#ep-preset-field').hidden = mode !== 'add';
  dialog.showModal();
  form.elements.name.focus();
}

function formBody() {
  const f = form.elements;
  const body = {
    name: f.name.value.trim(),
    format: f.format.value,
    base_url: f.base_url.value.trim(),
    models: lines(f.models.value.replace(/,/g, '\n')),
    model_map: pairs('model_map', f.model_map.value, '='),
    headers: pairs('headers', f.headers.value, ':'),
    test_model: f.test_model.value.trim() || null,
    enabled: f.enabled.checked,
    fast: f.fast.checked,
  };
  const pm = f.price_multiplier.value.trim();
  if (pm !== '') body.price_multiplier = Number(pm);
  if (f.api_key.value !== '') body.api_key = f.api_key.value;
  return body;
}

form.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  clearFieldErrors(form);
  $('#ep-form-error').hidden = true;
  let payload;
  try { payload = formBody(); } catch (err) { showFieldError(form, err.field, err.message); return; }
  const save = $('#ep-save');
  save.disabled = true;
  try {
    const saved = await change(() => (editing.mode === 'edit'
      ? api('PATCH', `/api/endpoints/${encodeURIComponent(editing.name)}`, payload)
      : api('POST', '/api/endpoints', payload)));
    dialog.close();
    toast(`${saved.name} saved`, 'ok');
    reloadEndpoints();
    reloadHealth();
  } catch (err) {
    if (!showFieldError(form, err.field || guessField(err.message), err.message)) {
      const box = $('#ep-form-error');
      box.textContent = err.message;
      box.hidden = false;
    }
  } finally {
    save.disabled = false;
  }
});

/** The API names the field first in its message (`base_url: …`) even where `field` is null. */
function guessField(message) {
  const m = /^([a-z_]+):/.exec(message || '');
  return m ? m[1] : null;
}

// A preset fills the vendor's fields (the name and the key stay the user's).
form.elements.preset.addEventListener('change', () => {
  const opt = form.elements.preset.selectedOptions[0];
  if (!opt || !opt.dataset.fields) return;
  const p = JSON.parse(opt.dataset.fields);
  const f = form.elements;
  f.format.value = p.format;
  f.base_url.value = p.base_url;
  f.models.value = (p.models || []).join('\n');
  f.model_map.value = Object.entries(p.model_map || {}).map(([k, x]) => `${k} = ${x}`).join('\n');
  f.test_model.value = p.test_model || '';
  if (!f.name.value.trim()) f.name.value = opt.value;
  f.api_key.focus();
});

$('#ep-cancel').addEventListener('click', () => dialog.close());
$('#add-endpoint').addEventListener('click', () => openForm('add'));

// ------------------------------------------------------------------------------ live

live('hello', (d) => setHealth(d.endpoints));
live('breaker', reloadHealth);
live('request', reloadHealth);
live('config', (c) => {
  if (c.what === 'settings') api('GET', '/api/settings').then((s) => { state.settings = s; scheduleHealth(); }).catch(() => {});
  else if (c.what === 'current') reloadHealth();
  else if (!state.drag) reloadEndpoints();
});

loadAll().catch((err) => toast(`Could not load the endpoints: ${err.message}`, 'error'));
