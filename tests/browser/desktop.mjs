// Drives headless Chromium (playwright-core, Debian's /usr/bin/chromium)
// for tests/integration/t700-desktop.sh.  Reads one command a line on
// stdin, answers one line on stdout ("ok ..." or "fail ..."):
//   open ID URL [STATE]          a new page at URL; waits (45 s) until the
//                                page's state is STATE (default connected)
//   state ID                     the page's state and status text
//   wait ID STATE [SECONDS]      until the page's state is STATE
//   color ID X Y                 the canvas pixel at X,Y as R,G,B
//   waitcolor ID X Y R G B [S]   until that pixel is within 60 of R,G,B
//   size ID                      the canvas's size WxH
//   light ID                     how many canvas pixels are near-white
//   mouse ID X Y [click]         move the pointer to the screen's pixel X,Y
//                                (the canvas may be scaled), then click there
//   type ID TEXT...              click the screen, type TEXT and Enter
//   clipset ID TEXT...           put TEXT in the page's clipboard box, as
//                                typing there would (it goes to the machine)
//   clipwait ID TEXT... [S]      until the page's clipboard box holds TEXT
//                                (the machine's clipboard arrived); S: the
//                                last word when it is a number (default 30)
//   clip ID                      what the page's clipboard box holds
//   shot ID FILE                 a screenshot
//   close ID | quit
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import readline from 'node:readline';
import { chromium, chromiumPath, chromiumArgs } from './lib.mjs';

const profile = mkdtempSync(join(tmpdir(), 'berth-chromium-'));
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: chromiumPath,
  headless: true,
  args: chromiumArgs,
  viewport: { width: 1000, height: 600 },
  // Ours below: Playwright's closes the browser but does not exit.
  handleSIGTERM: false,
});
// t700's cleanup ends this process with SIGTERM when the test stops early:
// close the browser (it has stopped writing to the profile when this
// returns), remove the profile, exit.  Without an exit the loop below would
// wait on stdin for ever, and the cleanup on this process.
process.on('SIGTERM', async () => {
  await Promise.race([ctx.close().catch(() => {}), new Promise((r) => setTimeout(r, 5000))]);
  rmSync(profile, { recursive: true, force: true });
  process.exit(143);
});
const pages = new Map();
const say = (s) => process.stdout.write(s + '\n');

async function stateOf(p) {
  return p.evaluate(() => [window.berthState ? window.berthState() : 'loading',
                           document.getElementById('status').textContent]);
}
async function waitState(p, want, seconds) {
  const end = Date.now() + seconds * 1000;
  let last = [];
  while (Date.now() < end) {
    last = await stateOf(p).catch(() => ['loading', '']);
    if (last[0] === want) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`state stayed ${last[0]} (${last[1]}), wanted ${want}`);
}
async function color(p, x, y) {
  return p.evaluate(([x, y]) => {
    const c = document.querySelector('#screen canvas');
    if (!c || c.width <= x || c.height <= y) return null;
    const d = c.getContext('2d').getImageData(x, y, 1, 1).data;
    return [d[0], d[1], d[2]];
  }, [x, y]);
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const [cmd, id, ...a] = line.trim().split(/\s+/);
  const p = pages.get(id);
  try {
    if (cmd === 'quit') break;
    if (cmd === 'open') {
      const np = await ctx.newPage();
      pages.set(id, np);
      await np.goto(a[0]);
      const st = await waitState(np, a[1] || 'connected', 45);
      say(`ok ${st[0]} ${st[1]}`);
    } else if (cmd === 'state') {
      const st = await stateOf(p);
      say(`ok ${st[0]} ${st[1]}`);
    } else if (cmd === 'wait') {
      const st = await waitState(p, a[0], Number(a[1] || 45));
      say(`ok ${st[0]} ${st[1]}`);
    } else if (cmd === 'color') {
      say(`ok ${await color(p, Number(a[0]), Number(a[1]))}`);
    } else if (cmd === 'waitcolor') {
      const [x, y, r, g, b] = a.slice(0, 5).map(Number);
      const end = Date.now() + Number(a[5] || 30) * 1000;
      let c = null;
      for (;;) {
        c = await color(p, x, y);
        if (c && Math.abs(c[0] - r) <= 60 && Math.abs(c[1] - g) <= 60 && Math.abs(c[2] - b) <= 60) break;
        if (Date.now() > end) throw new Error(`pixel ${x},${y} is ${c}, wanted ${r},${g},${b}`);
        await new Promise((res) => setTimeout(res, 100));
      }
      say(`ok ${c}`);
    } else if (cmd === 'light') {
      say(`ok ${await p.evaluate(() => {
        const c = document.querySelector('#screen canvas');
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) if (d[i] > 200 && d[i + 1] > 200 && d[i + 2] > 200) n++;
        return n;
      })}`);
    } else if (cmd === 'size') {
      say(`ok ${await p.evaluate(() => { const c = document.querySelector('#screen canvas'); return `${c.width}x${c.height}`; })}`);
    } else if (cmd === 'mouse') {
      const [x, y] = a.slice(0, 2).map(Number);
      const c = p.locator('#screen canvas');
      const box = await c.boundingBox();
      const [w, h] = await c.evaluate((e) => [e.width, e.height]);
      if (!box || !(x >= 0 && x < w && y >= 0 && y < h)) throw new Error(`${a[0]},${a[1]} is not on the ${w}x${h} screen`);
      // The middle of that pixel on the (scaled) canvas, in a few steps:
      // noVNC sends each move.
      await p.mouse.move(box.x + (x + 0.5) * box.width / w,
                         box.y + (y + 0.5) * box.height / h, { steps: 5 });
      if (a[2] === 'click') {
        await p.mouse.down();
        await p.mouse.up();
      }
      say(`ok ${a[2] === 'click' ? 'clicked' : 'moved'} ${x},${y}`);
    } else if (cmd === 'type') {
      await p.click('#screen canvas');
      await p.keyboard.type(a.join(' '), { delay: 30 });
      await p.keyboard.press('Enter');
      say('ok typed');
    } else if (cmd === 'clipset') {
      const text = a.join(' ');
      await p.evaluate((t) => {
        const el = document.getElementById('clipboard');
        el.value = t;
        el.dispatchEvent(new Event('input'));
      }, text);
      say(`ok ${text}`);
    } else if (cmd === 'clipwait') {
      let secs = 30;
      if (a.length > 1 && /^[0-9]+$/.test(a[a.length - 1])) secs = Number(a.pop());
      const want = a.join(' ');
      const end = Date.now() + secs * 1000;
      let got = '';
      for (;;) {
        got = await p.evaluate(() => document.getElementById('clipboard').value);
        if (got === want) break;
        if (Date.now() > end) throw new Error(`the clipboard box holds ${JSON.stringify(got)}, wanted ${JSON.stringify(want)}`);
        await new Promise((res) => setTimeout(res, 100));
      }
      say(`ok ${got}`);
    } else if (cmd === 'clip') {
      say(`ok ${await p.evaluate(() => document.getElementById('clipboard').value)}`);
    } else if (cmd === 'shot') {
      await p.screenshot({ path: a[0] });
      say(`ok ${a[0]}`);
    } else if (cmd === 'close') {
      await p.close();
      pages.delete(id);
      say('ok closed');
    } else {
      say(`fail unknown command ${cmd}`);
    }
  } catch (e) {
    say(`fail ${String(e.message || e).split('\n')[0]}`);
  }
}
rl.close();
await ctx.close();
rmSync(profile, { recursive: true, force: true });
process.exit(0);
