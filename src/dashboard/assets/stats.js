// Statistics over a chosen range from GET /api/stats: requests and errors, latency p50/p95 and
// failovers over time (hour or day buckets, UTC-aligned as the API makes them), tokens and cost
// by endpoint and by model. Drawn as SVG by charts.js.
import { api, h, $, fmtInt, fmtCost, fmtPct, fmtMs, toast } from './app.js';
import { timeChart, barList } from './charts.js';

const RANGES = {
  '6h': { since: '6h', bucket: 'hour' }, '24h': { since: '24h', bucket: 'hour' }, '7d': { since: '7d', bucket: 'hour' },
  '30d': { since: '30d', bucket: 'day' }, '90d': { since: '90d', bucket: 'day' },
};
const select = $('#range');

function card(label, value, sub) {
  return h('div', { class: 'card' }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value), h('div', { class: 'sub' }, sub || ''));
}

/** Every bucket of the range, zeros where the API has none. */
function fill(report, width) {
  const byStart = new Map(((report.groups[0] || {}).buckets || []).map((b) => [b.start_ms, b]));
  const first = Math.floor(report.since_ms / width) * width;
  const out = [];
  for (let t = first; t < report.until_ms; t += width) out.push({ t, b: byStart.get(t) || null });
  return out;
}

function tickFmt(bucket) {
  return (t, long) => {
    const d = new Date(t);
    if (bucket === 'day') return d.toLocaleDateString(undefined, { timeZone: 'UTC', month: 'short', day: 'numeric', ...(long ? { year: 'numeric' } : {}) });
    return long ? d.toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', hour12: false })
      : d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', hour12: false });
  };
}

const TOKEN_SERIES = [{ name: 'input', color: 0 }, { name: 'output', color: 2 }, { name: 'cache read', color: 5 }, { name: 'cache write', color: 4 }];
const tokenValues = (t) => [t.input, t.output, t.cache_read, t.cache_write];

async function load() {
  const r = RANGES[select.value] || RANGES['24h'];
  const width = r.bucket === 'hour' ? 3600000 : 86400000;
  try {
    const [series, byEndpoint, byModel] = await Promise.all([
      api('GET', `/api/stats?since=${r.since}&bucket=${r.bucket}`),
      api('GET', `/api/stats?since=${r.since}&group_by=endpoint`),
      api('GET', `/api/stats?since=${r.since}&group_by=model`),
    ]);
    const t = series.totals;
    $('#range-note').textContent = `${new Date(series.since_ms).toLocaleString()} – now, ${r.bucket} buckets (UTC)`;
    $('#stat-cards').replaceChildren(
      card('Requests', fmtInt(t.requests)),
      card('Errors', fmtInt(t.errors), t.requests ? fmtPct(t.errors / t.requests) : ''),
      card('Failovers', fmtInt(t.failovers)),
      card('Latency p50 / p95', t.latency_ms.p50 === null ? '–' : `${fmtMs(t.latency_ms.p50)} / ${fmtMs(t.latency_ms.p95)}`, 'ms, whole request'),
      card('Tokens', fmtInt(t.tokens.input + t.tokens.output + t.tokens.cache_read + t.tokens.cache_write), `${fmtInt(t.tokens.input)} in · ${fmtInt(t.tokens.output)} out`),
      card('Cost', fmtCost(t.cost_usd), t.unpriced.requests ? `${fmtInt(t.unpriced.requests)} requests unpriced` : 'USD'),
    );
    const pts = fill(series, width);
    const fmtTick = tickFmt(r.bucket);
    timeChart($('#ch-requests'), {
      mode: 'stacked', fmtTick, bucketMs: width,
      series: [{ name: 'succeeded', color: 0 }, { name: 'errors', color: 1 }],
      points: pts.map(({ t, b }) => ({ t, values: b ? [b.requests - b.errors, b.errors] : [0, 0] })),
    });
    timeChart($('#ch-latency'), {
      mode: 'lines', fmtTick, bucketMs: width, fmtValue: (v, long) => (long ? `${fmtMs(v)} ms` : String(Math.round(v))),
      series: [{ name: 'p50', color: 0 }, { name: 'p95', color: 3 }],
      points: pts.map(({ t, b }) => ({ t, values: b ? [b.latency_ms.p50, b.latency_ms.p95] : [null, null] })),
    });
    timeChart($('#ch-failovers'), {
      mode: 'stacked', fmtTick, bucketMs: width,
      series: [{ name: 'failovers', color: 3 }],
      points: pts.map(({ t, b }) => ({ t, values: [b ? b.failovers : 0] })),
    });
    const groups = (rep) => rep.groups.map((g) => ({ label: g.key ?? '(none)', totals: g.totals }));
    const byTokens = (a, b) => tokenValues(b.totals.tokens).reduce((x, y) => x + y, 0) - tokenValues(a.totals.tokens).reduce((x, y) => x + y, 0);
    const byCost = (a, b) => (b.totals.cost_usd || 0) - (a.totals.cost_usd || 0);
    const costFmt = (v, long) => (long ? fmtCost(v) : fmtCost(v));
    for (const [rep, tokId, costId] of [[byEndpoint, '#ch-tokens-endpoint', '#ch-cost-endpoint'], [byModel, '#ch-tokens-model', '#ch-cost-model']]) {
      const g = groups(rep);
      barList($(tokId), { series: TOKEN_SERIES, items: g.slice().sort(byTokens).slice(0, 15).map((x) => ({ label: x.label, values: tokenValues(x.totals.tokens) })) });
      barList($(costId), { series: [{ name: 'cost', color: 4 }], fmtValue: costFmt, items: g.slice().sort(byCost).slice(0, 15).map((x) => ({ label: x.label, values: [x.totals.cost_usd || 0] })) });
    }
  } catch (err) {
    toast(`Could not load statistics: ${err.message}`, 'error');
  }
}

const params = new URLSearchParams(location.search);
if (params.get('range') && RANGES[params.get('range')]) select.value = params.get('range');
select.addEventListener('change', () => {
  history.replaceState(null, '', `?range=${select.value}`);
  load();
});
load();
