// The real e2b SDK's data-plane calls (commands, files) against berth-web's
// envd (web/envd.c), for tests/integration/t672-envd-sdk.sh:
//
//   node --import tests/e2b/loopback.mjs tests/envd_sdk.mjs SANDBOX_ID
//
// with E2B_API_KEY, E2B_DOMAIN=DOMAIN:PORT, NODE_EXTRA_CA_CERTS and
// E2B_TEST_DOMAIN as for tests/e2b/sdk.mjs.  Connects to the sandbox (the
// control plane, web/e2b.c) and then runs each step, printing one line per
// step: "STEP ok JSON" or "STEP ERR ClassName: message".
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(path.join(root, 'build/node/package.json'));
const { Sandbox } = require('e2b');

const id = process.argv[2];
const long = { requestTimeoutMs: 600_000 };

function say(step, ok, v) {
  console.log(`${step} ${ok ? 'ok' : 'ERR'} ${ok ? JSON.stringify(v) : v}`);
}

async function step(name, fn) {
  try {
    say(name, true, await fn());
  } catch (e) {
    say(name, false, `${e?.constructor?.name}: ${e?.message}`);
  }
}

const sbx = await Sandbox.connect(id, { ...long, timeoutMs: 600_000 });

await step('run', async () => {
  const pieces = [];
  const t0 = Date.now();
  let first = null;
  const r = await sbx.commands.run('echo one; sleep 2; echo two; echo err >&2', {
    onStdout: (d) => { pieces.push(d); if (first === null) first = Date.now() - t0; },
  });
  return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr, pieces: pieces.length,
    firstMs: first, totalMs: Date.now() - t0 };
});

await step('exit3', async () => {
  const r = await sbx.commands.run('exit 3');
  return { exitCode: r.exitCode };
});

await step('envs', async () => {
  const r = await sbx.commands.run('echo "$SBX_VAR/$OWN"', { envs: { OWN: 'mine' }, cwd: '/tmp' });
  return { stdout: r.stdout };
});

await step('watch', async () => {
  await sbx.files.makeDir('/tmp/w');
  const events = [];
  const h = await sbx.files.watchDir('/tmp/w', (e) => events.push(`${e.type}:${e.name}`),
    { timeoutMs: 0 });
  await sbx.files.write('/tmp/w/new.txt', 'x');
  for (let i = 0; i < 50 && !events.some((e) => e.startsWith('create:new.txt')); i++)
    await new Promise((r) => setTimeout(r, 200));
  await h.stop();
  return { events };
});

await step('background', async () => {
  const h = await sbx.commands.run('i=0; while true; do echo bg$i; i=$((i+1)); sleep 1; done',
    { background: true, timeoutMs: 0 });
  const pid = h.pid;
  await h.disconnect();
  await new Promise((r) => setTimeout(r, 2500));
  const listed = (await sbx.commands.list()).some((p) => p.pid === pid);
  const seen = [];
  const c = await sbx.commands.connect(pid, { onStdout: (d) => seen.push(d), timeoutMs: 0 });
  await new Promise((r) => setTimeout(r, 2500));
  const killed = await sbx.commands.kill(pid);
  let waitErr = null;
  try { await c.wait(); } catch (e) { waitErr = e?.constructor?.name; }
  await new Promise((r) => setTimeout(r, 1500));
  const again = await sbx.commands.kill(pid);
  return { pid, listed, live: seen.join('').match(/bg\d+/) !== null, killed, waitErr, again };
});

await step('files', async () => {
  const w = await sbx.files.write('/tmp/sdk/a.txt', 'hello from the sdk\n');
  const text = await sbx.files.read('/tmp/sdk/a.txt');
  await sbx.files.write([{ path: '/tmp/sdk/b.txt', data: 'bee' }, { path: '/tmp/sdk/c.txt', data: 'sea' }]);
  const list = (await sbx.files.list('/tmp/sdk')).map((e) => `${e.name}:${e.type}:${e.size}`).sort();
  const exists = await sbx.files.exists('/tmp/sdk/nope');
  const made = await sbx.files.makeDir('/tmp/sdk');
  let missing = null;
  try { await sbx.files.read('/tmp/sdk/nope'); } catch (e) { missing = e?.constructor?.name; }
  return { wrote: w.path, text, list, exists, made, missing };
});

await step('running', async () => await sbx.isRunning());
