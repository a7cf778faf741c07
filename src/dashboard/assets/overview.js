// Overview: is the gateway up, where each protocol's next request starts, today's numbers,
// endpoint health, and the feed of finished requests: the last FEED_MAX from /api/requests when
// the page opens, then each new one from /api/events (a request already shown is not added
// twice: the live stream is connected before the history is read, so one may come both ways).
//
// Kept light for 50 endpoints and 10+ requests/s: events only queue data; one
// requestAnimationFrame callback per frame applies them (a fragment of new rows, the counters);
// the feed keeps FEED_MAX rows; health is re-read at most every HEALTH_EVERY_MS while traffic
// flows (a "degraded" endpoint has no event of its own), at once (throttled) on breaker events.
import { api, h, $, live, perFrame, throttle, badge, badgeInfo, fmtInt, fmtMs, fmtCost, fmtPct, fmtTime, tokensTotal, statusClass, PROTOCOLS } from './app.js';

const FEED_MAX = 100;
const HEALTH_EVERY_MS = 2000;

const state = {
  settings: null,
  health: new Map(),      // name -> health entry (+ _at: when received, for the countdown)
  endpoints: new Map(),   // name -> endpoint config
  today: null,            // {requests, errors, failovers, tokens: {input, output}, cost}
  pending: [],            // request events not drawn yet
  rpm: [],                // arrival times (ms) of requests seen live in the last minute
  rpmSeed: 0,             // requests in the minute before the page connected, fading out
  rpmSeedAt: 0,
};

// ------------------------------------------------------------------------------ cards

function setCard(id, text, cls) {
  const el = document.getElementById(id);
  el.textContent = text;
  if (cls !== undefined) el.className = 'value ' + cls;
}

function localMidnight() {
  const d = new Date();
  d.setHours(0, 0, 0, 0);
  return d.getTime();
}

async function loadToday() {
  const s = await api('GET', `/api/stats?since=${localMidnight()}`);
  const t = s.totals;
  state.today = {
    requests: t.requests, errors: t.errors, failovers: t.failovers,
    input: t.tokens.input + t.tokens.cache_read + t.tokens.cache_write, output: t.tokens.output,
    cost: t.cost_usd, day: localMidnight(),
  };
  scheduleDraw();
}

async function loadRpm() {
  const s = await api('GET', '/api/stats?since=60s');
  state.rpmSeed = s.totals.requests;
  state.rpmSeedAt = Date.now();
  state.rpm = [];
  scheduleDraw();
}

function drawCards() {
  const t = state.today;
  if (t) {
    setCard('c-err', t.requests ? fmtPct(t.errors / t.requests) : '–', t.errors ? 'bad' : '');
    document.getElementById('c-err-sub').textContent = `today · ${fmtInt(t.errors)} of ${fmtInt(t.requests)}`;
    setCard('c-fo', fmtInt(t.failovers));
    setCard('c-tok', fmtInt(t.input + t.output));
    document.getElementById('c-tok-sub').textContent = `today · ${fmtInt(t.input)} in / ${fmtInt(t.output)} out`;
    setCard('c-cost', fmtCost(t.cost));
  }
  const now = Date.now();
  while (state.rpm.length && state.rpm[0] < now - 60000) state.rpm.shift();
  // The seed minute slides out linearly as live data replaces it.
  const seedLeft = Math.max(0, 1 - (now - state.rpmSeedAt) / 60000);
  setCard('c-rpm', fmtInt(state.rpm.length + Math.round(state.rpmSeed * seedLeft)));
}

async function checkUp() {
  try {
    const res = await fetch('/health', { cache: 'no-store' });
    if (!res.ok) throw new Error(res.status);
    setCard('c-up', 'up', 'ok');
  } catch {
    setCard('c-up', 'down', 'bad');
    document.getElementById('c-up-sub').textContent = 'the gateway does not answer';
  }
}

// ------------------------------------------------------------------------------ current

async function loadCurrent() {
  const cur = await api('GET', '/api/current');
  const dl = document.getElementById('current');
  // `next` is where the next request starts (the routing order, or the remembered current
  // endpoint); the remembered one is named too when a cooling-down breaker has it skipped.
  dl.replaceChildren(...PROTOCOLS.flatMap((p) => {
    const next = cur.next ? cur.next[p] : cur[p];
    const remembered = cur[p] && cur[p] !== next
      ? h('small', { class: 'muted', title: 'the remembered current endpoint, skipped while its breaker cools down' }, ` · remembered: ${cur[p]}`)
      : null;
    return [
      h('dt', null, p),
      h('dd', { id: `current-${p}` }, next || h('span', { class: 'muted' }, 'no enabled endpoint'), remembered),
    ];
  }));
}

// ------------------------------------------------------------------------------ health

const healthItems = new Map(); // name -> li

function drawHealth() {
  const grid = document.getElementById('health-grid');
  const names = [...state.endpoints.keys()];
  if (!names.length) for (const n of state.health.keys()) names.push(n);
  document.getElementById('health-empty').hidden = names.length > 0;
  const keep = new Set(names);
  for (const [n, li] of healthItems) if (!keep.has(n)) { li.remove(); healthItems.delete(n); }
  let cooling = false;
  names.forEach((name, i) => {
    let li = healthItems.get(name);
    if (!li) {
      li = h('li', { dataset: { name } }, h('span', { class: 'name' }, name), h('span', { class: 'b' }));
      healthItems.set(name, li);
    }
    if (grid.children[i] !== li) grid.insertBefore(li, grid.children[i] || null);
    const ep = state.endpoints.get(name);
    li.classList.toggle('off', ep ? !ep.enabled : false);
    li.title = ep && !ep.enabled ? 'disabled' : '';
    const hl = state.health.get(name);
    const b = badgeInfo(hl, state.settings);
    cooling ||= !!b.cooling;
    const holder = li.lastChild;
    const key = `${b.state}|${b.sub || ''}|${b.detail}`;
    if (holder.dataset.key !== key) {
      holder.dataset.key = key;
      holder.replaceChildren(badge(hl, state.settings));
    }
  });
  if (cooling) setTimeout(scheduleHealthDraw, 1000);
}
const scheduleHealthDraw = perFrame(drawHealth);

function setHealth(list) {
  const at = performance.now();
  state.health = new Map(list.map((e) => [e.name, Object.assign(e, { _at: at })]));
  scheduleHealthDraw();
}

async function loadHealth() { setHealth(await api('GET', '/api/health')); }
async function loadEndpoints() {
  const list = await api('GET', '/api/endpoints');
  state.endpoints = new Map(list.map((e) => [e.name, e]));
  scheduleHealthDraw();
}

const refreshSoon = throttle(() => { loadHealth().catch(() => {}); loadCurrent().catch(() => {}); }, HEALTH_EVERY_MS);
const refreshNow = throttle(() => { loadHealth().catch(() => {}); }, 250);

// ------------------------------------------------------------------------------ feed

const feed = document.getElementById('feed');
const pause = document.getElementById('feed-pause');

function feedRow(r) {
  const tokens = tokensTotal(r.tokens);
  const tr = h('tr', { class: 'link', tabindex: '0', dataset: { id: r.id }, title: r.error || '' },
    h('td', null, h('a', { href: `/requests/${encodeURIComponent(r.id)}`, tabindex: '-1' }, fmtTime(r.started_at_ms))),
    h('td', { class: 'hide-narrow' }, r.protocol),
    h('td', { class: 'trunc' }, r.model || '–'),
    h('td', null, r.endpoint || '–'),
    h('td', null, h('span', { class: `st ${statusClass(r.status)}` }, r.status), r.error ? h('span', { class: 'muted' }, ' ✕') : null),
    h('td', { class: 'num' }, fmtMs(r.total_ms)),
    h('td', { class: 'num hide-narrow' }, r.attempts, r.failed_over ? h('span', { class: 'tag', title: 'failed over' }, '↷') : null),
    h('td', { class: 'num hide-narrow' }, tokens === null ? '–' : fmtInt(tokens)),
    h('td', { class: 'num hide-narrow' }, fmtCost(r.cost_usd)));
  return tr;
}

feed.addEventListener('click', (ev) => {
  const tr = ev.target.closest('tr[data-id]');
  if (tr) location.assign(`/requests/${encodeURIComponent(tr.dataset.id)}`);
});
feed.addEventListener('keydown', (ev) => {
  const tr = ev.target.closest('tr[data-id]');
  if (tr && (ev.key === 'Enter' || ev.key === ' ')) { ev.preventDefault(); location.assign(`/requests/${encodeURIComponent(tr.dataset.id)}`); }
});

const shownIds = new Set(); // ids of the rows in the feed

function dropOverflow() {
  while (feed.rows.length > FEED_MAX) {
    shownIds.delete(feed.lastElementChild.dataset.id);
    feed.lastElementChild.remove();
  }
}

function drawFeed() {
  if (pause.checked || !state.pending.length) return;
  const batch = state.pending.splice(0).slice(-FEED_MAX);
  const frag = document.createDocumentFragment();
  for (let i = batch.length - 1; i >= 0; i--) {
    if (shownIds.has(batch[i].id)) continue;
    shownIds.add(batch[i].id);
    frag.append(feedRow(batch[i]));
  }
  feed.prepend(frag);
  dropOverflow();
  document.getElementById('feed-empty').hidden = feed.rows.length > 0;
}

/** The last requests, below whatever arrived live meanwhile (they are older than all of it). */
async function loadHistory() {
  const page = await api('GET', `/api/requests?limit=${FEED_MAX}`);
  const frag = document.createDocumentFragment();
  for (const r of page.requests) {
    if (shownIds.has(r.id) || state.pending.some((p) => p.id === r.id)) continue;
    shownIds.add(r.id);
    frag.append(feedRow({ ...r, model: r.model_requested }));
  }
  feed.append(frag);
  dropOverflow();
  document.getElementById('feed-empty').hidden = feed.rows.length > 0;
}

const scheduleDraw = perFrame(() => { drawFeed(); drawCards(); });
pause.addEventListener('change', scheduleDraw);

function onRequest(r) {
  // Already in the feed from the history (it completed while the page was opening).
  if (shownIds.has(r.id)) return;
  state.pending.push(r);
  if (state.pending.length > FEED_MAX) state.pending.splice(0, state.pending.length - FEED_MAX);
  state.rpm.push(Date.now());
  const t = state.today;
  if (t) {
    if (localMidnight() !== t.day) { loadToday().catch(() => {}); }
    t.requests += 1;
    if (r.status >= 400 || r.error) t.errors += 1;
    if (r.failed_over) t.failovers += 1;
    if (r.tokens) {
      t.input += (r.tokens.input || 0) + (r.tokens.cache_read || 0) + (r.tokens.cache_write || 0);
      t.output += r.tokens.output || 0;
    }
    if (r.cost_usd !== null && r.cost_usd !== undefined) t.cost = (t.cost || 0) + r.cost_usd;
  }
  scheduleDraw();
  refreshSoon();
}

// ------------------------------------------------------------------------------ start

let historyLoaded = false;
live('open', () => {
  document.getElementById('c-up-sub').textContent = 'live events connected';
  // Read the history once the live stream is open, so nothing falls between the two.
  if (!historyLoaded) { historyLoaded = true; loadHistory().catch(() => { historyLoaded = false; }); }
});
live('hello', (d) => setHealth(d.endpoints));
live('request', onRequest);
live('breaker', refreshNow);
live('config', (c) => {
  loadEndpoints().catch(() => {});
  loadCurrent().catch(() => {});
  refreshNow();
  if (c.what === 'settings') api('GET', '/api/settings').then((s) => { state.settings = s; scheduleHealthDraw(); }).catch(() => {});
});
live('lagged', () => { loadToday().catch(() => {}); loadRpm().catch(() => {}); });

checkUp();
setInterval(checkUp, 15000);
api('GET', '/api/settings').then((s) => { state.settings = s; scheduleHealthDraw(); }).catch(() => {});
loadEndpoints().catch(() => {});
loadCurrent().catch(() => {});
loadToday().catch(() => {});
loadRpm().catch(() => {});
setInterval(() => loadToday().catch(() => {}), 60000);
setInterval(scheduleDraw, 1000);
