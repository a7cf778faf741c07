// The dashboard's main flows in Chromium, against a gateway prepared by
// tests/it/dashboard/browser.rs: endpoints alpha and beta (anthropic, MOCK_ANTHROPIC) and flaky
// (openai, serves flaky-*; its mock fails four sends, then answers).
import { BASE, launch, newContext, check, step, until, api, send, finish, main } from './lib.mjs';

const MOCK = process.env.MOCK_ANTHROPIC;
const SECRET = 'sk-gamma-secret-1234567890';

const endpointsByName = async () => new Map((await api('GET', '/api/endpoints')).body.map((e) => [e.name, e]));
const orderNames = async () => (await api('GET', '/api/endpoints')).body.map((e) => e.name);
const fastNames = async () => (await api('GET', '/api/endpoints')).body.filter((e) => e.fast)
  .sort((a, b) => a.fast_sort_order - b.fast_sort_order).map((e) => e.name);
const badgeState = (page, name) => page.$eval(`#health-grid li[data-name="${name}"] .badge`, (b) => b.dataset.state).catch(() => null);
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

main(async () => {
  const browser = await launch();
  const context = await newContext(browser);
  const page = await context.newPage();

  await step('endpoints page lists the endpoints', async () => {
    await page.goto(BASE + '/endpoints');
    await page.waitForSelector('tr[data-name="alpha"]');
    await page.waitForSelector('tr[data-name="flaky"]');
    check((await page.title()).startsWith('Endpoints'), 'title');
  });

  await step('add an endpoint: a validation error at its field, then saved', async () => {
    await page.click('#add-endpoint');
    await page.fill('#ep-name', 'gamma');
    await page.selectOption('#ep-format', 'anthropic');
    await page.fill('#ep-base_url', 'ftp://example.com');
    await page.fill('#ep-api_key', SECRET);
    await page.fill('#ep-models', 'claude-*');
    await page.click('#ep-save');
    const error = page.locator('[data-error-for="base_url"]');
    await until('the base_url error', async () => (await error.textContent()).length > 0);
    const text = await error.textContent();
    check(text.startsWith('base_url') && text.includes('http'), `error at the field: ${text}`);
    check(await page.$eval('#ep-base_url', (i) => i.getAttribute('aria-invalid') === 'true'), 'the field is marked invalid');
    check(await page.$eval('#ep-dialog', (d) => d.open), 'the form stays open');
    check((await api('GET', '/api/endpoints/gamma')).status === 404, 'nothing was saved');
    await page.fill('#ep-base_url', MOCK);
    await page.click('#ep-save');
    await page.waitForSelector('tr[data-name="gamma"]');
    check(!(await page.$eval('#ep-dialog', (d) => d.open)), 'the form closed');
    const gamma = (await api('GET', '/api/endpoints/gamma')).body;
    check(gamma.api_key === 'sk-…7890', `masked key ${gamma.api_key}`);
    check(!(await page.content()).includes(SECRET), 'the key is not in the page');
  });

  await step('edit keeps the write-only key; clone and delete', async () => {
    await page.click('tr[data-name="gamma"] button:text-is("Edit")');
    check((await page.inputValue('#ep-api_key')) === '', 'the key field is empty when editing');
    check((await page.getAttribute('#ep-api_key', 'placeholder')).includes('sk-…7890'), 'the placeholder shows the masked key');
    await page.fill('#ep-test_model', 'claude-sonnet-4-5');
    await page.click('#ep-save');
    await until('the edit', async () => (await api('GET', '/api/endpoints/gamma')).body.test_model === 'claude-sonnet-4-5');
    check((await api('GET', '/api/endpoints/gamma')).body.api_key === 'sk-…7890', 'the key is unchanged');
    await page.click('tr[data-name="alpha"] button:text-is("Clone")');
    check((await page.inputValue('#ep-name')) === 'alpha-copy', 'clone proposes a new name');
    check((await page.inputValue('#ep-base_url')) === MOCK, 'clone copies the fields');
    await page.click('#ep-save');
    await page.waitForSelector('tr[data-name="alpha-copy"]');
    await page.click('tr[data-name="alpha-copy"] button:text-is("Delete")');
    await page.click('#confirm-yes');
    await until('the delete', async () => (await api('GET', '/api/endpoints/alpha-copy')).status === 404);
    await page.waitForSelector('tr[data-name="alpha-copy"]', { state: 'detached' });
  });

  await step('toggle an endpoint off and on', async () => {
    await page.click('tr[data-name="gamma"] .switch input');
    await until('gamma disabled', async () => (await api('GET', '/api/endpoints/gamma')).body.enabled === false);
    await page.click('tr[data-name="gamma"] .switch input');
    await until('gamma enabled', async () => (await api('GET', '/api/endpoints/gamma')).body.enabled === true);
    // Two toggles in quick succession: the switch waits for the first answer (held back here),
    // so the server ends in the state of the last click; two changes in flight at once could
    // reach it in either order.
    const gammaSwitch = 'tr[data-name="gamma"] .switch input';
    let release;
    const held = new Promise((resolve) => { release = resolve; });
    await page.route('**/api/endpoints/gamma', async (route) => {
      if (route.request().method() === 'PATCH') await held;
      await route.continue();
    });
    await page.click(gammaSwitch);
    await until('the switch waits for its answer', async () => await page.isDisabled(gammaSwitch));
    release();
    await page.click(gammaSwitch);
    await until('gamma enabled after two quick toggles', async () =>
      (await api('GET', '/api/endpoints/gamma')).body.enabled === true
      && await page.isChecked(gammaSwitch) && await page.isEnabled(gammaSwitch));
    await page.unroute('**/api/endpoints/gamma');
  });

  await step('drag endpoints into the fast queue and reorder it', async () => {
    const before = (await endpointsByName()).get('gamma');
    check(before.fast === false, 'gamma starts outside the fast queue');
    await page.dragAndDrop('tr[data-name="gamma"] .handle', '#fast-empty');
    await until('gamma in the fast queue', async () => same(await fastNames(), ['gamma']));
    let eps = await endpointsByName();
    check(eps.get('gamma').fast === true && eps.get('gamma').fast_sort_order === 0, 'gamma fast, first');
    await page.waitForSelector('#fast-queue li[data-name="gamma"]');
    // alpha dropped on gamma's left half goes before it.
    await page.dragAndDrop('tr[data-name="alpha"] .handle', '#fast-queue li[data-name="gamma"]', { targetPosition: { x: 4, y: 8 } });
    await until('alpha before gamma', async () => same(await fastNames(), ['alpha', 'gamma']));
    eps = await endpointsByName();
    check(eps.get('alpha').fast_sort_order === 0 && eps.get('gamma').fast_sort_order === 1, 'fast_sort_order changed');
    await page.waitForSelector('#fast-queue li[data-name="alpha"]');
    // Dragging within the queue: gamma back to the front.
    await page.dragAndDrop('#fast-queue li[data-name="gamma"] .handle', '#fast-queue li[data-name="alpha"]', { targetPosition: { x: 4, y: 8 } });
    await until('gamma first again', async () => same(await fastNames(), ['gamma', 'alpha']));
  });

  await step('reorder by keyboard: the global order and the fast queue', async () => {
    // Global order by drag first: gamma to the top.
    await page.dragAndDrop('tr[data-name="gamma"] .handle', 'tr[data-name="alpha"]', { targetPosition: { x: 60, y: 3 } });
    await until('gamma at the top', async () => (await orderNames())[0] === 'gamma');
    const start = await orderNames();
    const i = start.indexOf('beta');
    await page.focus('tr[data-name="beta"] .handle');
    await page.keyboard.press('ArrowUp');
    await until('beta one up', async () => (await orderNames()).indexOf('beta') === i - 1);
    check(await page.evaluate(() => document.activeElement?.dataset.focus === 'order:beta'), 'focus stays on the moved handle');
    await page.keyboard.press('f');
    await until('beta joins the fast queue', async () => same(await fastNames(), ['gamma', 'alpha', 'beta']));
    await page.focus('#fast-queue li[data-name="beta"] .handle');
    await page.keyboard.press('ArrowLeft');
    await until('beta before alpha', async () => same(await fastNames(), ['gamma', 'beta', 'alpha']));
    const eps = await endpointsByName();
    check(eps.get('beta').fast_sort_order === 1 && eps.get('alpha').fast_sort_order === 2, 'positions saved');
    await page.keyboard.press('Delete');
    await until('beta removed', async () => same(await fastNames(), ['gamma', 'alpha']));
    await page.click('#fast-queue li[data-name="alpha"] button[aria-label^="Remove"]');
    await until('alpha removed', async () => same(await fastNames(), ['gamma']));
    await page.click('#fast-queue li[data-name="gamma"] button[aria-label^="Remove"]');
    await until('the fast queue is empty', async () => (await fastNames()).length === 0);
    await page.waitForSelector('#fast-empty', { state: 'visible' });
  });

  await step('a list fetched before a change and answered after it does not undo the change', async () => {
    // The page's next list request is fetched from the server at once, so before the change
    // below, and handed to the page only once the change's own answer has been drawn.
    let holding = false;
    let held = null;
    await page.route('**/api/endpoints', async (route) => {
      if (route.request().method() !== 'GET' || holding) { await route.continue(); return; }
      holding = true;
      held = { route, response: await route.fetch() };
    });
    // Another client's write: the page reloads its list, drags done above notwithstanding.
    check((await api('PATCH', '/api/endpoints/beta', { enabled: true })).status === 200, 'the other client\'s write');
    await until('the page reloading its list after another client\'s write', async () => held !== null);
    await page.evaluate(() => {
      const queue = document.querySelector('#fast-queue');
      const shown = () => !!queue.querySelector('li[data-name="beta"]');
      window.betaWasShown = false;
      window.betaLeftQueue = false;
      new MutationObserver(() => {
        if (shown()) window.betaWasShown = true;
        else if (window.betaWasShown) window.betaLeftQueue = true;
      }).observe(queue, { childList: true });
    });
    await page.focus('tr[data-name="beta"] .handle');
    await page.keyboard.press('f');
    // The page announces a save once its answer is drawn.
    await until('the save drawn', async () => (await page.textContent('#reorder-status')) === 'beta is now number 1 in the fast queue');
    check(same(await fastNames(), ['beta']), 'beta saved in the fast queue');
    let listsAfter = 0;
    const countLists = (request) => {
      if (request.method() === 'GET' && new URL(request.url()).pathname === '/api/endpoints') listsAfter += 1;
    };
    const stale = held.route.request();
    await held.route.fulfill({ response: held.response });
    await page.waitForEvent('requestfinished', { predicate: (r) => r === stale });
    page.on('requestfinished', countLists);
    // A list asked for after the stale one was delivered has been drawn by then too.
    await until('a fresh list', async () => {
      check(!(await page.evaluate(() => window.betaLeftQueue)), 'the stale list took beta out of the fast queue on the page');
      return listsAfter > 0 && await page.isVisible('#fast-queue li[data-name="beta"]');
    });
    page.off('requestfinished', countLists);
    await page.unroute('**/api/endpoints');
    check(!(await page.evaluate(() => window.betaLeftQueue)), 'beta stayed in the fast queue on the page');
    await page.click('#fast-queue li[data-name="beta"] button[aria-label^="Remove"]');
    await until('the fast queue is empty again', async () => (await fastNames()).length === 0);
    await page.waitForSelector('#fast-empty', { state: 'visible' });
  });

  await step('connectivity test, breaker reset, make current', async () => {
    await page.click('tr[data-name="alpha"] button:text-is("Test")');
    // The page says what the test found (and the API stored it).
    await until('the test result on the page', async () => (await page.$$eval('.toast', (ts) => ts.map((t) => t.textContent))).some((t) => t.startsWith('alpha: available')));
    check((await api('GET', '/api/endpoints/alpha')).body.test_status === 'available', 'test stored');
    await page.click('tr[data-name="alpha"] button:text-is("Reset")');
    await page.waitForSelector('.toast:has-text("alpha: breaker reset")');
    await page.click('tr[data-name="beta"] button:text-is("Make current")');
    await until('beta current for claude', async () => (await api('GET', '/api/current')).body.claude === 'beta');
    await page.waitForSelector('tr[data-name="beta"] .tag.current');
  });

  await step('settings: a refused value at its field, then applied', async () => {
    await page.goto(BASE + '/settings');
    await page.fill('input[name="breaker.claude.failure_threshold"]', '99');
    await page.click('#settings-save');
    const err = page.locator('[data-error-for="breaker.claude.failure_threshold"]');
    await until('the range error', async () => (await err.textContent()).includes('between 1 and 20'));
    check((await api('GET', '/api/settings')).body.breaker.claude.failure_threshold === 8, 'not saved');
    await page.fill('input[name="breaker.claude.failure_threshold"]', '8');
    await page.fill('input[name="breaker.openai.timeout_secs"]', '2');
    await page.fill('input[name="breaker.openai.success_threshold"]', '1');
    await page.click('#settings-save');
    await until('saved', async () => (await page.textContent('#settings-status')).startsWith('Saved 2 changes'));
    const s = (await api('GET', '/api/settings')).body;
    check(s.breaker.openai.timeout_secs === 2 && s.breaker.openai.success_threshold === 1, `applied: ${JSON.stringify(s.breaker.openai)}`);
    // Retry rules are edited as JSON: a bad rule is refused at the field, a good one applied
    // with the failover switches.
    await page.fill('textarea[name="retry_rules"]', '[{"status": 400, "action": "sideways"}]');
    await page.click('#settings-save');
    const rulesErr = page.locator('[data-error-for="retry_rules"]');
    await until('the rule error', async () => (await rulesErr.textContent()).includes('action'));
    const rule = { status: 400, body: 'model busy', action: 'next', breaker: 'neutral' };
    await page.fill('textarea[name="retry_rules"]', JSON.stringify([rule]));
    await page.uncheck('input[name="stream_resume"]');
    await page.uncheck('input[name="failover_enabled.responses"]');
    await page.click('#settings-save');
    await until('rules saved', async () => (await page.textContent('#settings-status')).startsWith('Saved 3 changes'));
    const r = (await api('GET', '/api/settings')).body;
    const saved = r.retry_rules;
    check(saved.length === 1 && Object.keys(rule).every((k) => saved[0][k] === rule[k]), `rules: ${JSON.stringify(saved)}`);
    check(r.stream_resume === false && r.failover_enabled.responses === false, `switches: ${JSON.stringify(r)}`);
    // Another client saves while this page is being edited, and the values the page fetches
    // for that save arrive only after the edit: the edit stays, and the next save sends it.
    let held = null;
    await page.route('**/api/settings', async (route) => {
      if (route.request().method() !== 'GET' || held) { await route.continue(); return; }
      held = { route, response: await route.fetch() };
    });
    check((await api('PATCH', '/api/settings', { breaker: { gemini: { success_threshold: 4 } } })).status === 200, 'the other client\'s save');
    await until('the page fetching the saved values', async () => held !== null);
    await page.fill('input[name="breaker.responses.failure_threshold"]', '7');
    await held.route.fulfill({ response: held.response });
    await until('the fetched values dealt with', async () => (await page.getAttribute('#settings-form', 'data-refreshing')) === '0');
    await page.unroute('**/api/settings');
    const kept = await page.inputValue('input[name="breaker.responses.failure_threshold"]');
    check(kept === '7', `the edit kept: ${kept}`);
    await page.click('#settings-save');
    await until('the edit saved', async () => (await page.textContent('#settings-status')).startsWith('Saved 1 change'));
    check((await api('GET', '/api/settings')).body.breaker.responses.failure_threshold === 7, 'the edit saved');
    await page.waitForSelector('#price-body tr');
  });

  let tripping = null;
  await step('live feed and a badge: degraded, open, healthy again (the server\'s badge)', async () => {
    await page.goto(BASE + '/');
    await page.waitForSelector('#live-status.on');
    await page.waitForSelector('#health-grid li[data-name="flaky"]');
    for (let i = 0; i < 2; i++) {
      const r = await send('/v1/messages', { model: 'claude-sonnet-4-5', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
      check(r.status === 200, `claude request ${r.status}`);
    }
    await until('two rows in the live feed', async () => (await page.$$('#feed tr')).length >= 2);
    const chat = { model: 'flaky-1', messages: [{ role: 'user', content: 'hi' }] };
    const first = await send('/v1/chat/completions', chat);
    check(first.status === 500, `first flaky request: ${first.status}`);
    await until('flaky degraded (yellow)', async () => (await badgeState(page, 'flaky')) === 'degraded');
    // The page shows what the API says: one rule for the dashboard and `ccmesh health`.
    const flakyHealth = (await api('GET', '/api/health')).body.find((e) => e.name === 'flaky');
    check(flakyHealth.badge === 'degraded', `the API's badge: ${flakyHealth.badge}`);
    check((await page.textContent('#health-grid li[data-name="flaky"] .badge')).includes('2 failures in a row'), 'says how many');
    tripping = await send('/v1/chat/completions', chat);
    check(tripping.status === 500, `second flaky request: ${tripping.status}`);
    await until('flaky open (red)', async () => (await badgeState(page, 'flaky')) === 'open');
    check((await page.textContent('#health-grid li[data-name="flaky"] .badge')).includes('broken'), 'says broken');
    await until('the failures in the feed', async () => (await page.$$('#feed tr .st.s5')).length >= 2);
    await page.waitForTimeout(2100); // the 2 s cooldown set above
    const third = await send('/v1/chat/completions', chat);
    check(third.status === 200, `probe request: ${third.status}`);
    await until('flaky healthy (green)', async () => (await badgeState(page, 'flaky')) === 'healthy');
    await until('five requests in the feed', async () => (await page.$$('#feed tr')).length >= 5);
    check((await page.textContent('#c-up')) === 'up', 'gateway up');
  });

  await step('open a decision trail from the feed', async () => {
    await page.click(`#feed tr[data-id="${tripping.id}"]`);
    await page.waitForURL(`**/requests/${tripping.id}`);
    await page.waitForSelector('#trail tbody tr');
    const rows = await page.$$eval('#trail tbody tr', (trs) => trs.map((tr) => ({ cls: tr.dataset.classification, text: tr.textContent })));
    check(rows.length === 2, `two attempts, got ${rows.length}`);
    check(rows.every((r) => r.cls === 'failure'), 'both failures');
    check(rows[1].text.includes('closed→open/broken (consecutive_failures)'), `the tripping transition: ${rows[1].text}`);
    check((await page.textContent('#error')).includes('the mock is down'), 'the upstream body');
    await page.waitForSelector('svg.timeline rect.bar.failure');
  });

  await step('requests page with filters', async () => {
    await page.goto(BASE + '/requests?status_class=5xx');
    await until('two 5xx rows', async () => (await page.$$('#req-body tr')).length === 2);
    const statuses = await page.$$eval('#req-body tr .st', (els) => els.map((e) => e.textContent));
    check(statuses.every((s) => s === '500'), `only 500s: ${statuses}`);
    await page.selectOption('#f-status_class', '');
    await page.selectOption('#f-endpoint', 'flaky');
    await page.click('#filters button[type="submit"]');
    await until('three flaky rows', async () => (await page.$$('#req-body tr')).length === 3);
    await page.fill('#f-status', '99');
    await page.click('#filters button[type="submit"]');
    await until('the status error', async () => (await page.textContent('#filters-error')).startsWith('status:'));
  });

  await step('statistics charts', async () => {
    await page.goto(BASE + '/stats');
    await page.waitForSelector('#ch-requests svg rect');
    await page.waitForSelector('#ch-latency svg path.line', { state: 'attached' });
    await page.waitForSelector('#ch-tokens-endpoint svg rect');
    check((await page.$$('#stat-cards .card')).length === 6, 'the totals');
  });

  const order = await orderNames();
  await finish(browser, { order });
});
