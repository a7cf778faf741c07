// Shared by the browser scripts: launch Debian's Chromium through playwright-core, guard every
// request (only the gateway's origin may be reached), collect page errors, small assertions.
import { chromium } from 'playwright-core';

export const BASE = process.argv[2];
if (!BASE) {
  console.error('usage: node <script> http://127.0.0.1:PORT');
  process.exit(2);
}
export const ORIGIN = new URL(BASE).origin;

const limit = Number(process.env.SCRIPT_TIMEOUT_SECS || 180) * 1000;
const watchdog = setTimeout(() => {
  console.error(`watchdog: the script took more than ${limit / 1000} s`);
  process.exit(3);
}, limit);

export const ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
  '--disable-sync', '--no-first-run', '--disable-dev-shm-usage',
];

export async function launch() {
  return chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: ARGS, headless: true });
}

/** Requests to anything but the gateway: each is recorded and aborted. */
export const foreign = [];
/** Script errors and console errors in any page. */
export const pageErrors = [];

export async function newContext(browser, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 }, ...options });
  context.setDefaultTimeout(10000);
  await context.route('**/*', (route) => {
    const url = route.request().url();
    // The screenshot script also shows the login page of a second gateway (LOGIN_URL).
    const allowed = [ORIGIN, process.env.LOGIN_URL && new URL(process.env.LOGIN_URL).origin];
    if (url.startsWith('data:') || allowed.includes(new URL(url).origin)) return route.continue();
    foreign.push(url);
    return route.abort('blockedbyclient');
  });
  context.on('page', (page) => { watchPage(page); (globalThis.pages ||= []).push(page); });
  return context;
}

function watchPage(page) {
  page.on('pageerror', (e) => pageErrors.push(`pageerror on ${page.url()}: ${e.message}`));
  page.on('console', (m) => {
    // A 4xx answer the page expects and shows (a validation error) is logged by Chromium as
    // "Failed to load resource"; real script errors are something else.
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) {
      pageErrors.push(`console error on ${page.url()}: ${m.text()}`);
    }
  });
}

export function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}

const t0 = Date.now();
/** Run one named step, logging how long it took. */
export async function step(name, fn) {
  const started = Date.now();
  try {
    const v = await fn();
    console.log(`STEP ${name}: ${Date.now() - started} ms`);
    return v;
  } catch (e) {
    console.log(`STEP ${name}: FAILED after ${Date.now() - started} ms`);
    throw e;
  }
}

/** Poll `fn` until it returns a truthy value (returned), or fail with `what`. */
export async function until(what, fn, timeoutMs = 10000) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) { last = e; }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
}

/** The admin API from the test's side (not the page's), with an optional bearer token. */
export async function api(method, path, body, token) {
  const headers = { 'content-type': 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  const r = await fetch(BASE + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null, headers: r.headers };
}

/** One client request through the gateway. */
export async function send(path, body, headers = {}) {
  const r = await fetch(BASE + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  await r.arrayBuffer();
  return { status: r.status, id: r.headers.get('x-ccmesh-request-id') };
}

/** Close everything, check the guards, print the result, exit. */
export async function finish(browser, result = {}) {
  await browser.close();
  clearTimeout(watchdog);
  check(foreign.length === 0, `the pages made requests to other hosts: ${foreign.join(', ')}`);
  check(pageErrors.length === 0, `errors in the pages:\n${pageErrors.join('\n')}`);
  console.log(`RESULT ${JSON.stringify({ ...result, seconds: (Date.now() - t0) / 1000 })}`);
}

/** Run `main`; any failure exits non-zero with the error. */
export function main(fn) {
  fn().catch(async (e) => {
    // Where the page was: its toasts and a screenshot (target/browser-failure.png).
    for (const page of globalThis.pages || []) {
      try {
        console.error(`page ${page.url()} toasts: ${JSON.stringify(await page.$$eval('.toast', (ts) => ts.map((t) => t.textContent)))}`);
        await page.screenshot({ path: new URL('../../target/browser-failure.png', import.meta.url).pathname, fullPage: true });
      } catch { /* the page is gone */ }
    }
    console.error(e && e.stack ? e.stack : e);
    if (pageErrors.length) console.error(`page errors:\n${pageErrors.join('\n')}`);
    if (foreign.length) console.error(`foreign requests: ${foreign.join(', ')}`);
    process.exit(1);
  });
}
