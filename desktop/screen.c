#include "desktop/screen.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <rfb/rfb.h>
#include <rfb/rfbclient.h>

#include "common/hostapi.h"
#include "common/log.h"
#include "common/util.h"
#include "desktop/font.h"
#include "desktop/hostfd.h"
#include "desktop/vdagent.h"
#include "common/banned.h"

#define REFUSED_SLOTS 64
#define RESUME_SLOTS 256
/* A viewer whose connection broke may come back this long after. */
#define RESUME_MS (120 * 1000)
/* The grants the bridge keeps: one for each viewer and resume key at most
 * (main.c's 256 connections, RESUME_SLOTS keys). */
#define GRANT_SLOTS 512
/* A grant that no viewer nor resume key names is dropped after this (a
 * viewer being handed over is not in the list yet). */
#define GRANT_SPARE_MS (30 * 1000)

struct mach;

struct viewer {
	char token[64];
	char resume[64];       /* its key to come back with (screen_resume) */
	char prev[64];         /* the key it came back with, "" = it came with
				  its token */
	bool resume_told;      /* screen_state gave it out (it does so once) */
	uint64_t id;           /* names it for screen_reopen_sessions */
	char from[64];
	struct mach *m;
	int64_t session;       /* hostd's session id, -1 = none */
	int64_t last_send_ms;  /* when its last update began (frame pacing) */
	int64_t grant;         /* hostd's grant that let it in (screen_hold) */
	int sock;              /* a duplicate of its socket: a cut shuts it */
	bool cut;              /* its grant was revoked: no resume key */
	struct viewer *next;
};

struct mach {
	char user[64], name[64];
	char title[140];
	rfbScreenInfoPtr scr;
	char *fb, *oldfb;      /* the screen's frame buffer, and the one before
				  a resize (output threads may still read it) */
	int w, h;
	pthread_mutex_t send_lock; /* writes upstream; guards up */
	rfbClient *up;
	char *upfb;            /* up's frame buffer (up_alloc's): libvncclient
				  never frees it */
	pthread_mutex_t agent_lock; /* writes to the agent; guards agent */
	struct vdagent *agent; /* the clipboard (the guest's SPICE agent port),
				  NULL: none (no port, or it broke) */
	int agent_fd;
	bool agent_broken;     /* a write gave up: the connection is shut */
	char *pending;         /* a viewer's clipboard (UTF-8) for the next
				  connection: set while there was none, or
				  still the clipboard when one ended */
	size_t pending_len;
	pthread_t agent_thread;
	pthread_t thread;
	/* Under g_lock: */
	int viewers;
	bool wake;
	const char *state;     /* "waking", "connected", "stopped" */
	char message[256];
	pthread_cond_t cv;
	struct mach *next;
};

static struct screen_cfg cfg;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mach *machs;
static struct viewer *viewers;
static struct {
	char token[64], machine[64], message[256];
} refused[REFUSED_SLOTS];
static int refused_next;
static struct {
	char key[64], token[64], user[64], name[64];
	int64_t until_ms;
	int64_t grant;
} resumes[RESUME_SLOTS];
static int resume_next;
/* hostd's grants (hostd/desktop.h): what lets the bridge attach a screen.
 * Each attach spends HANDLE and gives the next. */
static struct {
	int64_t id;            /* 0 = free */
	char user[64], name[64];
	char handle[64];       /* "" = none to attach with (refused) */
	int64_t added_ms;
} grants[GRANT_SLOTS];
static uint64_t viewer_ids;  /* under g_lock */
static atomic_int nviewers;  /* screen_add_viewer to v_gone (or its failure) */
static atomic_uint_fast64_t frames_in, rects_in;
static int tag;  /* libvncclient client-data key */

static void vnc_log(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (log_threshold < LOG_DEBUG)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	msg[strcspn(msg, "\n")] = '\0';
	log_debug("libvnc: %s", msg);
}

void screen_init(const struct screen_cfg *c)
{
	cfg = *c;
	rfbLog = vnc_log;
	rfbErr = vnc_log;
	rfbClientLog = vnc_log;
	rfbClientErr = vnc_log;
}

int screen_viewer_count(void)
{
	return atomic_load(&nviewers);
}

void screen_stats(uint64_t *in, uint64_t *rects)
{
	*in = atomic_load(&frames_in);
	*rects = atomic_load(&rects_in);
}

static uint32_t rgb(const rfbPixelFormat *f, int r, int g, int b)
{
	return (uint32_t)r << f->redShift | (uint32_t)g << f->greenShift |
	       (uint32_t)b << f->blueShift;
}

/* Fill M's frame with one colour and TEXT in the middle: the "waking" and
 * "stopped" frames. */
static void fill(struct mach *m, int r, int g, int b, const char *text)
{
	rfbPixelFormat *f = &m->scr->serverFormat;
	uint32_t px = rgb(f, r, g, b);
	uint32_t *p = (uint32_t *)m->fb;

	for (size_t i = 0; i < (size_t)m->w * (size_t)m->h; i++)
		p[i] = px;
	font_draw_centred(p, m->w, m->h, text, m->w >= 1000 ? 4 : 3, rgb(f, 0xe0, 0xe0, 0xe0));
	rfbMarkRectAsModified(m->scr, 0, 0, m->w, m->h);
}

static void set_state(struct mach *m, const char *state, const char *message)
{
	pthread_mutex_lock(&g_lock);
	if (m->state != state)
		log_info("%s: %s%s%s", m->title, state, message ? ": " : "",
			 message ? message : "");
	m->state = state;
	snprintf(m->message, sizeof(m->message), "%s", message ? message : "");
	pthread_mutex_unlock(&g_lock);
	char text[100];
	if (!strcmp(state, "waking")) {
		snprintf(text, sizeof(text), "waking %s...", m->name);
		fill(m, 0x20, 0x30, 0x60, text);
	} else if (!strcmp(state, "stopped")) {
		snprintf(text, sizeof(text), "%s stopped", m->name);
		fill(m, 0x30, 0x30, 0x30, text);
	}
}

/* Give M's screen a W x H frame buffer; viewers get the new size. */
static int resize(struct mach *m, int w, int h)
{
	char *fb;

	if (w == m->w && h == m->h)
		return 0;
	fb = calloc((size_t)w * (size_t)h, 4);
	if (!fb)
		return -1;
	free(m->oldfb);
	m->oldfb = m->fb;
	m->fb = fb;
	m->w = w;
	m->h = h;
	rfbNewFramebuffer(m->scr, fb, w, h, 8, 3, 4);
	return 0;
}

/* ---- upstream (libvncclient) callbacks, on M's upstream thread ---------- */

/* Called by libvncclient once QEMU's ServerInit is read (and on a resize),
 * before it sends SetPixelFormat.  When QEMU's own format is 32-bit true
 * colour (x8r8g8b8), the bridge asks for exactly that: QEMU's encoder then
 * copies bytes instead of converting each pixel on its one VNC worker
 * thread, and up_update converts while copying, once for all viewers.
 * Measured with a page-flipping 1280x800 guest (raw, 6 s runs): QEMU used
 * 58 % of a core asking for the screen's format, 30 % asking for its own,
 * for the same 32.5 screens/s; with two CPU-bound processes beside it,
 * 27.3 screens/s against 31.9. */
static void up_choose_format(struct mach *m, rfbClient *c)
{
	const rfbPixelFormat *q = &c->si.format;
	bool native = q->bitsPerPixel == 32 && q->depth == 24 && q->trueColour &&
		      !q->bigEndian && q->redMax == 255 && q->greenMax == 255 &&
		      q->blueMax == 255 && q->redShift % 8 == 0 && q->greenShift % 8 == 0 &&
		      q->blueShift % 8 == 0 && q->redShift <= 24 && q->greenShift <= 24 &&
		      q->blueShift <= 24;
	c->format = native ? *q : m->scr->serverFormat;
}

static rfbBool up_alloc(rfbClient *c)
{
	struct mach *m = rfbClientGetClientData(c, &tag);
	size_t n = (size_t)c->width * (size_t)c->height * 4;

	up_choose_format(m, c);

	free(c->frameBuffer);
	c->frameBuffer = malloc(n ? n : 4);
	m->upfb = (char *)c->frameBuffer;
	if (!c->frameBuffer || resize(m, c->width, c->height) < 0)
		return FALSE;
	return TRUE;
}

static void up_update(rfbClient *c, int x, int y, int w, int h)
{
	struct mach *m = rfbClientGetClientData(c, &tag);

	if (x < 0 || y < 0 || w <= 0 || h <= 0 || x + w > m->w || y + h > m->h ||
	    c->width != m->w)
		return;
	const rfbPixelFormat *from = &c->format, *to = &m->scr->serverFormat;
	bool same = from->redShift == to->redShift && from->greenShift == to->greenShift &&
		    from->blueShift == to->blueShift;

	for (int row = y; row < y + h; row++) {
		uint32_t *dst = (uint32_t *)(m->fb + ((size_t)row * m->w + x) * 4);
		const uint32_t *src = (const uint32_t *)(c->frameBuffer +
							 ((size_t)row * c->width + x) * 4);

		if (same) {
			memcpy(dst, src, (size_t)w * 4);
			continue;
		}
		for (int i = 0; i < w; i++) {
			uint32_t p = src[i];

			dst[i] = ((p >> from->redShift) & 0xff) << to->redShift |
				 ((p >> from->greenShift) & 0xff) << to->greenShift |
				 ((p >> from->blueShift) & 0xff) << to->blueShift;
		}
	}
	rfbMarkRectAsModified(m->scr, x, y, x + w, y + h);
	atomic_fetch_add(&rects_in, 1);
}

static void up_finished(rfbClient *c)
{
	(void)c;
	atomic_fetch_add(&frames_in, 1);
}


/* ---- viewers' input (libvncserver callbacks, on viewers' threads) ------- */

static void v_key(rfbBool down, rfbKeySym key, rfbClientPtr cl)
{
	struct mach *m = cl->screen->screenData;

	pthread_mutex_lock(&m->send_lock);
	if (m->up)
		SendKeyEvent(m->up, key, down);
	pthread_mutex_unlock(&m->send_lock);
}

static void v_ptr(int mask, int x, int y, rfbClientPtr cl)
{
	struct mach *m = cl->screen->screenData;

	pthread_mutex_lock(&m->send_lock);
	if (m->up)
		SendPointerEvent(m->up, x, y, mask);
	pthread_mutex_unlock(&m->send_lock);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Frame pacing, in the viewer's own output thread just before an update
 * goes out: at most max_fps updates a second, counted from the last one
 * sent, so an update under the cap leaves at once (libvncserver's
 * deferUpdateTime would delay every update by the whole interval) and a
 * slow viewer waits alone. */
static void v_display(rfbClientPtr cl)
{
	struct viewer *v = cl->clientData;
	int64_t now = mono_ms(), wait;

	if (!v || cfg.max_fps <= 0)
		return;
	wait = v->last_send_ms + 1000 / cfg.max_fps - now;
	if (wait > 0) {
		sleep_ms((int)wait);
		now = mono_ms();
	}
	v->last_send_ms = now;
}

/* ---- the clipboard: the guest's SPICE agent port (desktop/vdagent.h) ---- */

/* OUT to the agent, under agent_lock.  The guest drains the port only while
 * its agent runs: a write that waits 2 s gives up and breaks the
 * connection (a message cut short would leave the stream out of step). */
static void agent_write(struct mach *m, const struct buf *out)
{
	size_t off = 0;

	while (m->agent && !m->agent_broken && off < out->len) {
		ssize_t n = send(m->agent_fd, out->data + off, out->len - off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
		int saved = n < 0 ? errno : 0;
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (saved == EINTR)
			continue;
		struct pollfd p = { .fd = m->agent_fd, .events = POLLOUT };
		bool full = saved == EAGAIN || saved == EWOULDBLOCK;
		if (full && poll(&p, 1, 2000) > 0)
			continue;
		log_warn("%s: the guest's agent port: %s: clipboard off until the machine "
			 "is attached again", m->title, full ? "not read for 2 s" :
			 strerror(saved));
		m->agent_broken = true;
		shutdown(m->agent_fd, SHUT_RDWR);
		return;
	}
}

/* The guest's clipboard text (UTF-8) to every viewer of M: as UTF-8 to
 * those that speak the extended clipboard, as ISO 8859-1 ('?' for what it
 * cannot hold) to the others (noVNC). */
static void agent_to_viewers(struct mach *m, char *text, size_t len)
{
	size_t l1len;
	char *l1 = vdagent_utf8_to_latin1(text, len, &l1len);

	if (!l1)
		return;
	log_info("%s: the guest's clipboard (%zu bytes) to the viewers", m->title, len);
	rfbSendServerCutTextUTF8(m->scr, text, (int)len, l1, (int)l1len);
	free(l1);
}

/* M's agent thread: reads the guest's messages until the port breaks or
 * agent_stop shuts it down. */
static void *agent_loop(void *arg)
{
	struct mach *m = arg;
	char *in = malloc(16384);

	for (; in;) {
		ssize_t n = read(m->agent_fd, in, 16384);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		struct buf out = BUF_INIT;
		char *text = NULL, err[160];
		size_t tlen = 0;
		pthread_mutex_lock(&m->agent_lock);
		int rc = vdagent_feed(m->agent, in, (size_t)n, &out, &text, &tlen, err,
				      sizeof(err));
		agent_write(m, &out);
		pthread_mutex_unlock(&m->agent_lock);
		buf_free(&out);
		if (text)
			agent_to_viewers(m, text, tlen);
		free(text);
		if (rc < 0) {
			log_warn("%s: the guest's agent: %s: clipboard off until the machine "
				 "is attached again", m->title, err);
			break;
		}
	}
	free(in);
	/* Whatever ended it, viewers' text now waits for the next attach. */
	pthread_mutex_lock(&m->agent_lock);
	m->agent_broken = true;
	shutdown(m->agent_fd, SHUT_RDWR);
	pthread_mutex_unlock(&m->agent_lock);
	return NULL;
}

/* M's pending clipboard := TEXT (LEN bytes; NULL: none).  Under
 * agent_lock. */
static void pending_set(struct mach *m, const char *text, size_t len)
{
	char *copy = text ? malloc(len + 1) : NULL;

	if (copy) {
		memcpy(copy, text, len);
		copy[len] = '\0';
	}
	free(m->pending);
	m->pending = copy;
	m->pending_len = copy ? len : 0;
}

/* Speak to the guest's agent on FD (M's now; -1: none). */
static void agent_start(struct mach *m, int fd)
{
	struct buf out = BUF_INIT;

	if (fd < 0)
		return;
	pthread_mutex_lock(&m->agent_lock);
	m->agent = vdagent_new();
	m->agent_fd = fd;
	m->agent_broken = false;
	if (m->agent) {
		vdagent_hello(m->agent, &out);
		if (m->pending) {
			vdagent_offer(m->agent, m->pending, m->pending_len, &out);
			pending_set(m, NULL, 0);
		}
		agent_write(m, &out);
	}
	if (!m->agent || pthread_create(&m->agent_thread, NULL, agent_loop, m) != 0) {
		vdagent_free(m->agent);
		m->agent = NULL;
		m->agent_fd = -1;
		close(fd);
	}
	pthread_mutex_unlock(&m->agent_lock);
	buf_free(&out);
}

/* Stop M's agent thread and close its port. */
static void agent_stop(struct mach *m)
{
	pthread_mutex_lock(&m->agent_lock);
	bool on = m->agent != NULL;
	if (on)
		shutdown(m->agent_fd, SHUT_RDWR);
	pthread_mutex_unlock(&m->agent_lock);
	if (!on)
		return;
	pthread_join(m->agent_thread, NULL);
	pthread_mutex_lock(&m->agent_lock);
	/* A viewer's text the guest may not have taken yet (the port's
	 * connection ends with the screen's, a resume can drop it at once):
	 * offered again on the next one, unless a newer one waits already
	 * (set after the connection broke). */
	size_t len;
	const char *text = vdagent_host_text(m->agent, &len);
	if (!m->pending)
		pending_set(m, text, len);
	vdagent_free(m->agent);
	m->agent = NULL;
	close(m->agent_fd);
	m->agent_fd = -1;
	pthread_mutex_unlock(&m->agent_lock);
}

/* A viewer's clipboard TEXT (LEN bytes of UTF-8) to M's guest: now, or
 * when the agent port is attached next (the machine is waking, or between
 * two connections). */
static void offer(struct mach *m, const char *text, size_t len)
{
	struct buf out = BUF_INIT;

	pthread_mutex_lock(&m->agent_lock);
	if (len > VDAGENT_TEXT_MAX)
		log_info("%s: a viewer's clipboard of %zu bytes is over %u: dropped", m->title,
			 len, VDAGENT_TEXT_MAX);
	else if (!m->agent || m->agent_broken) {
		log_info("%s: a viewer's clipboard waits for the machine's agent port", m->title);
		pending_set(m, text, len);
	} else if (vdagent_offer(m->agent, text, len, &out) == 0) {
		agent_write(m, &out);
	}
	pthread_mutex_unlock(&m->agent_lock);
	buf_free(&out);
}

/* A viewer's clipboard: noVNC sends ISO 8859-1 (libvncserver offers it
 * no extended clipboard it would use), the guest wants UTF-8. */
static void v_cut(char *text, int len, rfbClientPtr cl)
{
	struct mach *m = cl->screen->screenData;
	size_t ulen;
	char *u = len >= 0 ? vdagent_latin1_to_utf8(text, (size_t)len, &ulen) : NULL;

	if (!u)
		return;
	offer(m, u, ulen);
	free(u);
}

/* The same from a viewer that speaks the extended clipboard: UTF-8. */
static void v_cut_utf8(char *text, int len, rfbClientPtr cl)
{
	if (len >= 0)
		offer(cl->screen->screenData, text, (size_t)len);
}

/* ---- grants (under g_lock) ---------------------------------------------- */

/* Whether a viewer or a live resume key names grant ID. */
static bool grant_named(int64_t id, int64_t now)
{
	for (struct viewer *v = viewers; v; v = v->next)
		if (v->grant == id)
			return true;
	for (int i = 0; i < RESUME_SLOTS; i++)
		if (resumes[i].key[0] && resumes[i].grant == id && now <= resumes[i].until_ms)
			return true;
	return false;
}

/* Drop the grants nothing names any more (hostd ends them when they are no
 * longer held). */
static void grants_sweep(int64_t now)
{
	for (int i = 0; i < GRANT_SLOTS; i++)
		if (grants[i].id && now - grants[i].added_ms > GRANT_SPARE_MS &&
		    !grant_named(grants[i].id, now))
			memset(&grants[i], 0, sizeof(grants[i]));
}

/* Keep grant ID (USER's NAME) with HANDLE, its first attach's. */
static void grant_put(int64_t id, const char *user, const char *name, const char *handle)
{
	int slot = -1;
	int64_t now = mono_ms();

	for (int pass = 0; pass < 2 && slot < 0; pass++) {
		if (pass == 1)
			grants_sweep(now);
		for (int i = 0; i < GRANT_SLOTS && slot < 0; i++)
			if (!grants[i].id || grants[i].id == id)
				slot = i;
	}
	if (slot < 0) {
		log_warn("no room for grant %lld: its viewer cannot attach", (long long)id);
		return;
	}
	grants[slot].id = id;
	snprintf(grants[slot].user, sizeof(grants[slot].user), "%s", user);
	snprintf(grants[slot].name, sizeof(grants[slot].name), "%s", name);
	snprintf(grants[slot].handle, sizeof(grants[slot].handle), "%s", handle);
	grants[slot].added_ms = now;
}

/* A grant for M to attach with: *ID and HANDLE (64 bytes).  False when it
 * has none (then no viewer of it may see it). */
static bool grant_pick(const struct mach *m, int64_t *id, char *handle)
{
	for (int i = 0; i < GRANT_SLOTS; i++)
		if (grants[i].id && grants[i].handle[0] && !strcmp(grants[i].user, m->user) &&
		    !strcmp(grants[i].name, m->name)) {
			*id = grants[i].id;
			snprintf(handle, 64, "%s", grants[i].handle);
			return true;
		}
	return false;
}

/* Grant ID's next handle is HANDLE (NULL or "": none). */
static void grant_set_handle(int64_t id, const char *handle)
{
	for (int i = 0; i < GRANT_SLOTS; i++)
		if (grants[i].id == id)
			snprintf(grants[i].handle, sizeof(grants[i].handle), "%s",
				 handle ? handle : "");
}

static void refused_add(const char *token, const char *machine, const char *message)
{
	int i = refused_next++ % REFUSED_SLOTS;
	snprintf(refused[i].token, sizeof(refused[i].token), "%s", token);
	snprintf(refused[i].machine, sizeof(refused[i].machine), "%s", machine);
	snprintf(refused[i].message, sizeof(refused[i].message), "%s", message);
}

/* The grants IDS[0..N-1] are revoked: their viewers are disconnected (the
 * page is told "refused" and stops), their resume keys and handles
 * dropped. */
static void grants_cut(const int64_t *ids, size_t n)
{
	static const char why[] = "access revoked (the URL's token, its API token or the "
				  "machine): ask for a new URL";
	int nv = 0;

	pthread_mutex_lock(&g_lock);
	for (size_t k = 0; k < n; k++) {
		for (struct viewer *v = viewers; v; v = v->next)
			if (v->grant == ids[k] && !v->cut) {
				v->cut = true;
				refused_add(v->token, v->m->name, why);
				if (v->prev[0])
					refused_add(v->prev, v->m->name, why);
				/* Its threads see the end and close it (v_gone). */
				shutdown(v->sock, SHUT_RDWR);
				log_info("viewer from %s on %s cut: grant %lld revoked", v->from,
					 v->m->title, (long long)ids[k]);
				nv++;
			}
		for (int i = 0; i < RESUME_SLOTS; i++)
			if (resumes[i].key[0] && resumes[i].grant == ids[k]) {
				refused_add(resumes[i].token, resumes[i].name, why);
				resumes[i].key[0] = '\0';
			}
		for (int i = 0; i < GRANT_SLOTS; i++)
			if (grants[i].id == ids[k])
				memset(&grants[i], 0, sizeof(grants[i]));
	}
	pthread_mutex_unlock(&g_lock);
	if (n)
		log_info("%zu grants revoked: %d viewers cut", n, nv);
}

void screen_hold(void)
{
	int64_t now = mono_ms(), *cut = NULL;
	json_t *ids = json_array(), *req = NULL, *resp = NULL, *v;
	char err[256];
	size_t n = 0, i;

	pthread_mutex_lock(&g_lock);
	grants_sweep(now);
	for (int k = 0; k < GRANT_SLOTS && ids; k++)
		if (grants[k].id)
			json_array_append_new(ids, json_integer(grants[k].id));
	/* A viewer whose grant is not kept (no room, or a resume after the
	 * grant was dropped) is held too: hostd says if it is cut. */
	for (struct viewer *w = viewers; w && ids; w = w->next) {
		bool kept = false;
		for (int k = 0; k < GRANT_SLOTS && !kept; k++)
			kept = grants[k].id == w->grant;
		if (!kept)
			json_array_append_new(ids, json_integer(w->grant));
	}
	pthread_mutex_unlock(&g_lock);
	if (!ids || json_array_size(ids) == 0) {
		json_decref(ids);
		return;
	}
	req = json_pack("{s:s, s:o}", "op", "hold", "grants", ids);
	if (!req || hostfd_call(cfg.desktop_sock, req, &resp, NULL, 0, err, sizeof(err)) < 0) {
		log_debug("hold the grants: %s", req ? err : "out of memory");
		goto out;
	}
	json_t *arr = json_object_get(resp, "cut");
	if (!json_is_array(arr)) {
		log_warn("hold the grants: %s", hostfd_error(resp, NULL));
		goto out;
	}
	cut = calloc(json_array_size(arr) + 1, sizeof(*cut));
	json_array_foreach(arr, i, v)
		if (cut && json_integer_value(v) > 0)
			cut[n++] = json_integer_value(v);
	grants_cut(cut, n);
out:
	free(cut);
	json_decref(req);
	json_decref(resp);
}

static void session_close(struct viewer *v, uint64_t bytes_out)
{
	char path[64], err[256];
	long status = 0;
	json_t *resp = NULL, *body;

	if (v->session < 0)
		return;
	snprintf(path, sizeof(path), "/v1/gateway/sessions/%lld", (long long)v->session);
	body = json_pack("{s:I}", "bytes_out", (json_int_t)bytes_out);
	if (hostapi_call(cfg.hostd_sock, "DELETE", path, body, &status, &resp, err,
			 sizeof(err)) < 0)
		log_warn("close session %lld: %s", (long long)v->session, err);
	json_decref(body);
	json_decref(resp);
}

static void v_gone(rfbClientPtr cl)
{
	struct viewer *v = cl->clientData, **pp;

	if (!v)
		return;
	pthread_mutex_lock(&g_lock);
	for (pp = &viewers; *pp; pp = &(*pp)->next)
		if (*pp == v) {
			*pp = v->next;
			break;
		}
	v->m->viewers--;
	pthread_cond_broadcast(&v->m->cv);
	if (!v->cut) {  /* a cut viewer does not come back */
		int i = resume_next++ % RESUME_SLOTS;
		snprintf(resumes[i].key, sizeof(resumes[i].key), "%s", v->resume);
		snprintf(resumes[i].token, sizeof(resumes[i].token), "%s", v->token);
		snprintf(resumes[i].user, sizeof(resumes[i].user), "%s", v->m->user);
		snprintf(resumes[i].name, sizeof(resumes[i].name), "%s", v->m->name);
		resumes[i].until_ms = mono_ms() + RESUME_MS;
		resumes[i].grant = v->grant;
	}
	pthread_mutex_unlock(&g_lock);
	close(v->sock);
	log_info("viewer from %s left %s (%u bytes sent)", v->from, v->m->title,
		 (unsigned)rfbStatGetSentBytes(cl));
	session_close(v, (uint64_t)rfbStatGetSentBytes(cl));
	cl->clientData = NULL;
	free(v);
	atomic_fetch_sub(&nviewers, 1);
}

/* ---- the upstream thread ------------------------------------------------ */

static void *upstream(void *arg)
{
	struct mach *m = arg;
	char err[512];

	for (;;) {
		bool wake;
		pthread_mutex_lock(&g_lock);
		while (m->viewers == 0)
			pthread_cond_wait(&m->cv, &g_lock);
		wake = m->wake;
		pthread_mutex_unlock(&g_lock);

		if (wake)
			set_state(m, "waking", NULL);
		/* hostd attaches only with a grant's handle: that of a token
		 * redeemed for this machine, or what the last attach with it
		 * gave. */
		int64_t gid = 0;
		char handle[64];
		pthread_mutex_lock(&g_lock);
		bool have = grant_pick(m, &gid, handle);
		pthread_mutex_unlock(&g_lock);
		if (!have) {
			set_state(m, "stopped", "no viewer here may attach: ask for a new URL");
			sleep_ms(1000);
			continue;
		}
		json_t *req = json_pack("{s:s, s:s, s:s, s:b, s:s}", "op", "attach", "user",
					m->user, "machine", m->name, "wake", wake, "handle",
					handle);
		json_t *resp = NULL;
		int fds[2] = { -1, -1 };
		int rc = req ? hostfd_call(cfg.desktop_sock, req, &resp, fds, 2, err,
					   sizeof(err)) : -1;
		int fd = fds[0], afd = fds[1];
		json_decref(req);
		if (rc == 0) {  /* the grant's next handle (none: it was refused) */
			pthread_mutex_lock(&g_lock);
			grant_set_handle(gid, json_string_value(json_object_get(resp, "handle")));
			pthread_mutex_unlock(&g_lock);
		}
		if (rc < 0 || fd < 0) {
			const char *code = NULL;
			const char *msg = rc < 0 ? err : hostfd_error(resp, &code);
			if (code && !strcmp(code, "invalid_handle")) {
				/* The grant is no more: its viewers go; another
				 * viewer's grant is tried at once. */
				log_info("%s: attach refused: %s", m->title, msg);
				json_decref(resp);
				if (fd >= 0)
					close(fd);
				if (afd >= 0)
					close(afd);
				grants_cut(&gid, 1);
				continue;
			}
			/* hostd unreachable, the machine busy (being suspended,
			 * say), hostd's trouble: the wake is asked for again.
			 * A final refusal (no such machine, being deleted)
			 * clears it. */
			json_int_t status = json_integer_value(json_object_get(
				json_object_get(resp, "error"), "status"));
			bool transient = rc < 0 || (code && !strcmp(code, "busy")) ||
					 status >= 500;
			/* A machine that is not running: the viewer waits for it. */
			if (wake && transient)
				set_state(m, "waking", msg);
			else
				set_state(m, "stopped", code && !strcmp(code, "not_running") ?
					  NULL : msg);
			json_decref(resp);
			if (fd >= 0)
				close(fd);
			if (afd >= 0)
				close(afd);
			if (!transient) {
				pthread_mutex_lock(&g_lock);
				m->wake = false;
				pthread_mutex_unlock(&g_lock);
			}
			sleep_ms(1000);
			continue;
		}
		if (wake)
			log_info("%s: awake (hostd took %lld ms)", m->title,
				 (long long)json_integer_value(json_object_get(resp, "woke_ms")));
		json_decref(resp);
		pthread_mutex_lock(&g_lock);
		m->wake = false;
		pthread_mutex_unlock(&g_lock);

		rfbClient *c = rfbGetClient(8, 3, 4);
		if (!c) {
			close(fd);
			if (afd >= 0)
				close(afd);
			sleep_ms(1000);
			continue;
		}
		c->format = m->scr->serverFormat;  /* up_alloc may choose QEMU's */
		c->MallocFrameBuffer = up_alloc;
		c->GotFrameBufferUpdate = up_update;
		c->FinishedFrameBufferUpdate = up_finished;
		/* No GotXCutText: the clipboard is the agent's (QEMU 7.2 sends
		 * its own only as extended cut text, which libvncclient 0.9.14
		 * cannot read). */
		c->canHandleNewFBSize = TRUE;
		c->appData.encodingsString = "copyrect raw";
		c->listenSpecified = TRUE;  /* connected already: hostd's descriptor */
		c->sock = fd;
		rfbClientSetClientData(c, &tag, m);
		if (!rfbInitClient(c, NULL, NULL)) {  /* frees c (and closes fd), not its frame */
			free(m->upfb);
			m->upfb = NULL;
			if (afd >= 0)
				close(afd);
			set_state(m, "stopped", "the machine's screen did not answer");
			sleep_ms(1000);
			continue;
		}
		pthread_mutex_lock(&m->send_lock);
		m->up = c;
		pthread_mutex_unlock(&m->send_lock);
		agent_start(m, afd);
		set_state(m, "connected", NULL);
		for (;;) {
			pthread_mutex_lock(&g_lock);
			int n = m->viewers;
			pthread_mutex_unlock(&g_lock);
			if (n == 0)
				break;
			/* libvncclient may hold the start of the next message
			 * in its own buffer (c->buffered: it reads up to 8 KiB
			 * when it needs a few bytes), where select() in
			 * WaitForMessage cannot see it; waiting on the socket
			 * would leave it there until QEMU sent something
			 * else. */
			int r = c->buffered > 0 ? 1 : WaitForMessage(c, 200000);
			if (r < 0)
				break;
			if (r == 0)
				continue;
			pthread_mutex_lock(&m->send_lock);
			rfbBool ok = HandleRFBServerMessage(c);
			pthread_mutex_unlock(&m->send_lock);
			if (!ok)
				break;
		}
		pthread_mutex_lock(&m->send_lock);
		m->up = NULL;
		pthread_mutex_unlock(&m->send_lock);
		agent_stop(m);
		rfbClientCleanup(c);
		free(m->upfb);
		m->upfb = NULL;
		pthread_mutex_lock(&g_lock);
		int left = m->viewers;
		pthread_mutex_unlock(&g_lock);
		if (left > 0) {
			/* QEMU went away: stopped, restarting or suspended.  Keep
			 * the viewers and attach again. */
			set_state(m, "stopped", NULL);
			sleep_ms(1000);
		} else {
			log_info("%s: no viewers, upstream closed", m->title);
			/* Not offered to the guest hours later. */
			pthread_mutex_lock(&m->agent_lock);
			pending_set(m, NULL, 0);
			pthread_mutex_unlock(&m->agent_lock);
		}
	}
	return NULL;
}

/* USER's machine NAME's screen, made if need be (under g_lock). */
static struct mach *mach_get(const char *user, const char *name)
{
	struct mach *m;

	for (m = machs; m; m = m->next)
		if (!strcmp(m->user, user) && !strcmp(m->name, name))
			return m;
	m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	snprintf(m->user, sizeof(m->user), "%s", user);
	snprintf(m->name, sizeof(m->name), "%s", name);
	snprintf(m->title, sizeof(m->title), "%s/%s", user, name);
	m->w = 720;
	m->h = 400;
	m->fb = calloc((size_t)m->w * m->h, 4);
	m->scr = rfbGetScreen(NULL, NULL, m->w, m->h, 8, 3, 4);
	if (!m->fb || !m->scr) {
		free(m->fb);
		free(m);
		return NULL;
	}
	m->scr->frameBuffer = m->fb;
	m->scr->desktopName = m->name;
	m->scr->port = 0;          /* no listening socket: viewers come from us */
	m->scr->ipv6port = 0;
	m->scr->autoPort = FALSE;
	m->scr->httpDir = NULL;
	m->scr->alwaysShared = TRUE;
	m->scr->backgroundLoop = TRUE;  /* a thread pair per viewer */
	/* 1 ms: libvncserver sleeps this before every update and while a
	 * viewer is on hold (0 would spin); the cap is v_display's. */
	m->scr->deferUpdateTime = 1;
	m->scr->displayHook = v_display;
	m->scr->cursor = NULL;
	m->scr->kbdAddEvent = v_key;
	m->scr->ptrAddEvent = v_ptr;
	m->scr->setXCutText = v_cut;
	m->scr->setXCutTextUTF8 = v_cut_utf8;
	m->scr->screenData = m;
	rfbInitServer(m->scr);
	pthread_mutex_init(&m->send_lock, NULL);
	pthread_mutex_init(&m->agent_lock, NULL);
	m->agent_fd = -1;
	pthread_cond_init(&m->cv, NULL);
	m->state = "connecting";
	if (pthread_create(&m->thread, NULL, upstream, m) != 0) {
		rfbScreenCleanup(m->scr);
		free(m->fb);
		free(m);
		return NULL;
	}
	pthread_detach(m->thread);
	m->next = machs;
	machs = m;
	return m;
}

static int64_t session_open(const char *user, const char *name, const char *from)
{
	char err[256];
	long status = 0;
	json_t *resp = NULL;
	json_t *body = json_pack("{s:s, s:s, s:s, s:s}", "user", user, "machine", name,
				 "kind", "desktop", "from", from);
	int64_t id = -1;

	if (body && hostapi_call(cfg.hostd_sock, "POST", "/v1/gateway/sessions", body,
				 &status, &resp, err, sizeof(err)) < 0)
		log_warn("open a session for %s/%s: %s", user, name, err);
	else if (status != 201)
		log_warn("open a session for %s/%s: %s", user, name,
			 hostapi_message(resp, "refused"));
	else
		id = (int64_t)json_integer_value(json_object_get(resp, "session"));
	json_decref(body);
	json_decref(resp);
	return id;
}

/* Whether A equals B, in a time that depends on their lengths only. */
static bool key_eq(const char *a, const char *b)
{
	size_t al = strlen(a), bl = strlen(b);
	unsigned char diff = al != bl;

	for (size_t i = 0; i < al && i < bl; i++)
		diff |= (unsigned char)(a[i] ^ b[i]);
	return diff == 0;
}

int screen_add_viewer(const char *user, const char *name, bool wake, int fd,
		      const char *token, const char *prev, const char *from, int64_t grant,
		      const char *handle)
{
	struct mach *m;
	struct viewer *v = calloc(1, sizeof(*v));
	rfbClientPtr cl;

	atomic_fetch_add(&nviewers, 1);
	pthread_mutex_lock(&g_lock);
	m = v ? mach_get(user, name) : NULL;
	if (v)
		v->sock = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (m && v->sock < 0)
		m = NULL;
	if (m) {
		if (handle)
			grant_put(grant, user, name, handle);
		m->viewers++;
		if (wake) {
			m->wake = true;
			m->state = "waking";
		}
		pthread_cond_broadcast(&m->cv);
	}
	pthread_mutex_unlock(&g_lock);
	if (!m) {
		if (v && v->sock >= 0)
			close(v->sock);
		free(v);
		atomic_fetch_sub(&nviewers, 1);
		close(fd);
		return -1;
	}
	/* Reads the WebSocket request and answers it, then RFB's greeting. */
	cl = rfbNewClient(m->scr, fd);
	if (!cl) {
		log_info("viewer from %s: WebSocket handshake failed", from);
		goto undo;
	}
	/* libvncserver 0.9.14 frees wspath in rfbCloseClient without clearing
	 * it, and a viewer that goes away during an update is closed twice
	 * (its input and its output thread): a double free that crashed the
	 * bridge (fixed upstream in 5ea5fc30).  Nothing else reads it, and it
	 * holds the token: drop it now. */
	free(cl->wspath);
	cl->wspath = NULL;
	snprintf(v->token, sizeof(v->token), "%s", token);
	snprintf(v->prev, sizeof(v->prev), "%s", prev ? prev : "");
	snprintf(v->from, sizeof(v->from), "%s", from);
	{
		static const char alphabet[] =
			"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
		unsigned char raw[32];
		if (random_bytes(raw, sizeof(raw)) < 0) {
			rfbCloseClient(cl);
			rfbClientConnectionGone(cl);
			goto undo;
		}
		for (size_t i = 0; i < sizeof(raw); i++)
			v->resume[i] = alphabet[raw[i] & 63];
		v->resume[sizeof(raw)] = '\0';
	}
	v->m = m;
	v->grant = grant;
	v->session = session_open(user, name, from);
	pthread_mutex_lock(&g_lock);
	v->id = ++viewer_ids;
	v->next = viewers;
	viewers = v;
	pthread_mutex_unlock(&g_lock);
	cl->clientData = v;
	cl->clientGoneHook = v_gone;
	log_info("viewer from %s on %s (session %lld)", from, m->title, (long long)v->session);
	rfbStartOnHoldClient(cl);
	return 0;
undo:
	/* The machine counted this viewer when it was found. */
	pthread_mutex_lock(&g_lock);
	m->viewers--;
	pthread_mutex_unlock(&g_lock);
	close(v->sock);
	free(v);
	atomic_fetch_sub(&nviewers, 1);
	return -1;
}

void screen_refused(const char *token, const char *machine, const char *message)
{
	pthread_mutex_lock(&g_lock);
	refused_add(token, machine, message);
	pthread_mutex_unlock(&g_lock);
}

char *screen_state(const char *token, const char *presented)
{
	json_t *j = NULL;
	char *s;

	pthread_mutex_lock(&g_lock);
	/* A viewer that was cut answers as refused (below), whatever its
	 * machine's screen says by then (a deleted machine's is "stopped"). */
	for (struct viewer *v = viewers; v && !j; v = v->next)
		if (!v->cut && !strcmp(v->token, token)) {
			j = json_pack("{s:s, s:s, s:s, s:i, s:i}", "state", v->m->state,
				      "machine", v->m->name, "message", v->m->message,
				      "width", v->m->w, "height", v->m->h);
			/* The resume key once: to the page, which asks at once.
			 * A viewer that came back with a key gives its next
			 * one only to whoever shows that key: whoever learns
			 * the spent token later gets nothing. */
			if (j && !v->resume_told &&
			    (!v->prev[0] || (presented && key_eq(v->prev, presented)))) {
				json_object_set_new(j, "resume", json_string(v->resume));
				v->resume_told = true;
			}
		}
	for (int k = 1; k <= REFUSED_SLOTS && !j; k++) {  /* newest first */
		int i = ((refused_next - k) % REFUSED_SLOTS + REFUSED_SLOTS) % REFUSED_SLOTS;
		if (refused[i].token[0] && (!strcmp(refused[i].token, token) ||
					    (presented && !strcmp(refused[i].token, presented))))
			j = json_pack("{s:s, s:s, s:s}", "state", "refused", "machine",
				      refused[i].machine, "message", refused[i].message);
	}
	pthread_mutex_unlock(&g_lock);
	if (!j)
		j = json_pack("{s:s}", "state", "unknown");
	s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	return s;
}

int screen_resume(const char *key, const char *user, const char *name, char *token,
		  size_t toklen, int64_t *grant)
{
	int rc = -1;
	int64_t now = mono_ms();

	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < RESUME_SLOTS; i++) {
		if (!resumes[i].key[0] || strcmp(resumes[i].key, key) != 0)
			continue;
		if (now <= resumes[i].until_ms && !strcmp(resumes[i].user, user) &&
		    !strcmp(resumes[i].name, name)) {
			snprintf(token, toklen, "%s", resumes[i].token);
			*grant = resumes[i].grant;
			rc = 0;
		}
		resumes[i].key[0] = '\0';  /* once */
		break;
	}
	pthread_mutex_unlock(&g_lock);
	return rc;
}

void screen_reopen_sessions(void)
{
	struct again {
		uint64_t id;
		char user[64], name[64], from[64];
		int64_t session;
	} *a = NULL;
	struct viewer *v;
	size_t n = 0, cap = 0, opened = 0;

	/* What the calls need, copied out: hostd is not asked under g_lock. */
	pthread_mutex_lock(&g_lock);
	for (v = viewers; v; v = v->next) {
		if (n == cap) {
			struct again *b = realloc(a, (cap ? cap * 2 : 16) * sizeof(*a));
			if (!b)
				break;
			a = b;
			cap = cap ? cap * 2 : 16;
		}
		a[n].id = v->id;
		snprintf(a[n].user, sizeof(a[n].user), "%s", v->m->user);
		snprintf(a[n].name, sizeof(a[n].name), "%s", v->m->name);
		snprintf(a[n].from, sizeof(a[n].from), "%s", v->from);
		n++;
	}
	pthread_mutex_unlock(&g_lock);
	for (size_t i = 0; i < n; i++)
		a[i].session = session_open(a[i].user, a[i].name, a[i].from);
	/* Back to the viewers still here; a session of one that left
	 * meanwhile is closed again. */
	pthread_mutex_lock(&g_lock);
	for (size_t i = 0; i < n; i++) {
		for (v = viewers; v && v->id != a[i].id; v = v->next)
			;
		if (v) {
			v->session = a[i].session;
			a[i].session = -1;
			opened++;
		}
	}
	pthread_mutex_unlock(&g_lock);
	for (size_t i = 0; i < n; i++) {
		struct viewer gone = { .session = a[i].session };
		session_close(&gone, 0);
	}
	free(a);
	log_info("hostd restarted: reopened %zu desktop sessions", opened);
}
