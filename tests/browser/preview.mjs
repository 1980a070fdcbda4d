// Previews in a real headless Chromium, driven by playwright-core:
//   node tests/browser/preview.mjs PRIVATE_URL LINK PUBLIC_URL BERTH STATE MACHINE ARTIFACT_DIR
// PRIVATE_URL is a private preview of MACHINE (running, webserve on its
// port), LINK its one-time link, PUBLIC_URL a public preview of the same
// machine; BERTH and STATE run `berth suspend MACHINE` halfway.  Prints one
// line per check, "PASS|what" or "FAIL|what|why", then "SCREENSHOT|path"
// lines and "DONE" at the end (tests/integration/t480-previews.sh turns
// them into TAP).
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { launch, step, expect } from './lib.mjs';

const [privUrl, link, pubUrl, berth, state, machine, artifacts] = process.argv.slice(2);

mkdirSync(artifacts, { recursive: true });
const browser = await launch();
try {
  const ctx = await browser.newContext({ viewport: { width: 1000, height: 700 } });
  const page = await ctx.newPage();
  page.setDefaultTimeout(20000);
  const host = new URL(privUrl).hostname;

  await step('without the cookie the private preview is refused with a page saying how', async () => {
    const r = await page.goto(privUrl);
    const text = await page.textContent('body');
    expect(r.status() === 403, `status ${r.status()}`);
    expect(/private/.test(text) && new RegExp(`berth preview ${machine} \\d+`).test(text), text);
  });

  await step('the link lets the browser in and lands on /', async () => {
    await page.goto(link);
    expect(page.url() === privUrl, `at ${page.url()}`);
    await page.waitForSelector(`h1:has-text("hello from ${machine}")`);
  });

  await step('the cookie is the host\'s alone, HttpOnly, SameSite=Lax', async () => {
    const cs = (await ctx.cookies()).filter((c) => /berth_preview/.test(c.name));
    expect(cs.length === 1, `${cs.length} cookies`);
    const c = cs[0];
    expect(c.domain === host && c.httpOnly && c.sameSite === 'Lax' && c.path === '/',
      JSON.stringify(c));
  });

  await step('the page\'s script cannot read it', async () => {
    const dc = await page.evaluate(() => document.cookie);
    expect(!/berth_preview/.test(dc), dc);
  });

  await step('a WebSocket echo through the preview', async () => {
    const got = await page.evaluate(() => new Promise((resolve, reject) => {
      const ws = new WebSocket(location.origin.replace(/^http/, 'ws') + '/ws');
      ws.onopen = () => ws.send('ping from chromium');
      ws.onmessage = (e) => { resolve(e.data); ws.close(); };
      ws.onerror = () => reject(new Error('websocket error'));
      setTimeout(() => reject(new Error('no echo in 10 s')), 10000);
    }));
    expect(got === 'ping from chromium', got);
  });

  execFileSync(berth, ['--state', state, 'suspend', machine]);
  const t0 = Date.now();
  await step('a suspended machine: the browser gets the "waking…" page', async () => {
    const r = await page.goto(privUrl);
    const text = await page.textContent('body');
    expect(r.status() === 503 && /Waking/.test(text), `status ${r.status()}: ${text}`);
    await page.screenshot({ path: join(artifacts, 'preview-waking.png') });
    console.log(`SCREENSHOT|${join(artifacts, 'preview-waking.png')}`);
  });
  await step('then, reloading by itself, the page once the machine is up', async () => {
    await page.waitForSelector(`h1:has-text("hello from ${machine}")`, { timeout: 180000 });
    console.log(`INFO|woke and answered in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  });

  await step('a public preview needs nothing (a fresh browser context)', async () => {
    const other = await browser.newContext();
    const p2 = await other.newPage();
    const r = await p2.goto(pubUrl);
    const text = await p2.textContent('body');
    expect(r.status() === 200 && /busybox page/.test(text), `status ${r.status()}: ${text}`);
    await other.close();
  });
} finally {
  await browser.close();
}
console.log('DONE');
