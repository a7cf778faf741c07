// Cost of the overview with many endpoints and a steady live feed: page load, then RATE
// requests/s for SECONDS while the page is open. Reports numbers (the Rust test prints them);
// asserts nothing about timing.
import { BASE, launch, newContext, check, step, send, finish, main } from './lib.mjs';

const RATE = Number(process.env.RATE || 10);
const SECONDS = Number(process.env.SECONDS || 15);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const round = (v, d = 1) => Math.round(v * 10 ** d) / 10 ** d;

main(async () => {
  const browser = await launch();
  const context = await newContext(browser);
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  await cdp.send('Performance.enable');
  const metrics = async () => Object.fromEntries((await cdp.send('Performance.getMetrics')).metrics.map((m) => [m.name, m.value]));

  const load = await step('load the overview with 50 endpoints', async () => {
    const t = Date.now();
    await page.goto(BASE + '/');
    await page.waitForFunction(() => document.querySelectorAll('#health-grid li').length === 50 && document.querySelector('#live-status.on') && document.querySelector('#c-tok').textContent !== '–');
    const ready = Date.now() - t;
    const nav = await page.evaluate(() => {
      const n = performance.getEntriesByType('navigation')[0];
      const res = performance.getEntriesByType('resource');
      const paint = Object.fromEntries(performance.getEntriesByType('paint').map((p) => [p.name, p.startTime]));
      return {
        ttfb_ms: n.responseStart, dom_content_loaded_ms: n.domContentLoadedEventEnd, load_event_ms: n.loadEventEnd,
        first_contentful_paint_ms: paint['first-contentful-paint'] ?? null,
        requests: res.length + 1, bytes: res.reduce((a, r) => a + r.encodedBodySize, 0) + n.encodedBodySize,
        health_items: document.querySelectorAll('#health-grid li').length,
      };
    });
    return { ...Object.fromEntries(Object.entries(nav).map(([k, v]) => [k, typeof v === 'number' && k.endsWith('_ms') ? round(v) : v])), ready_with_data_ms: ready };
  });

  const live = await step(`${SECONDS} s of ~${RATE} requests/s`, async () => {
    await page.evaluate(() => {
      const p = (window.__perf = { longTasks: [], lags: [], frames: 0 });
      new PerformanceObserver((list) => { for (const e of list.getEntries()) p.longTasks.push(e.duration); }).observe({ type: 'longtask' });
      let last = performance.now();
      setInterval(() => { const now = performance.now(); p.lags.push(Math.max(0, now - last - 50)); last = now; }, 50);
      const frame = () => { p.frames += 1; requestAnimationFrame(frame); };
      requestAnimationFrame(frame);
    });
    const before = await metrics();
    const t0 = Date.now();
    const body = { model: 'claude-sonnet-4-5', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] };
    const inflight = [];
    let sent = 0;
    while (Date.now() - t0 < SECONDS * 1000) {
      inflight.push(send('/v1/messages', body));
      sent += 1;
      await sleep(Math.max(0, t0 + (sent * 1000) / RATE - Date.now()));
    }
    const results = await Promise.all(inflight);
    await sleep(500);
    const elapsed = (Date.now() - t0) / 1000;
    const after = await metrics();
    const p = await page.evaluate(() => {
      const lags = window.__perf.lags.slice().sort((a, b) => a - b);
      return {
        long_tasks: window.__perf.longTasks.length, longest_task_ms: Math.max(0, ...window.__perf.longTasks),
        lag_p50_ms: lags[Math.floor(lags.length * 0.5)] || 0, lag_p95_ms: lags[Math.floor(lags.length * 0.95)] || 0, lag_max_ms: lags[lags.length - 1] || 0,
        frames: window.__perf.frames, feed_rows: document.querySelectorAll('#feed tr').length,
        dom_nodes: document.getElementsByTagName('*').length,
      };
    });
    check(results.every((r) => r.status === 200), 'every request succeeded');
    const per = (k) => round(((after[k] - before[k]) * 1000) / elapsed);
    return {
      requests_sent: sent, rate: round(sent / elapsed), seconds: round(elapsed),
      main_thread_busy_ms_per_s: per('TaskDuration'), script_ms_per_s: per('ScriptDuration'),
      layout_ms_per_s: per('LayoutDuration'), style_ms_per_s: per('RecalcStyleDuration'),
      layouts_per_s: round((after.LayoutCount - before.LayoutCount) / elapsed),
      fps: round(p.frames / elapsed), long_tasks: p.long_tasks, longest_task_ms: round(p.longest_task_ms),
      event_loop_lag_p50_ms: round(p.lag_p50_ms), event_loop_lag_p95_ms: round(p.lag_p95_ms), event_loop_lag_max_ms: round(p.lag_max_ms),
      feed_rows: p.feed_rows, dom_nodes: p.dom_nodes, js_heap_mb: round(after.JSHeapUsedSize / 1048576),
    };
  });

  await finish(browser, { load, live });
});
