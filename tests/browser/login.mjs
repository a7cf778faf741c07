// With an admin token: the login page, the signed session cookie (HttpOnly, SameSite=Strict,
// not the token), live events and API calls through the cookie, CSRF on the page's writes,
// logout. ADMIN_TOKEN is the gateway's token.
import { BASE, launch, newContext, check, step, until, api, send, finish, main } from './lib.mjs';

const TOKEN = process.env.ADMIN_TOKEN;

main(async () => {
  const browser = await launch();
  const context = await newContext(browser);
  const page = await context.newPage();
  const session = async () => (await context.cookies()).find((c) => c.name === 'ccmesh_session');

  await step('a page sends the visitor to the login', async () => {
    await page.goto(BASE + '/settings');
    check(page.url() === `${BASE}/login?next=%2Fsettings`, `at ${page.url()}`);
    await page.waitForSelector('input#token[type="password"]');
    check(!(await session()), 'no session yet');
  });

  await step('a wrong token is refused', async () => {
    await page.fill('#token', 'not-the-token');
    await page.click('#login');
    await page.waitForSelector('#login-error');
    check(!(await session()), 'still no session');
  });

  await step('log in: a signed HttpOnly cookie, never the token', async () => {
    await page.fill('#token', TOKEN);
    await page.click('#login');
    await page.waitForURL(`${BASE}/settings`);
    const c = await session();
    check(c, 'a session cookie');
    check(c.httpOnly && c.sameSite === 'Strict' && c.path === '/', `cookie flags: ${JSON.stringify(c)}`);
    check(!c.value.includes(TOKEN), 'the cookie is not the token');
    check(c.expires > Date.now() / 1000 + 11 * 3600 && c.expires < Date.now() / 1000 + 13 * 3600, 'expires in 12 h');
    check(!(await page.evaluate(() => document.cookie)).includes('ccmesh_session'), 'scripts cannot read it');
    check(!(await page.content()).includes(TOKEN), 'the token is not in the page');
  });

  await step('live events and reads through the cookie', async () => {
    await page.goto(BASE + '/');
    await page.waitForSelector('#live-status.on');
    const r = await send('/v1/messages', { model: 'claude-sonnet-4-5', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
    check(r.status === 200, `request ${r.status}`);
    await page.waitForSelector(`#feed tr[data-id="${r.id}"]`);
    await page.waitForSelector('#health-grid li[data-name="alpha"] .badge[data-state="healthy"]');
  });

  await step('writes from the page carry the CSRF token; without it they are refused', async () => {
    await page.goto(BASE + '/endpoints');
    await page.click('#add-endpoint');
    await page.fill('#ep-name', 'from-the-page');
    await page.selectOption('#ep-format', 'openai');
    await page.fill('#ep-base_url', 'http://127.0.0.1:9');
    await page.click('#ep-save');
    await page.waitForSelector('tr[data-name="from-the-page"]');
    const statuses = await page.evaluate(async () => {
      const patch = (headers) => fetch('/api/settings', { method: 'PATCH', headers: { 'content-type': 'application/json', ...headers }, body: '{"retention_days": 30}' }).then((r) => r.status);
      const csrf = document.querySelector('meta[name="ccmesh-csrf"]').content;
      return { without: await patch({}), wrong: await patch({ 'x-ccmesh-csrf': 'x'.repeat(64) }), with: await patch({ 'x-ccmesh-csrf': csrf }) };
    });
    check(statuses.without === 403 && statuses.wrong === 403 && statuses.with === 200, `statuses ${JSON.stringify(statuses)}`);
    check((await api('GET', '/api/endpoints', undefined, TOKEN)).body.some((e) => e.name === 'from-the-page'), 'saved');
  });

  await step('log out', async () => {
    await page.click('#logout');
    await page.waitForURL(`${BASE}/login`);
    check(!(await session()), 'the cookie is gone');
    await page.goto(BASE + '/endpoints');
    check(page.url().startsWith(`${BASE}/login`), `back at the login: ${page.url()}`);
    const status = await page.evaluate(() => fetch('/api/health').then((r) => r.status));
    check(status === 401, `the API refuses: ${status}`);
  });

  await finish(browser);
});
