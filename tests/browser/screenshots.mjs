// Screenshots of every page into SCREENSHOT_DIR (docs/screenshots by default), light and dark,
// laptop width (and phone width for the overview, the endpoints and the login), from the demo
// gateway that tests/it/dashboard/browser.rs `screenshots` prepares. Run scripts/screenshots.
import { mkdirSync } from 'node:fs';
import { BASE, launch, newContext, step, send, finish, main } from './lib.mjs';

const DIR = process.env.SCREENSHOT_DIR;
const DETAIL = process.env.DETAIL_ID;
const LOGIN_URL = process.env.LOGIN_URL;
// The demo gateway has client keys, so the live traffic carries one.
const AUTH = process.env.CLIENT_KEY ? { 'x-api-key': process.env.CLIENT_KEY } : {};
const LAPTOP = { width: 1280, height: 800 };
const PHONE = { width: 390, height: 844 };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function traffic() {
  const claude = { model: 'claude-sonnet-4-5', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] };
  for (let i = 0; i < 6; i++) {
    await send('/v1/messages', i % 3 === 2 ? { ...claude, model: 'claude-haiku-4-5' } : claude, AUTH);
    await sleep(60);
  }
  await send('/v1/chat/completions', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }, { ...AUTH, 'x-ccmesh-endpoint': 'openai' });
  await send('/v1/chat/completions', { model: 'deepseek-chat', messages: [{ role: 'user', content: 'hi' }] }, { ...AUTH, 'x-ccmesh-endpoint': 'deepseek' });
  await send('/v1/messages', claude, AUTH);
}

main(async () => {
  mkdirSync(DIR, { recursive: true });
  const browser = await launch();
  const shots = [];
  for (const scheme of ['light', 'dark']) {
    for (const [size, viewport] of [['laptop', LAPTOP], ['phone', PHONE]]) {
      const context = await newContext(browser, { viewport, colorScheme: scheme, deviceScaleFactor: 1, reducedMotion: 'reduce' });
      const page = await context.newPage();
      const suffix = `${scheme}${size === 'phone' ? '-phone' : ''}`;
      const shoot = async (name, full = true) => {
        // A full-page shot of a scrolled page would show the sticky header mid-page.
        if (full) await page.evaluate(() => { document.activeElement?.blur(); window.scrollTo(0, 0); });
        const path = `${DIR}/${name}-${suffix}.png`;
        await page.screenshot({ path, fullPage: full, animations: 'disabled', caret: 'hide' });
        shots.push(path);
      };
      await step(`overview ${suffix}`, async () => {
        await page.goto(BASE + '/');
        await page.waitForSelector('#live-status.on');
        await traffic();
        await page.waitForFunction(() => document.querySelectorAll('#feed tr').length >= 9);
        await sleep(2200); // the health refresh after the traffic
        await shoot('overview');
      });
      await step(`endpoints ${suffix}`, async () => {
        await page.goto(BASE + '/endpoints');
        await page.waitForSelector('tr[data-name="kimi"] .badge');
        await sleep(300);
        await shoot('endpoints');
        if (size === 'laptop') {
          await page.click('tr[data-name="relay"] .health-cell button');
          await page.waitForSelector('tr[data-details-for="relay"]');
          await shoot('endpoint-details');
          await page.click('tr[data-name="glm"] button:text-is("Edit")');
          await page.waitForSelector('#ep-dialog[open]');
          await shoot('endpoint-form', false);
        }
      });
      if (size === 'laptop') {
        await step(`requests ${suffix}`, async () => {
          await page.goto(BASE + '/requests');
          await page.waitForSelector('#req-body tr');
          await shoot('requests', false);
          await page.goto(`${BASE}/requests/${DETAIL}`);
          await page.waitForSelector('#trail tbody tr');
          await shoot('request-detail');
        });
        await step(`statistics ${suffix}`, async () => {
          await page.goto(BASE + '/stats');
          await page.waitForSelector('#ch-requests svg');
          await sleep(300);
          await shoot('statistics');
        });
        await step(`settings ${suffix}`, async () => {
          await page.goto(BASE + '/settings');
          await page.waitForSelector('#price-body tr');
          await page.fill('#price-filter', 'claude-sonnet');
          await shoot('settings');
        });
        await step(`clients ${suffix}`, async () => {
          await page.goto(BASE + '/clients');
          await page.waitForSelector('tr[data-client="codex"] .badge[data-state="connected"]');
          await shoot('clients');
        });
        await step(`keys ${suffix}`, async () => {
          await page.goto(BASE + '/keys');
          await page.waitForSelector('tr[data-name="alice"]');
          await shoot('keys');
        });
      }
      if (LOGIN_URL) {
        await step(`login ${suffix}`, async () => {
          await page.goto(LOGIN_URL + '/login');
          await page.waitForSelector('#token');
          await shoot('login', false);
        });
      }
      await context.close();
    }
  }
  console.log(shots.join('\n'));
  await finish(browser, { screenshots: shots.length });
});
