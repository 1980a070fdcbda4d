// Preloaded into the node process of a test (node --import
// tests/e2b/loopback.mjs): names under E2B_TEST_DOMAIN (the domain and
// every name below it: api.DOMAIN, 49983-ID.DOMAIN, PORT-ID.DOMAIN)
// resolve to 127.0.0.1, for this process alone; every other name as
// usual.  The SDK is not touched: node's net reads dns.lookup at each
// connection, and this replaces it.
import dns from 'node:dns';

const domain = (process.env.E2B_TEST_DOMAIN || '').toLowerCase();
if (!domain) throw new Error('loopback.mjs: E2B_TEST_DOMAIN is not set');
const real = dns.lookup;

function ours(host) {
  const h = String(host).toLowerCase().replace(/\.$/, '');
  return h === domain || h.endsWith('.' + domain);
}

dns.lookup = function lookup(host, options, callback) {
  if (typeof options === 'function') {
    callback = options;
    options = {};
  }
  if (!ours(host)) return real.call(dns, host, options, callback);
  const opts = typeof options === 'number' ? { family: options } : options || {};
  if (opts.all) return process.nextTick(callback, null, [{ address: '127.0.0.1', family: 4 }]);
  return process.nextTick(callback, null, '127.0.0.1', 4);
};
