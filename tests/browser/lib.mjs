// What the browser tests share: playwright-core's chromium (from
// build/node, installed by the Makefile), Debian's /usr/bin/chromium with
// the arguments it runs headless with here, and tests/checks.mjs's lines
// the shell test reads: "PASS|what", "FAIL|what|why".
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { root } from '../checks.mjs';

export { root, pass, fail, check, expect, step } from '../checks.mjs';
export const { chromium } = await import(pathToFileURL(
  join(root, 'build/node/node_modules/playwright-core/index.mjs')).href);

export const chromiumPath = '/usr/bin/chromium';
export const chromiumArgs = ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

// A headless Chromium of the test's own.
export const launch = () => chromium.launch({
  executablePath: chromiumPath, headless: true, args: chromiumArgs });

