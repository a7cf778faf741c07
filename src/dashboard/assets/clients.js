// Clients: each coding agent's state relative to this gateway, with Connect / Disconnect
// buttons (POST /api/clients/{client}/connect|disconnect). The gateway edits the files only when
// it listens on loopback; otherwise the page says why and which command to run instead.
import { api, h, $, toast } from './app.js';

const STATES = {
  connected: ['connected to this gateway', 'healthy'],
  elsewhere: ['pointing elsewhere', 'degraded'],
  not_configured: ['not configured', 'unknown'],
  not_installed: ['not installed', 'unknown'],
};

let info = null;

function row(c) {
  const [label, tone] = STATES[c.status] || [c.status, 'unknown'];
  const actions = h('td', { class: 'actions' });
  if (info.can_edit && c.status !== 'not_installed') {
    if (c.status !== 'connected' || !c.has_record) {
      actions.append(h('button', { type: 'button', class: 'primary', 'data-act': 'connect', 'data-client': c.client }, 'Connect'));
    }
    if (c.has_record) {
      actions.append(h('button', { type: 'button', 'data-act': 'disconnect', 'data-client': c.client }, 'Disconnect'));
    }
  }
  return h('tr', { 'data-client': c.client },
    h('th', { scope: 'row' }, c.name),
    h('td', {}, h('span', { class: `badge ${tone}`, 'data-state': c.status }, h('span', { class: 'dot', 'aria-hidden': 'true' }), label), c.error ? h('small', { class: 'field-error' }, ` ${c.error}`) : ''),
    h('td', { class: 'mono' }, c.url || '–'),
    h('td', { class: 'mono' }, c.config),
    actions);
}

function draw() {
  const refused = $('#clients-refused');
  refused.hidden = info.can_edit;
  refused.textContent = info.can_edit ? '' : info.reason || '';
  const service = $('#clients-service');
  const managed = info.service && (info.service.managed || info.service.installed);
  service.hidden = !!managed;
  service.replaceChildren(...(managed ? [] : [
    'The gateway does not run as a service: connected clients reach no model while it is stopped. ',
    h('code', {}, 'ccmesh service install'), ' starts it at every login.',
  ]));
  $('#clients-body').replaceChildren(...info.clients.map(row));
}

function report(title, r) {
  $('#clients-report-title').textContent = title;
  const items = [
    ...(r.restored_exactly || []).map((f) => `${f}: restored exactly as it was before connect`),
    ...(r.removed_files || []).map((f) => `${f}: removed (connect had created it)`),
    ...(r.changes || []).map((c) => `${c.file} ${c.key}: ${c.action === 'kept' ? 'left as is (changed since connect)' : c.action}${c.value ? ` ${c.value}` : ''}`),
    ...(r.backups || []).map((b) => `backup: ${b}`),
    ...(r.notes || []).map((n) => `note: ${n}`),
  ];
  $('#clients-report').replaceChildren(...items.map((t) => h('li', {}, t)));
  $('#clients-report-panel').hidden = false;
}

async function load() {
  info = await api('GET', '/api/clients');
  draw();
}

$('#clients-body').addEventListener('click', async (ev) => {
  const button = ev.target.closest('button[data-act]');
  if (!button) return;
  const { act, client } = button.dataset;
  button.disabled = true;
  try {
    const r = await api('POST', `/api/clients/${encodeURIComponent(client)}/${act}`);
    toast(`${r.state.name} ${act === 'connect' ? 'connected' : 'disconnected'}`, 'ok');
    report(`${act === 'connect' ? 'Connected' : 'Disconnected'} ${r.state.name}`, r.report);
    await load();
  } catch (err) {
    toast(`${act} failed: ${err.message}`, 'error');
    button.disabled = false;
  }
});

load().catch((err) => toast(`Could not load the clients: ${err.message}`, 'error'));
