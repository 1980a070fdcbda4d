// The lines a test program prints for its shell script to turn into TAP:
// "PASS|what", "FAIL|what|why" (tests/browser/*.mjs, tests/mcp/client.mjs).
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

// The repository's root.
export const root = join(dirname(fileURLToPath(import.meta.url)), '..');

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
