// berth's MCP server driven by the official MCP client SDK
// (@modelcontextprotocol/sdk), as Claude Code or Codex would, over either
// of its transports:
//   node tests/mcp/client.mjs BERTH STATE MACHINE         `berth mcp` (stdio)
//   node tests/mcp/client.mjs --http URL TOKEN MACHINE    berth-web's POST /mcp
// BERTH is the CLI, STATE its state directory; URL berth-web's /mcp and
// TOKEN an API token.  MACHINE must not exist (the script creates it, uses
// it and deletes it; over HTTP it keeps it when MCP_KEEP=1, for the test's
// own probes, and leaves out checkpoint and fork, which the stdio run
// covers).  Prints one line per check, "PASS|what" or "FAIL|what|why", and
// "DONE" at the end (tests/integration/t640-mcp.sh and t645-mcp-http.sh
// turn them into TAP).
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { root, pass, fail, step, expect } from '../checks.mjs';

const http = process.argv[2] === '--http';
const [berth, state, machine] = process.argv.slice(http ? 3 : 2);
const sdk = (p) => import(pathToFileURL(
  join(root, 'build/node/node_modules/@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Client } = await sdk('client/index.js');
let transport;
if (http) {
  // (berth, state: the URL and the token)
  const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
  transport = new StreamableHTTPClientTransport(new URL(berth),
    { requestInit: { headers: { Authorization: `Bearer ${state}` } } });
} else {
  const { StdioClientTransport } = await sdk('client/stdio.js');
  transport = new StdioClientTransport({ command: berth, args: ['--state', state, 'mcp'],
    stderr: 'inherit' });
}
const keep = http && process.env.MCP_KEEP === '1';
const client = new Client({ name: http ? 'berth-t645' : 'berth-t640', version: '1.0.0' });
const call = (name, args) => client.callTool({ name, arguments: args }, undefined,
  { timeout: 600000 });
const text = (r) => r.content.map((c) => c.text).join('');

try {
  await step('the client connects: initialize, the server names itself berth', async () => {
    await client.connect(transport);
    expect(client.getServerVersion().name === 'berth', JSON.stringify(client.getServerVersion()));
  });
  await step('tools/list: every tool, each with an object schema', async () => {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name).sort().join(' ');
    const want = ['checkpoint', 'create_machine', 'delete_machine', 'desktop_url', 'exec',
      'fork', 'list_machines', 'preview_url', 'read_file', 'restore', 'start_machine',
      'stop_machine', 'suspend_machine', 'write_file'].join(' ');
    expect(names === want, names);
    expect(tools.every((t) => t.inputSchema.type === 'object' && t.description), 'schemas');
  });
  await step(`create_machine ${machine}: running`, async () => {
    const r = await call('create_machine', { name: machine });
    expect(!r.isError, text(r));
    expect(r.structuredContent.state === 'running', JSON.stringify(r.structuredContent));
  });
  await step('exec a shell line: stdout, stderr and exit code 3 apart', async () => {
    const r = await call('exec', { machine, command: 'echo out; echo err >&2; exit 3' });
    const s = r.structuredContent;
    expect(!r.isError, text(r));
    expect(s.stdout === 'out\n' && s.stderr === 'err\n' && s.exit_code === 3, JSON.stringify(s));
    expect(/^exit code 3\n/.test(text(r)), text(r));
  });
  await step('exec argv with stdin', async () => {
    const r = await call('exec', { machine, argv: ['tr', 'a-z', 'A-Z'], stdin: 'shout' });
    expect(r.structuredContent.stdout === 'SHOUT', JSON.stringify(r.structuredContent));
  });
  const body = 'hello from MCP\nline two é\n';
  await step('write_file, then read_file: the same text', async () => {
    const w = await call('write_file', { machine, path: '/root/mcp.txt', content: body });
    expect(!w.isError, text(w));
    const r = await call('read_file', { machine, path: '/root/mcp.txt' });
    expect(!r.isError && text(r) === body, JSON.stringify(text(r)));
    const c = await call('exec', { machine, command: 'wc -c < /root/mcp.txt' });
    expect(c.structuredContent.stdout.trim() === String(Buffer.byteLength(body)),
      JSON.stringify(c.structuredContent));
  });
  await step('write_file base64: bytes that are no UTF-8 come back as base64', async () => {
    const w = await call('write_file', { machine, path: '/root/bin', content: '/wABAg==',
      encoding: 'base64' });
    expect(!w.isError, text(w));
    const r = await call('read_file', { machine, path: '/root/bin' });
    expect(r.structuredContent.encoding === 'base64' && r.structuredContent.content === '/wABAg==',
      JSON.stringify(r.structuredContent));
  });
  await step('read_file of no such file: an error result naming it', async () => {
    const r = await call('read_file', { machine, path: '/nope' });
    expect(r.isError && /\/nope: no such file or directory/.test(text(r)), text(r));
  });
  await step('exec in no such machine: an error result naming it', async () => {
    const r = await call('exec', { machine: 'nope', command: 'true' });
    expect(r.isError && /no machine nope/.test(text(r)), text(r));
  });
  await step('a bad argument: an error result saying what is needed', async () => {
    const r = await call('exec', { machine, command: 'true', argv: ['true'] });
    expect(r.isError && /one of them/.test(text(r)), text(r));
  });
  await step('an unknown tool: a JSON-RPC error (the SDK throws)', async () => {
    let threw = null;
    try { await call('format_disk', {}); } catch (e) { threw = e; }
    expect(threw && /no tool 'format_disk'/.test(threw.message), String(threw));
  });
  if (!http) await step('checkpoint, then fork from it', async () => {
    // (a disk checkpoint of a running machine has what its guest wrote out)
    await call('exec', { machine, command: 'sync' });
    const c = await call('checkpoint', { machine, name: 'c1' });
    expect(!c.isError && c.structuredContent.name === 'c1', text(c));
    const f = await call('fork', { machine, name: `${machine}-f`, from: 'c1' });
    expect(!f.isError, text(f));
    const r = await call('read_file', { machine: `${machine}-f`, path: '/root/mcp.txt' });
    expect(text(r) === body, text(r));
  });
  const all = http ? [machine] : [`${machine}-f`, machine];
  await step(`list_machines shows ${http ? 'it' : 'both'}`, async () => {
    const r = await call('list_machines', {});
    const names = r.structuredContent.machines.map((m) => m.name).sort().join(' ');
    expect(names === [...all].sort().join(' '), names);
  });
  if (!keep) await step(`delete_machine: ${http ? 'gone' : 'both gone'}`, async () => {
    for (const m of all) {
      const r = await call('delete_machine', { machine: m });
      expect(!r.isError, text(r));
    }
    const r = await call('list_machines', {});
    expect(r.structuredContent.machines.length === 0, text(r));
  });
} catch (e) {
  fail('the client', e.message.split('\n')[0]);
} finally {
  await client.close().catch(() => {});
}
pass('the session closed');
console.log('DONE');
