// Client keys: the table with each key's state and spend (refreshed as requests complete), the
// add / edit form (the API's refusal shown at the field it names), rotate and delete. A secret
// comes from the API only in the answer that made it (POST /api/keys, POST …/rotate): it is shown
// once in the secret panel and dropped from the page when the panel is closed.
import { api, h, $, live, throttle, toast, showFieldError, clearFieldErrors, fmtInt } from './app.js';

const LIMITS = ['rpm', 'tpm', 'concurrency', 'usd_per_day', 'usd_per_5h', 'usd_per_month'];
let keys = [];

const usd = (n) => (n === null || n === undefined ? '–' : `$${Number(n).toFixed(n >= 100 ? 0 : 4)}`);

/** `used / limit` of one window. */
function windowCell(k, name, money) {
  const w = (k.usage || {})[name] || {};
  const show = money ? usd : fmtInt;
  const text = w.limit === null || w.limit === undefined ? show(w.used) : `${show(w.used)} / ${show(w.limit)}`;
  const spent = w.limit !== null && w.limit !== undefined && w.remaining === 0;
  return h('td', { class: `num${spent ? ' bad' : ''}`, 'data-window': name }, text);
}

function state(k) {
  if (!k.enabled) return ['disabled', 'unknown'];
  if (k.expired) return ['expired', 'open'];
  return ['enabled', 'healthy'];
}

function row(k) {
  const [label, tone] = state(k);
  const list = (items) => (items.length ? items.join(', ') : 'every one');
  const actions = h('td', { class: 'actions' },
    h('button', { type: 'button', 'data-act': 'edit' }, 'Edit'),
    h('button', { type: 'button', 'data-act': 'rotate' }, 'Rotate'),
    h('button', { type: 'button', class: 'danger', 'data-act': 'delete' }, 'Delete'));
  return h('tr', { 'data-name': k.name },
    h('th', { scope: 'row' }, k.name, k.description ? h('small', { class: 'muted' }, ` ${k.description}`) : '',
      k.declared ? h('small', { class: 'muted' }, ' (config file)') : ''),
    h('td', { class: 'mono' }, k.prefix),
    h('td', {}, h('span', { class: `badge ${tone}`, 'data-state': label }, h('span', { class: 'dot', 'aria-hidden': 'true' }), label),
      k.expires_at ? h('small', { class: 'muted' }, ` until ${k.expires_at}`) : ''),
    h('td', { class: 'mono' }, list(k.models)),
    h('td', { class: 'mono' }, list(k.endpoints)),
    windowCell(k, 'rpm', false),
    windowCell(k, 'usd_per_day', true),
    windowCell(k, 'usd_per_5h', true),
    windowCell(k, 'usd_per_month', true),
    actions);
}

function draw() {
  $('#keys-body').replaceChildren(...keys.map(row));
  $('#keys-empty').hidden = keys.length > 0;
  $('#keys-summary').textContent = keys.length
    ? `${keys.length} key${keys.length === 1 ? '' : 's'}: every proxy request needs one`
    : '';
}

async function load() {
  keys = await api('GET', '/api/keys');
  draw();
}
const reload = throttle(() => load().catch(() => {}), 500);

// ------------------------------------------------------------------------------ the secret

function showSecret(name, secret) {
  $('#secret-name').textContent = name;
  $('#secret-value').textContent = secret;
  $('#secret-panel').hidden = false;
  $('#secret-done').focus();
}

$('#secret-done').addEventListener('click', () => {
  $('#secret-value').textContent = '';
  $('#secret-panel').hidden = true;
});
$('#secret-copy').addEventListener('click', async () => {
  try {
    await navigator.clipboard.writeText($('#secret-value').textContent);
    toast('Secret copied', 'ok');
  } catch {
    toast('Copy it by hand: select the secret (one click selects it all)', 'info');
  }
});

// ------------------------------------------------------------------------------ the form

const dialog = $('#key-dialog');
const form = $('#key-form');
let editing = null;

const lines = (text) => text.split(/[\r\n,]+/).map((l) => l.trim()).filter(Boolean);

function openForm(k) {
  editing = k ? k.name : null;
  clearFieldErrors(form);
  $('#key-form-error').hidden = true;
  $('#key-dialog-title').textContent = k ? `Edit ${k.name}` : 'Add key';
  const f = form.elements;
  f.name.value = k ? k.name : '';
  f.name.disabled = !!k;
  f.description.value = (k && k.description) || '';
  f.expires_at.value = (k && k.expires_at) || '';
  f.models.value = k ? k.models.join('\n') : '';
  f.endpoints.value = k ? k.endpoints.join('\n') : '';
  for (const l of LIMITS) {
    const v = k ? k.limits[l] : null;
    f[`limits.${l}`].value = v === null || v === undefined ? '' : String(v);
  }
  f.enabled.checked = k ? k.enabled : true;
  dialog.showModal();
  (k ? f.description : f.name).focus();
}

function formBody() {
  const f = form.elements;
  const limits = {};
  for (const l of LIMITS) {
    const raw = f[`limits.${l}`].value.trim();
    limits[l] = raw === '' ? null : Number(raw);
  }
  const body = {
    description: f.description.value.trim() || null,
    expires_at: f.expires_at.value.trim() || null,
    models: lines(f.models.value),
    endpoints: lines(f.endpoints.value),
    limits,
    enabled: f.enabled.checked,
  };
  if (!editing) body.name = f.name.value.trim();
  return body;
}

/** The API names the field first in its message (`limits.rpm: …`) even where `field` is null. */
function guessField(message) {
  const m = /^([a-z_]+(?:\.[a-z_0-9]+)?):/.exec(message || '');
  return m ? m[1] : null;
}

form.addEventListener('submit', async (ev) => {
  ev.preventDefault();
  clearFieldErrors(form);
  $('#key-form-error').hidden = true;
  const save = $('#key-save');
  save.disabled = true;
  try {
    const saved = editing
      ? await api('PATCH', `/api/keys/${encodeURIComponent(editing)}`, formBody())
      : await api('POST', '/api/keys', formBody());
    dialog.close();
    toast(`${saved.name} saved`, 'ok');
    if (saved.secret) showSecret(saved.name, saved.secret);
    await load();
  } catch (err) {
    if (!showFieldError(form, err.field || guessField(err.message), err.message)) {
      const box = $('#key-form-error');
      box.textContent = err.message;
      box.hidden = false;
    }
  } finally {
    save.disabled = false;
  }
});

$('#key-cancel').addEventListener('click', () => dialog.close());
$('#add-key').addEventListener('click', () => openForm(null));

// ------------------------------------------------------------------------------ actions

const confirmDialog = $('#key-confirm');
function confirm(text, then) {
  $('#key-confirm-text').textContent = text;
  confirmDialog.returnValue = '';
  confirmDialog.showModal();
  confirmDialog.addEventListener('close', () => { if (confirmDialog.returnValue === 'yes') then(); }, { once: true });
}

$('#keys-body').addEventListener('click', (ev) => {
  const button = ev.target.closest('button[data-act]');
  if (!button) return;
  const name = button.closest('tr').dataset.name;
  const k = keys.find((x) => x.name === name);
  const path = `/api/keys/${encodeURIComponent(name)}`;
  if (button.dataset.act === 'edit') openForm(k);
  else if (button.dataset.act === 'rotate') {
    confirm(`Give ${name} a new secret? The current one stops working at once.`, async () => {
      try {
        const r = await api('POST', `${path}/rotate`);
        showSecret(name, r.secret);
        await load();
      } catch (err) { toast(`Could not rotate ${name}: ${err.message}`, 'error'); }
    });
  } else if (button.dataset.act === 'delete') {
    confirm(`Delete the key ${name}? Its holder is refused at once; its records stay.`, async () => {
      try {
        await api('DELETE', path);
        toast(`${name} deleted`, 'ok');
        await load();
      } catch (err) { toast(`Could not delete ${name}: ${err.message}`, 'error'); }
    });
  }
});

live('request', reload);
live('config', (c) => { if (String(c.what).startsWith('key_')) reload(); });

load().catch((err) => toast(`Could not load the keys: ${err.message}`, 'error'));
