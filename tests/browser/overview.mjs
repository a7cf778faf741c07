// The overview opens with history and names where each protocol's next request starts, against
// a gateway prepared by tests/it/dashboard/browser.rs: endpoints alpha and beta (anthropic,
// claude-*) and wide (no model list), and three claude requests already served by alpha (its
// first candidate, so no failover ever set a "current" endpoint).
import { BASE, launch, newContext, check, step, until, api, send, finish, main } from './lib.mjs';

const feedIds = (page) => page.$$eval('#feed tr', (trs) => trs.map((tr) => tr.dataset.id));

main(async () => {
  const browser = await launch();
  const context = await newContext(browser);
  const page = await context.newPage();
  let history = [];
  let rows = 0;

  await step('the history is recorded', async () => {
    history = await until('three records', async () => {
      const r = (await api('GET', '/api/requests')).body.requests;
      return r.length >= 3 ? r.map((x) => x.id) : null;
    });
    check((await api('GET', '/api/current')).body.claude === null, 'no failover: nothing remembered');
  });

  await step('the feed opens with the last requests, newest first', async () => {
    await page.goto(BASE + '/');
    await page.waitForSelector('#live-status.on');
    await until('three rows', async () => (await feedIds(page)).length === 3);
    const ids = await feedIds(page);
    check(JSON.stringify(ids) === JSON.stringify(history), `the API's order: ${ids} vs ${history}`);
    check(await page.$eval('#feed-empty', (p) => p.hidden), 'no "waiting" text over a full feed');
    const first = await page.textContent('#feed tr:first-child');
    check(first.includes('alpha') && first.includes('claude-sonnet-4-5'), `a row: ${first}`);
  });

  await step('the current endpoint is named before any failover', async () => {
    await until('claude starts at alpha', async () => (await page.textContent('#current-claude')).trim() === 'alpha');
    check((await page.textContent('#current-openai')).trim() === 'alpha', 'openai too (every format serves every protocol)');
    check((await page.textContent('#current-responses')).trim() === 'alpha', 'responses too');
  });

  await step('live requests join the history without duplicates', async () => {
    const r = await send('/v1/messages', { model: 'claude-sonnet-4-5', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
    check(r.status === 200, `request ${r.status}`);
    await until('four rows', async () => (await feedIds(page)).length === 4);
    const ids = await feedIds(page);
    check(new Set(ids).size === ids.length, `no row twice: ${ids}`);
    check(ids[0] === r.id, `the new one first: ${ids[0]} vs ${r.id}`);
  });

  await step('a manual switch shows as the next start', async () => {
    const put = await api('PUT', '/api/current', { protocol: 'responses', endpoint: 'beta' });
    check(put.status === 200 && put.body.next.responses === 'beta', `PUT /api/current: ${JSON.stringify(put.body)}`);
    await until('responses starts at beta', async () => (await page.textContent('#current-responses')).trim() === 'beta');
    check((await page.textContent('#current-claude')).trim() === 'alpha', 'claude unchanged');
    rows = (await feedIds(page)).length;
  });

  await step('the endpoints page points out an endpoint that serves every model', async () => {
    await page.goto(BASE + '/endpoints');
    await page.waitForSelector('tr[data-name="wide"] [data-warn="every-model"]');
    check(!(await page.$('tr[data-name="alpha"] [data-warn]')), 'alpha lists its models');
    const title = await page.getAttribute('tr[data-name="wide"] [data-warn="every-model"]', 'title');
    check(title.includes('any model') && title.includes('Models'), `says why and what to do: ${title}`);
  });

  await finish(browser, { rows });
});
