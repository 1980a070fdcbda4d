// The page of berth-desktop: noVNC's RFB client on /ws/USER/MACHINE with
// the one-time token from the URL's fragment, scaled to the window, with
// the clipboard both ways, a visible state, and reconnection.
import RFB from '/novnc/core/rfb.js';

const [user, machine] = location.pathname.split('/').filter(Boolean).map(decodeURIComponent);
const params = new URLSearchParams(location.hash.slice(1));
const token = params.get('token') || '';
// The token is spent on first use: keep it out of the address bar.
history.replaceState(null, '', location.pathname);

const statusEl = document.getElementById('status');
const clipEl = document.getElementById('clipboard');
document.getElementById('machine').textContent = machine || 'berth';
document.title = `${machine} — berth desktop`;

let rfb = null;
let resume = '';   // the key to come back with next
let cameWith = ''; // the key this connection came back with
let state = 'connecting';
let connected = false;

function show(s, text) {
  state = s;
  statusEl.dataset.state = s;
  statusEl.textContent = text;
}

// What the bridge says about this viewer: waking, connected (to the
// machine's screen), stopped, refused.  After a comeback the next key is
// given only to a request showing the key this connection came back with.
async function poll() {
  try {
    const shown = cameWith ? `&resume=${encodeURIComponent(cameWith)}` : '';
    const r = await fetch(`/state?token=${encodeURIComponent(token)}${shown}`, { cache: 'no-store' });
    const j = await r.json();
    if (j.resume) resume = j.resume;
    if (j.state === 'waking') show('waking', `waking ${machine}…`);
    else if (j.state === 'connected' && connected) show('connected', 'connected');
    else if (j.state === 'stopped') show('stopped', 'machine stopped' + (j.message ? `: ${j.message}` : ''));
    else if (j.state === 'refused') {
      // A refused resume key is not tried again.
      resume = '';
      show('refused', `refused: ${j.message}`);
    }
  } catch (e) { /* the bridge is away: the disconnect handler says so */ }
}

function connect() {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  cameWith = resume;
  const cred = resume ? `resume=${encodeURIComponent(resume)}` : `token=${encodeURIComponent(token)}`;
  const url = `${proto}//${location.host}/ws/${encodeURIComponent(user)}/${encodeURIComponent(machine)}?${cred}`;
  rfb = new RFB(document.getElementById('screen'), url, { shared: true });
  rfb.scaleViewport = true;
  rfb.resizeSession = false;
  rfb.focusOnClick = true;
  rfb.addEventListener('connect', () => { connected = true; poll(); });
  rfb.addEventListener('disconnect', () => {
    connected = false;
    if (state === 'refused') return;
    poll().then(() => {
      if (state === 'refused') return;
      show('disconnected', 'disconnected — reconnecting…');
      setTimeout(connect, 2000);
    });
  });
  rfb.addEventListener('clipboard', (e) => {
    clipEl.value = e.detail.text;
    if (navigator.clipboard && document.hasFocus())
      navigator.clipboard.writeText(e.detail.text).catch(() => {});
  });
  window.berthRfb = rfb;
}

clipEl.addEventListener('input', () => { if (rfb) rfb.clipboardPasteFrom(clipEl.value); });
window.berthState = () => state;
if (!user || !machine || !token) {
  show('refused', 'this page needs the URL `berth desktop NAME` prints');
} else {
  connect();
  setInterval(poll, 500);
}
