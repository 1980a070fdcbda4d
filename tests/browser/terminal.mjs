// The dashboard's terminal in a real headless Chromium, driven by
// playwright-core:
//   node tests/browser/terminal.mjs URL TOKEN MACHINE ARTIFACT_DIR -- SUSPEND_CMD...
// MACHINE must be running; SUSPEND_CMD (an argv, run without a shell)
// suspends it.  Types commands into the page's terminal and reads their
// output from the page, resizes the window and checks the shell's `stty
// size`, copies and pastes, suspends the machine and reconnects.  Prints
// one line per check, "PASS|what" or "FAIL|what|why", "SCREENSHOT|path"
// lines and "DONE" at the end (tests/integration/t460-terminal.sh turns
// them into TAP).
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { launch, pass, fail, check, step } from './lib.mjs';

const argv = process.argv.slice(2);
const [url, token, machine, artifacts] = argv;
const suspendCmd = argv.slice(argv.indexOf('--') + 1);

mkdirSync(artifacts, { recursive: true });
const browser = await launch();
const pageErrors = [];
try {
  const ctx = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: url });
  const page = await ctx.newPage();
  page.on('pageerror', (e) => pageErrors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(m.text()); });
  page.setDefaultTimeout(20000);
  const card = `[data-machine="${machine}"]`;
  const loaded = [];
  page.on('response', (r) => { if (r.url().includes('/xterm/')) loaded.push(new URL(r.url()).pathname + ' ' + r.status()); });

  // The screen's text, row by row (xterm's DOM renderer puts each row in a
  // div; spaces may be no-break spaces).
  const screen = () => page.$$eval('#term .xterm-rows > div', (ds) =>
    ds.map((d) => d.textContent.replace(/\u00a0/g, ' ').replace(/\s+$/, '')).join('\n'));
  // Waits until the screen matches RE; its text.
  async function waitScreen(re, ms = 20000) {
    let text = '';
    for (const t0 = Date.now(); Date.now() - t0 < ms;) {
      text = await screen();
      if (re.test(text)) return text;
      await page.waitForTimeout(100);
    }
    throw new Error(`the screen does not match ${re}: ${JSON.stringify(text.slice(-300))}`);
  }
  const termState = (st, ms = 30000) => page.waitForSelector(`#term[data-state="${st}"]`,
    { timeout: ms });
  // A line typed into the terminal, as keys.
  const typeLine = async (line) => { await page.keyboard.type(line); await page.keyboard.press('Enter'); };

  await page.goto(url);
  await page.fill('#token', token);
  await page.click('#login-form button[type=submit]');
  await step('logging in shows the machine', () => page.waitForSelector(card));
  check('a running machine offers a terminal', await page.locator(
    `${card} button[data-action=terminal]`).count() === 1, 'no terminal button');
  check('xterm.js is not loaded before a terminal opens', loaded.length === 0, loaded.join(' '));

  await page.click(`${card} button[data-action=terminal]`);
  await step('the terminal opens and connects', () => termState('connected'));
  check(`it loads xterm.js, its fit addon and its CSS from /xterm/ (${loaded.join(', ')})`,
    ['/xterm/xterm/lib/xterm.js 200', '/xterm/addon-fit/lib/addon-fit.js 200',
      '/xterm/xterm/css/xterm.css 200'].every((f) => loaded.includes(f)), loaded.join(' '));
  check('the terminal fills the window', await page.evaluate(() => {
    const r = document.querySelector('#term').getBoundingClientRect();
    return r.width === window.innerWidth && r.height === window.innerHeight;
  }), 'not the whole window');

  // A command typed; its output read from the page.
  await typeLine('echo hello-$((6*7))');
  await step('a typed command runs: its output is on the page', () => waitScreen(/^hello-42$/m));

  // Colours, under the page's Content-Security-Policy (xterm's styles go
  // through CSSOM): a palette colour (a class) and a 24-bit one (a style).
  await typeLine("printf '\\033[31mred-%s\\033[0m \\033[38;2;255;128;0mrgb-%s\\033[0m\\n' 1 2");
  await waitScreen(/^red-1 rgb-2$/m);
  const colours = await page.evaluate(() => {
    const spans = [...document.querySelectorAll('#term .xterm-rows span')];
    const of = (t) => { const s = spans.find((x) => x.textContent.includes(t)); return s ? getComputedStyle(s).color : 'none'; };
    return [of('red-1'), of('rgb-2')];
  });
  check(`colours show: a palette red and a 24-bit orange (${colours.join(', ')})`,
    /^rgb\((2[0-9][0-9]|1[5-9][0-9]), [0-9]{1,2}, [0-9]{1,2}\)$/.test(colours[0]) &&
    colours[1] === 'rgb(255, 128, 0)', colours.join(', '));

  // The size: the shell's terminal is the page's.
  const size = async () => page.evaluate(() => {
    const t = document.querySelector('#term').dataset;
    return [Number(t.rows), Number(t.cols)];
  });
  const [r1, c1] = await size();
  await typeLine('stty size');
  await step(`stty size is the page's terminal: ${r1} ${c1}`, () =>
    waitScreen(new RegExp(`^${r1} ${c1}$`, 'm')));
  await page.setViewportSize({ width: 700, height: 420 });
  await step('a smaller window makes a smaller terminal', () => page.waitForFunction(
    ([r, c]) => {
      const t = document.querySelector('#term').dataset;
      return Number(t.rows) < r && Number(t.cols) < c;
    }, [r1, c1], { timeout: 10000 }));
  const [r2, c2] = await size();
  await typeLine('clear; stty size');
  await step(`stty size follows the window: ${r2} ${c2} (was ${r1} ${c1})`, () =>
    waitScreen(new RegExp(`^${r2} ${c2}$`, 'm')));
  await page.setViewportSize({ width: 1200, height: 800 });
  await page.waitForFunction((c) => Number(document.querySelector('#term').dataset.cols) > c,
    c2, { timeout: 10000 }).catch(() => {});
  const [r3, c3] = await size();
  await typeLine('clear; stty size');
  await step(`and back: ${r3} ${c3}`, () => waitScreen(new RegExp(`^${r3} ${c3}$`, 'm')));

  // Copy: a line selected with the mouse (a triple click), Ctrl+Shift+C.
  await typeLine('clear; echo copy-$((40+2))-me');
  await waitScreen(/^copy-42-me$/m);
  const row = page.locator('#term .xterm-rows > div', { hasText: /^copy-42-me\s*$/ }).first();
  const box = await row.boundingBox();  // (rows take no pointer events: the screen does)
  await page.mouse.click(box.x + 20, box.y + box.height / 2, { clickCount: 3 });
  await page.keyboard.press('Control+Shift+C');
  let copied = '';
  for (let i = 0; i < 20 && !/copy-42-me/.test(copied); i++) {
    copied = await page.evaluate(() => navigator.clipboard.readText()).catch((e) => e.message);
    await page.waitForTimeout(100);
  }
  check(`a selection copies with Ctrl+Shift+C (${JSON.stringify(copied.trim())})`,
    copied.trim() === 'copy-42-me', JSON.stringify(copied));

  // Paste: Ctrl+Shift+V (the browser's paste event), and a paste event as a
  // menu's Paste makes it.
  await page.evaluate(() => navigator.clipboard.writeText('echo pasted-$((3+4))'));
  await page.locator('#term .xterm-helper-textarea').focus();
  await page.keyboard.press('Control+Shift+V');
  await page.keyboard.press('Enter');
  const viaKeys = await waitScreen(/^pasted-7$/m, 5000).then(() => true, () => false);
  if (viaKeys) {
    pass('Ctrl+Shift+V pastes the clipboard into the shell');
  } else {
    // Headless Chromium does not paste on a key press of its own: the
    // paste event is what a real one (or the menu's Paste) sends.
    await page.evaluate(() => {
      const dt = new DataTransfer();
      dt.setData('text/plain', 'echo pasted-$((3+4))\r');
      document.querySelector('#term .xterm-helper-textarea').dispatchEvent(
        new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true }));
    });
    await step('the browser\'s paste event goes to the shell as typed (headless Chromium '
      + 'does not paste on Ctrl+Shift+V)', () => waitScreen(/^pasted-7$/m));
  }
  const shot = join(artifacts, 't460-terminal.png');
  await page.screenshot({ path: shot });
  console.log(`SCREENSHOT|${shot}`);

  // Ctrl+C is the terminal's: it interrupts.
  await typeLine('sleep 100');
  await page.waitForTimeout(500);
  await page.keyboard.press('Control+C');
  await typeLine('echo after-$((1+1))-int');
  await step('Ctrl+C interrupts a command in the shell', () => waitScreen(/^after-2-int$/m, 10000));

  // Suspended: the page says so and offers to reconnect, which wakes it
  // with a new shell.
  execFileSync(suspendCmd[0], suspendCmd.slice(1), { stdio: 'ignore' });
  await step('after berth suspend the page offers to reconnect', async () => {
    await termState('asleep', 15000);
    await page.waitForSelector('#term-reconnect:not([hidden])');
  });
  check(`  saying why (${await page.textContent('#term-status')})`,
    /suspended/.test(await page.textContent('#term-status')), await page.textContent('#term-status'));
  await page.click('#term-reconnect');
  await step('reconnecting wakes the machine and gives a shell', () => termState('connected', 60000));
  check(`  saying it woke it (${await page.textContent('#term-status')})`,
    /woke in [0-9.]+ s/.test(await page.textContent('#term-status')),
    await page.textContent('#term-status'));
  await typeLine('echo back-$((5+5))');
  await step('the new shell works', () => waitScreen(/^back-10$/m));
  await step('the machine shows running again', () =>
    page.waitForSelector(`${card}[data-state="running"]`, { timeout: 15000 }));

  // The shell's end: exit, then a reconnect.
  await typeLine('exit 3');
  await step('exit ends the shell; the page says how and offers to reconnect', async () => {
    await termState('ended', 15000);
    const s = await page.textContent('#term-status');
    if (!/exit 3/.test(s)) throw new Error(s);
  });
  await page.click('#term-reconnect');
  await termState('connected');
  await typeLine('echo again-$((2*3))');
  await step('a reconnect after an exit gives a shell again', () => waitScreen(/^again-6$/m));

  // Closing the terminal ends its shell.
  const execs = () => page.evaluate(async ([m, t]) => {
    const r = await fetch(`/v1/machines/${m}/exec`, { headers: { Authorization: 'Bearer ' + t } });
    return (await r.json()).execs.length;
  }, [machine, token]);
  check('the shell is a command through hostd while it runs', await execs() === 1,
    'execs: ' + await execs());
  await page.click('#term-close');
  check('Close hides the terminal', await page.isHidden('#term'), 'still shown');
  await step('and ends the shell (hostd lists no command)', async () => {
    for (let i = 0; i < 100; i++) {
      if (await execs() === 0) return;
      await page.waitForTimeout(100);
    }
    throw new Error('still ' + await execs());
  });
  check('no script errors in the page (CSP included)', pageErrors.filter((e) =>
    !/status of [45][0-9][0-9]/.test(e)).length === 0, pageErrors.join(' | '));
} catch (e) {
  fail('the browser run', e.stack || e.message);
} finally {
  await browser.close();
}
console.log('DONE');
