// What the browser tests share: playwright-core's chromium (from
// build/node, installed by the Makefile), Debian's /usr/bin/chromium with
// the arguments it runs headless with here, and the lines the shell test
// reads: "PASS|what", "FAIL|what|why".
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const { chromium } = await import(pathToFileURL(
  join(root, 'build/node/node_modules/playwright-core/index.mjs')).href);

export const chromiumPath = '/usr/bin/chromium';
export const chromiumArgs = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

// A headless Chromium of the test's own.
export const launch = () => chromium.launch({
  executablePath: chromiumPath, headless: true, args: chromiumArgs });

export const pass = (what) => console.log(`PASS|${what}`);
export const fail = (what, why) => console.log(`FAIL|${what}|${String(why).replace(/\n/g, ' ')}`);
export const check = (what, cond, why) => (cond ? pass(what) : fail(what, why));
// Within a step: its failure, with WHY.
export const expect = (cond, why) => { if (!cond) throw new Error(why); };

// FN's outcome as one line: it fails when it throws (its message's first
// line) or returns false.  True when it passed.
export async function step(what, fn) {
  try {
    const r = await fn();
    if (r === false) {
      fail(what, 'condition false');
      return false;
    }
    pass(what);
    return true;
  } catch (e) {
    fail(what, e.message.split('\n')[0]);
    return false;
  }
}
