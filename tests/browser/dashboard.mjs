// The dashboard in a real headless Chromium, driven by playwright-core:
//   node tests/browser/dashboard.mjs URL TOKEN MACHINE ARTIFACT_DIR
// MACHINE must be running.  Prints one line per check, "PASS|what" or
// "FAIL|what|why", then "SCREENSHOT|path" lines and "DONE" at the end
// (tests/integration/t610-dashboard.sh turns them into TAP).
import { readFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { launch, fail, check, step } from './lib.mjs';

const [url, token, machine, artifacts] = process.argv.slice(2);
const money = (s) => parseFloat(s);

mkdirSync(artifacts, { recursive: true });
const browser = await launch();
const pageErrors = [];
try {
  const ctx = await browser.newContext({ acceptDownloads: true,
    viewport: { width: 1200, height: 800 } });
  const page = await ctx.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(m.text()); });
  page.setDefaultTimeout(20000);
  const card = `[data-machine="${machine}"]`;

  await page.goto(url);
  await step('the login form shows', () => page.waitForSelector('#login-form input#token'));

  // A bad token is refused, and the page stays on the login form.
  await page.fill('#token', 'berth_' + '0'.repeat(64));
  await page.click('#login-form button[type=submit]');
  await step('a bad token is refused', async () => {
    await page.waitForSelector('#login-error:not([hidden])');
    const msg = await page.textContent('#login-error');
    if (!/refused/.test(msg) || !/invalid or revoked/.test(msg)) throw new Error(msg);
  });
  check('with a bad token the machines stay hidden', await page.isHidden('#dash'), 'dash shown');
  check('a bad token is not kept', await page.evaluate(() =>
    sessionStorage.getItem('berth-token')) === null, 'kept in sessionStorage');

  // The real token: the machine, its state and its cost.
  await page.fill('#token', token);
  await page.click('#login-form button[type=submit]');
  await step('logging in with the token shows the machine', () => page.waitForSelector(card));
  check('the token is kept in sessionStorage', await page.evaluate(() =>
    sessionStorage.getItem('berth-token')) === token, 'not kept');
  check('the machine is running', (await page.textContent(`${card} .state`)) === 'running',
    await page.textContent(`${card} .state`));
  const eg = await page.textContent(`${card} .egress`);
  check('its egress policy shows (the default: open)', eg === 'egress: open (default)', eg);
  const evl = await page.textContent(`${card} .event`);
  check(`its last event shows with its cause (${evl})`,
    /^(started|woke) [0-9]+ (s|min) ago: [A-Z]+ \/v1\/machines/.test(evl), evl);
  const c1 = money(await page.textContent(`${card} .counter`));
  const t1 = money(await page.textContent('#total'));
  await page.waitForTimeout(2500);
  const c2 = money(await page.textContent(`${card} .counter`));
  const t2 = money(await page.textContent('#total'));
  check(`the cost counter advances (${c1} -> ${c2} in 2.5 s)`, c2 > c1 && c1 >= 0,
    `${c1} then ${c2}`);
  check(`the total spend advances (${t1} -> ${t2})`, t2 > t1, `${t1} then ${t2}`);
  check('the usage chart is an SVG with a bar per machine and the total',
    await page.locator('#chart svg g').count() >= 2 &&
    (await page.textContent('#chart svg')).includes('Total'), 'no chart');
  const hours = await page.$$eval('#hours svg rect', (rs) => rs.map((r) => +r.dataset.nano));
  check(`the total chart has 24 hourly bars, this hour's not empty (${hours.slice(-1)})`,
    hours.length === 24 && hours[23] > 0, JSON.stringify(hours));
  const spark = await page.$$eval(`${card} svg.spark rect`, (rs) => rs.map((r) => +r.dataset.nano));
  check(`the machine's own chart has 24 hourly bars, this hour's not empty (${spark.slice(-1)})`,
    spark.length === 24 && spark[23] > 0, JSON.stringify(spark));

  // An API error is shown: fork onto an existing name, the desktop.
  page.once('dialog', (d) => d.accept(machine));
  await page.click(`${card} button[data-action=fork]`);
  await step('an API error is shown (fork onto an existing name)', async () => {
    await page.waitForSelector('#error:not([hidden])');
    const msg = await page.textContent('#error-text');
    if (!/exist/i.test(msg)) throw new Error('error says: ' + msg);
  });
  await page.click('#error-close');
  // The desktop: a tab opens at the click; it goes to the API's URL, or
  // closes and the API's error shows.
  const popupP = ctx.waitForEvent('page', { timeout: 10000 }).catch(() => null);
  const asked = [];
  const onReq = (r) => asked.push(r.url());
  ctx.on('request', onReq);
  await page.click(`${card} button[data-action=desktop]`);
  const popup = await popupP;
  let desk = null;
  for (let i = 0; i < 100 && !desk; i++) {
    if (await page.isVisible('#error')) desk = 'error: ' + await page.textContent('#error-text');
    else if (popup && !popup.isClosed() && popup.url() !== 'about:blank') desk = 'opened ' + popup.url();
    else await page.waitForTimeout(200);
  }
  check(`the desktop action answers (${desk})`, desk && (desk.startsWith('opened') ||
    (desk.length > 7 && popup && popup.isClosed())), desk || 'nothing happened');
  // The tab went to the one-time URL hostd minted (desktop_url/OWNER/NAME/,
  // the token in the fragment, which a request does not carry).
  ctx.off('request', onReq);
  const went = asked.find((u) => /^http:\/\/127\.0\.0\.1:6080\/[a-z0-9-]+\/[a-z0-9-]+\/$/.test(u));
  check(`the desktop tab goes to the machine's desktop URL (${went})`, !!went,
    'requests: ' + asked.join(' '));
  if (popup && !popup.isClosed()) await popup.close();
  if (await page.isVisible('#error')) await page.click('#error-close');

  // Stop: the state changes.
  await page.click(`${card} button[data-action=stop]`);
  await step('clicking stop shows the machine stopping', () =>
    page.waitForFunction((sel) => {
      const s = document.querySelector(sel + ' .state');
      return s && /stopping|stopped/.test(s.textContent);
    }, card, { timeout: 5000 }));
  await step('then stopped', () =>
    page.waitForSelector(`${card}[data-state="stopped"]`, { timeout: 60000 }));
  check('a stopped machine offers start', await page.locator(
    `${card} button[data-action=start]`).count() === 1, 'no start button');

  // CSV download.
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('#csv')]);
  const csv = readFileSync(await dl.path(), 'utf8');
  const lines = csv.trim().split('\n');
  check('the CSV has the header of berth usage --csv', lines[0] ===
    'machine_id,owner,name,deleted,running_s,storage_gib_s,compute,storage,total,currency',
    lines[0]);
  const row = lines.find((l) => l.split(',')[2] === machine);
  check('the CSV has the machine with its running seconds and cost', row &&
    /^[0-9a-f-]{36},[^,]+,[a-z0-9-]+,false,[1-9][0-9]*,[0-9]+,[0-9.]+,[0-9.]+,[0-9.]+,[A-Z]+$/
      .test(row), row);
  check(`the CSV is named berth-usage-DATE.csv (${dl.suggestedFilename()})`,
    /^berth-usage-\d{4}-\d\d-\d\d\.csv$/.test(dl.suggestedFilename()), dl.suggestedFilename());

  // Checkpoint, fork and delete from the page (no boot needed), then a
  // machine made with the form, and deleted.
  const apiGet = (path) => page.evaluate(async ([p, t]) => {
    const r = await fetch(p, { headers: { Authorization: 'Bearer ' + t } });
    return r.json();
  }, [path, token]);
  page.once('dialog', (d) => d.accept('c1'));
  await page.click(`${card} button[data-action=checkpoint]`);
  await step('checkpoint from the page: the API has c1', async () => {
    for (let i = 0; i < 50; i++) {
      const r = await apiGet(`/v1/machines/${machine}/checkpoints`);
      if ((r.checkpoints || []).some((c) => c.name === 'c1')) return;
      await page.waitForTimeout(200);
    }
    throw new Error('no checkpoint c1');
  });
  await page.waitForSelector(`${card}:not(.busy)`);
  page.once('dialog', (d) => d.accept(`${machine}-fork`));
  await page.click(`${card} button[data-action=fork]`);
  await step('fork from the page: the new machine shows', () =>
    page.waitForSelector(`[data-machine="${machine}-fork"]`, { timeout: 30000 }));
  page.once('dialog', (d) => d.accept());
  await page.click(`[data-machine="${machine}-fork"] button[data-action=delete]`);
  await step('delete from the page (after confirming): the fork is gone', () =>
    page.waitForSelector(`[data-machine="${machine}-fork"]`, { state: 'detached',
      timeout: 30000 }));
  await page.click('#create summary');
  await page.fill('#create-form input[name=name]', 'web1');
  await page.selectOption('#create-form select[name=memory]', '256M');
  await page.click('#create-form button[type=submit]');
  await step('create from the form: web1 shows, running', () =>
    page.waitForSelector('[data-machine="web1"][data-state="running"]', { timeout: 60000 }));
  page.once('dialog', (d) => d.accept());
  await page.click('[data-machine="web1"] button[data-action=delete]');
  await step('and deleted from the page', () =>
    page.waitForSelector('[data-machine="web1"]', { state: 'detached', timeout: 60000 }));
  await page.fill('#create-form input[name=name]', 'web1');
  await page.fill('#create-form input[name=vcpus]', '3');  // the test's max_vcpus is 2
  await page.click('#create-form button[type=submit]');
  await step('a refused create shows the API\'s error', async () => {
    await page.waitForSelector('#error:not([hidden])');
    const msg = await page.textContent('#error-text');
    if (!/vcpus|vCPU/i.test(msg)) throw new Error('error says: ' + msg);
  });
  await page.click('#error-close');
  await page.click('#create summary');

  // Phone width.
  await page.setViewportSize({ width: 375, height: 740 });
  await page.waitForTimeout(300);
  const overflow = await page.evaluate(() =>
    [document.documentElement.scrollWidth, window.innerWidth]);
  check(`at 375 px nothing overflows horizontally (${overflow[0]} <= ${overflow[1]})`,
    overflow[0] <= overflow[1], overflow.join(' > '));
  // (null while a refresh replaces the cards: asked again then)
  let box = null;
  for (let i = 0; i < 20 && !box; i++) {
    box = await page.locator(card).boundingBox();
    if (!box) await page.waitForTimeout(100);
  }
  check('at 375 px the machine card fits the width', box && box.x >= 0 &&
    box.x + box.width <= 375, JSON.stringify(box));
  const shot = join(artifacts, 't610-dashboard-phone.png');
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`SCREENSHOT|${shot}`);
  await page.setViewportSize({ width: 1200, height: 800 });
  const shot2 = join(artifacts, 't610-dashboard.png');
  await page.screenshot({ path: shot2, fullPage: true });
  console.log(`SCREENSHOT|${shot2}`);

  // Log out: the token is forgotten.
  await page.click('#logout');
  check('logging out forgets the token', await page.evaluate(() =>
    sessionStorage.getItem('berth-token')) === null &&
    await page.isVisible('#login-form'), 'still logged in');
  check('no script errors in the page', pageErrors.filter((e) =>
    !/status of [45][0-9][0-9]/.test(e)).length === 0, pageErrors.join(' | '));
} catch (e) {
  fail('the browser run', e.stack || e.message);
} finally {
  await browser.close();
}
console.log('DONE');
