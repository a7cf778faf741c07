// The Clients page and the add form's presets: connect Claude Code from the page (its state turns
// to "connected to this gateway"), disconnect it again (the report says the file was restored
// exactly), then add an endpoint from the DeepSeek preset with only a name and a key typed in.
import { BASE, launch, newContext, check, step, finish, main } from './lib.mjs';

main(async () => {
  const browser = await launch();
  const context = await newContext(browser);
  const page = await context.newPage();
  const state = (client) => page.$eval(`tr[data-client="${client}"] .badge`, (b) => b.dataset.state);

  await step('the page lists every client with its state', async () => {
    await page.goto(BASE + '/clients');
    await page.waitForSelector('tr[data-client="claude-code"] .badge');
    check(await state('claude-code') === 'not_configured', `claude-code: ${await state('claude-code')}`);
    check(await state('gemini-cli') === 'not_installed', `gemini-cli: ${await state('gemini-cli')}`);
    check(await page.isVisible('#clients-service'), 'the page says the gateway runs as no service');
  });

  await step('connect from the page', async () => {
    await page.click('tr[data-client="claude-code"] button[data-act="connect"]');
    await page.waitForSelector('tr[data-client="claude-code"] .badge[data-state="connected"]');
    const report = await page.textContent('#clients-report');
    check(report.includes('env.ANTHROPIC_BASE_URL') && report.includes('backup:'), `report: ${report}`);
    check(!report.includes('sk-ant-'), 'no key in the report');
  });

  await step('disconnect from the page', async () => {
    await page.click('tr[data-client="claude-code"] button[data-act="disconnect"]');
    await page.waitForSelector('tr[data-client="claude-code"] .badge[data-state="not_configured"]');
    const report = await page.textContent('#clients-report');
    check(report.includes('restored exactly'), `report: ${report}`);
  });

  await step('an endpoint from a preset: name and key typed, the rest filled in', async () => {
    await page.goto(BASE + '/endpoints');
    await page.click('#add-endpoint');
    await page.selectOption('#ep-preset', 'deepseek');
    check(await page.inputValue('#ep-base_url') === 'https://api.deepseek.com/anthropic', 'base URL filled');
    check(await page.inputValue('#ep-format') === 'anthropic', 'format filled');
    check((await page.inputValue('#ep-model_map')).includes('claude-*haiku* = deepseek-flash'), 'model map filled');
    await page.fill('#ep-name', 'ds-from-preset');
    await page.fill('#ep-api_key', 'sk-deepseek-from-the-page-01');
    await page.click('#ep-save');
    await page.waitForSelector('tr[data-name="ds-from-preset"]');
  });

  await finish(browser);
});
