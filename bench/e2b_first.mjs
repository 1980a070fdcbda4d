// One E2B sandbox's time to its first command's output, for bench/e2b.py:
//
//   node --import tests/e2b/loopback.mjs bench/e2b_first.mjs TEMPLATE
//
// with E2B_API_KEY, E2B_DOMAIN=DOMAIN:PORT, E2B_TEST_DOMAIN and
// NODE_EXTRA_CA_CERTS set as tests/e2b/sdk.mjs has them.  Sandbox.create
// from TEMPLATE, then commands.run('echo hi') on it, timed from before
// the create to the command's output; kills the sandbox.  Prints one line
// of JSON: {"create_ms", "run_ms", "total_ms", "id"}.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(path.join(root, 'build/node/package.json'));
const { Sandbox } = require('e2b');

const template = process.argv[2];
const t0 = performance.now();
const s = await Sandbox.create(template, { requestTimeoutMs: 600_000, timeoutMs: 600_000 });
const t1 = performance.now();
const r = await s.commands.run('echo hi', { timeoutMs: 600_000 });
const t2 = performance.now();
if (r.exitCode !== 0 || r.stdout !== 'hi\n') {
  console.error(`e2b_first: echo hi gave exit ${r.exitCode}, stdout ${JSON.stringify(r.stdout)}`);
  process.exit(1);
}
await s.kill();
console.log(JSON.stringify({ create_ms: t1 - t0, run_ms: t2 - t1, total_ms: t2 - t0,
  id: s.sandboxId }));
