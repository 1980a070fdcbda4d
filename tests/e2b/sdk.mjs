// One call of the real e2b SDK (build/node's, pinned in web/package.json)
// against berth-web's E2B API, for tests/integration/t660-e2b.sh:
//
//   node --import tests/e2b/loopback.mjs tests/e2b/sdk.mjs OP [ARG...]
//
// with E2B_API_KEY and E2B_DOMAIN=DOMAIN:PORT in the environment (the
// SDK's documented self-hosted settings), NODE_EXTRA_CA_CERTS the test's
// CA and E2B_TEST_DOMAIN=DOMAIN for loopback.mjs.  Prints the result as
// one line of JSON; an SDK exception as "ERR ClassName: message" on
// stdout, exit 3.
//
//   create TEMPLATE TIMEOUT_S METADATA_JSON ENVS_JSON [pause]
//   list [QUERY_JSON] [LIMIT]      every page (nextItems), each page's ids
//   info ID | kill ID | pause ID | metrics ID
//   connect ID TIMEOUT_S | timeout ID TIMEOUT_S
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const require = createRequire(path.join(root, 'build/node/package.json'));
const { Sandbox } = require('e2b');

const [op, ...args] = process.argv.slice(2);
// TCG boots are slow: a create waits for the machine's SSH.
const long = { requestTimeoutMs: 600_000 };

async function run() {
  switch (op) {
    case 'create': {
      const [tmpl, timeout, md, envs, pause] = args;
      const opts = {
        ...long,
        timeoutMs: Number(timeout) * 1000,
        metadata: JSON.parse(md || '{}'),
        envs: JSON.parse(envs || '{}'),
      };
      if (pause === 'pause') opts.lifecycle = { onTimeout: 'pause' };
      const s = await Sandbox.create(tmpl, opts);
      return { sandboxId: s.sandboxId, domain: s.sandboxDomain ?? null };
    }
    case 'list': {
      const opts = { ...long };
      if (args[0]) opts.query = JSON.parse(args[0]);
      if (args[1]) opts.limit = Number(args[1]);
      const p = Sandbox.list(opts);
      const pages = [];
      while (p.hasNext) {
        const items = await p.nextItems();
        pages.push(items.map((i) => ({ id: i.sandboxId, state: i.state, metadata: i.metadata,
          cpuCount: i.cpuCount, memoryMB: i.memoryMB, templateId: i.templateId })));
      }
      return pages;
    }
    case 'info': {
      const i = await Sandbox.getInfo(args[0], long);
      return { ...i, startedAt: i.startedAt.toISOString(),
        endAt: isNaN(i.endAt) ? null : i.endAt.toISOString() };
    }
    case 'kill':
      return await Sandbox.kill(args[0], long);
    case 'pause':
      return await Sandbox.pause(args[0], long);
    case 'metrics':
      return await Sandbox.getMetrics(args[0], long);
    case 'timeout':
      await Sandbox.setTimeout(args[0], Number(args[1]) * 1000, long);
      return 'ok';
    case 'connect': {
      const s = await Sandbox.connect(args[0], { ...long, timeoutMs: Number(args[1]) * 1000 });
      return { sandboxId: s.sandboxId };
    }
    default:
      throw new Error(`unknown op ${op}`);
  }
}

try {
  console.log(JSON.stringify(await run()));
} catch (e) {
  console.log(`ERR ${e?.constructor?.name}: ${e?.message}`);
  process.exit(3);
}
