// The Keys page, against a gateway prepared by tests/it/dashboard/browser.rs (endpoint `a`,
// anthropic, serving claude-*): add a key through the form (a refusal shown at its field first),
// see its secret once, use it and watch its row count the request, edit, disable, rotate (the old
// secret stops working), delete. The secret never stays in the page.
import { BASE, launch, newContext, check, step, until, api, send, finish, main } from './lib.mjs';

const BODY = { model: 'claude-sonnet-4-5', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] };
const cell = (page, name, window) => page.$eval(`tr[data-name="${name}"] td[data-window="${window}"]`, (td) => td.textContent).catch(() => null);

main(async () => {
  const browser = await launch();
  const context = await newContext(browser);
  const page = await context.newPage();
  let secret;

  await step('the page says the proxy is open without keys', async () => {
    await page.goto(BASE + '/keys');
    await page.waitForSelector('#keys-empty:not([hidden])');
    check((await page.title()).startsWith('Keys'), 'title');
  });

  await step('add a key: a refusal at its field, then the secret once', async () => {
    await page.click('#add-key');
    await page.fill('#key-name', 'alice');
    await page.fill('#key-models', 'claude-*');
    await page.fill('#key-limits-rpm', '0');
    await page.fill('#key-limits-usd_per_day', '5');
    await page.click('#key-save');
    const error = page.locator('[data-error-for="limits.rpm"]');
    await until('the rpm error', async () => (await error.textContent()).length > 0);
    check((await error.textContent()).startsWith('limits.rpm: must be a whole number'), await error.textContent());
    check((await api('GET', '/api/keys/alice')).status === 404, 'nothing saved');
    await page.fill('#key-limits-rpm', '60');
    await page.click('#key-save');
    await page.waitForSelector('#secret-panel:not([hidden])');
    secret = await page.textContent('#secret-value');
    check(/^ccm-[0-9A-Za-z]{43}$/.test(secret), `secret ${secret}`);
    await page.waitForSelector('tr[data-name="alice"]');
    const row = await page.textContent('tr[data-name="alice"]');
    check(row.includes(secret.slice(0, 12)) && !row.includes(secret), `the row shows the prefix only: ${row}`);
    check((await api('GET', '/api/keys/alice')).body.limits.usd_per_day === 5, 'saved');
  });

  await step('the key works, and its row counts the request live', async () => {
    check((await send('/v1/messages', BODY)).status === 401, 'no key: refused');
    check((await send('/v1/messages', BODY, { 'x-api-key': secret })).status === 200, 'with the key');
    await until('the rpm cell', async () => (await cell(page, 'alice', 'rpm')) === '1 / 60');
    check((await cell(page, 'alice', 'usd_per_day')).includes('/ $5.0000'), await cell(page, 'alice', 'usd_per_day'));
  });

  await step('closing the panel drops the secret from the page', async () => {
    await page.click('#secret-done');
    check(!(await page.content()).includes(secret), 'gone after Done');
    await page.reload();
    await page.waitForSelector('tr[data-name="alice"]');
    check(!(await page.content()).includes(secret), 'not sent again');
  });

  await step('edit: disable, then enable again', async () => {
    await page.click('tr[data-name="alice"] button[data-act="edit"]');
    check(await page.isDisabled('#key-name'), 'the name cannot change');
    check((await page.inputValue('#key-limits-rpm')) === '60', 'the form shows the limits');
    await page.uncheck('#key-enabled');
    await page.fill('#key-limits-rpm', '');
    await page.click('#key-save');
    await page.waitForSelector('tr[data-name="alice"] .badge[data-state="disabled"]');
    const k = (await api('GET', '/api/keys/alice')).body;
    check(k.enabled === false && k.limits.rpm === null && k.limits.usd_per_day === 5, JSON.stringify(k));
    check((await send('/v1/messages', BODY, { 'x-api-key': secret })).status === 401, 'disabled: refused');
    await page.click('tr[data-name="alice"] button[data-act="edit"]');
    await page.check('#key-enabled');
    await page.click('#key-save');
    await page.waitForSelector('tr[data-name="alice"] .badge[data-state="enabled"]');
  });

  await step('rotate: a new secret, the old one refused', async () => {
    await page.click('tr[data-name="alice"] button[data-act="rotate"]');
    await page.click('#key-confirm-yes');
    await page.waitForSelector('#secret-panel:not([hidden])');
    const fresh = await page.textContent('#secret-value');
    check(fresh !== secret && fresh.startsWith('ccm-'), 'a new secret');
    check((await send('/v1/messages', BODY, { 'x-api-key': secret })).status === 401, 'the old one stopped');
    check((await send('/v1/messages', BODY, { 'x-api-key': fresh })).status === 200, 'the new one works');
    await page.click('#secret-done');
  });

  await step('delete', async () => {
    await page.click('tr[data-name="alice"] button[data-act="delete"]');
    await page.click('#key-confirm-yes');
    await page.waitForSelector('#keys-empty:not([hidden])');
    check((await api('GET', '/api/keys/alice')).status === 404, 'deleted');
  });

  await finish(browser);
});
