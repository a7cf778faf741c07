// Small SVG charts drawn by the page: series over time (bars, stacked bars, lines) and
// horizontal bar lists. Colours come from CSS classes (s0…s5), so light and dark mode follow the
// stylesheet; sizes follow the container (redrawn when it resizes). Hover shows native titles.
import { h } from './app.js';

const PAD = { top: 10, right: 10, bottom: 24, left: 46 };

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  const m = v / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p;
}

function shortNum(v) {
  if (v >= 1e9) return (v / 1e9).toFixed(v % 1e9 ? 1 : 0) + 'G';
  if (v >= 1e6) return (v / 1e6).toFixed(v % 1e6 ? 1 : 0) + 'M';
  if (v >= 1e3) return (v / 1e3).toFixed(v % 1e3 ? 1 : 0) + 'k';
  return String(Math.round(v * 100) / 100);
}

function legend(series) {
  return h('div', { class: 'legend' }, series.map((s, i) => h('span', null, h('i', { class: `k${s.color ?? i}` }), s.name)));
}

const observers = new WeakMap();
/** Draw now and whenever the box's width changes. */
function responsive(box, draw) {
  let last = 0;
  const run = () => {
    const w = Math.max(260, Math.floor(box.clientWidth));
    if (w === last) return;
    last = w;
    box.replaceChildren(...draw(w));
  };
  observers.get(box)?.disconnect();
  const ro = new ResizeObserver(run);
  ro.observe(box);
  observers.set(box, ro);
  run();
}

function empty(box, text) {
  observers.get(box)?.disconnect();
  box.replaceChildren(h('div', { class: 'empty' }, text));
}

/**
 * A series over time. `points`: [{t (ms), values: [..]}] for every bucket (zeros included);
 * `series`: [{name, color}]; `mode`: 'stacked' (bars), 'grouped' (bars) or 'lines'.
 */
export function timeChart(box, { points, series, mode, bucketMs, fmtTick, fmtValue = shortNum, height = 200 }) {
  if (!points.length || points.every((p) => p.values.every((v) => !v))) return empty(box, 'No requests in this range.');
  responsive(box, (W) => {
    const H = height;
    const iw = W - PAD.left - PAD.right;
    const ih = H - PAD.top - PAD.bottom;
    const maxV = niceMax(Math.max(...points.map((p) => (mode === 'stacked' ? p.values.reduce((a, b) => a + (b || 0), 0) : Math.max(...p.values.map((v) => v || 0))))));
    const n = points.length;
    const bw = iw / n;
    const y = (v) => PAD.top + ih - (v / maxV) * ih;
    const svg = h('svg:svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': series.map((s) => s.name).join(', ') });
    for (let k = 0; k <= 4; k++) {
      const v = (maxV * k) / 4;
      svg.append(h('svg:line', { class: 'gridline', x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v) }));
      svg.append(h('svg:text', { x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end' }, fmtValue(v)));
    }
    svg.append(h('svg:line', { class: 'axis', x1: PAD.left, x2: W - PAD.right, y1: y(0), y2: y(0) }));
    // x labels: about one per 70 px
    const every = Math.max(1, Math.ceil(n / Math.max(1, Math.floor(iw / 70))));
    points.forEach((p, i) => {
      if (i % every === 0) svg.append(h('svg:text', { x: PAD.left + bw * i + bw / 2, y: H - 6, 'text-anchor': 'middle' }, fmtTick(p.t)));
    });
    if (mode === 'lines') {
      series.forEach((s, si) => {
        let d = '';
        let pen = false;
        points.forEach((p, i) => {
          const v = p.values[si];
          if (v === null || v === undefined) { pen = false; return; }
          d += `${pen ? 'L' : 'M'}${(PAD.left + bw * i + bw / 2).toFixed(1)},${y(v).toFixed(1)}`;
          pen = true;
        });
        svg.append(h('svg:path', { class: `line s${s.color ?? si}`, d }));
        points.forEach((p, i) => {
          const v = p.values[si];
          if (v !== null && v !== undefined && n <= 60) svg.append(h('svg:circle', { class: `s${s.color ?? si}`, cx: PAD.left + bw * i + bw / 2, cy: y(v), r: 2.5 }));
        });
      });
    } else {
      const gap = Math.min(2, bw * 0.15);
      points.forEach((p, i) => {
        const x0 = PAD.left + bw * i + gap / 2;
        const w = Math.max(1, bw - gap);
        let acc = 0;
        p.values.forEach((v, si) => {
          if (!v) return;
          if (mode === 'stacked') {
            svg.append(h('svg:rect', { class: `s${series[si].color ?? si}`, x: x0, width: w, y: y(acc + v), height: Math.max(0.5, y(acc) - y(acc + v)) }));
            acc += v;
          } else {
            const sw = w / p.values.length;
            svg.append(h('svg:rect', { class: `s${series[si].color ?? si}`, x: x0 + sw * si, width: Math.max(1, sw - 0.5), y: y(v), height: Math.max(0.5, y(0) - y(v)) }));
          }
        });
      });
    }
    // hover targets with the numbers
    points.forEach((p, i) => {
      const hit = h('svg:rect', { class: 'hit', x: PAD.left + bw * i, y: PAD.top, width: bw, height: ih });
      hit.append(h('svg:title', null, `${fmtTick(p.t, true)}\n` + series.map((s, si) => `${s.name}: ${p.values[si] === null || p.values[si] === undefined ? '–' : fmtValue(p.values[si], true)}`).join('\n')));
      svg.append(hit);
    });
    return [svg, legend(series)];
  });
}

/** Horizontal bars, one row per item; `values` stack left to right in series order. */
export function barList(box, { items, series, fmtValue = shortNum }) {
  const rows = items.filter((it) => it.values.some((v) => v > 0));
  if (!rows.length) return empty(box, 'Nothing to show in this range.');
  responsive(box, (W) => {
    const rowH = 22;
    const labelW = Math.min(180, Math.floor(W * 0.34));
    const valueW = 64;
    const H = rows.length * rowH + 4;
    const iw = W - labelW - valueW - 8;
    const maxV = Math.max(...rows.map((r) => r.values.reduce((a, b) => a + b, 0))) || 1;
    const svg = h('svg:svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': series.map((s) => s.name).join(', ') });
    rows.forEach((r, i) => {
      const y0 = i * rowH + 3;
      const label = r.label.length > 28 ? r.label.slice(0, 27) + '…' : r.label;
      svg.append(h('svg:text', { x: labelW - 6, y: y0 + 13, 'text-anchor': 'end' }, label));
      let x = labelW;
      const total = r.values.reduce((a, b) => a + b, 0);
      r.values.forEach((v, si) => {
        if (!v) return;
        const w = (v / maxV) * iw;
        const rect = h('svg:rect', { class: `s${series[si].color ?? si}`, x, y: y0, width: Math.max(1, w), height: rowH - 7, rx: 2 });
        rect.append(h('svg:title', null, `${r.label} — ${series[si].name}: ${fmtValue(v, true)}`));
        svg.append(rect);
        x += w;
      });
      svg.append(h('svg:text', { x: x + 6, y: y0 + 13 }, fmtValue(total)));
    });
    return series.length > 1 ? [svg, legend(series)] : [svg];
  });
}
