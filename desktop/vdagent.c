#include "desktop/vdagent.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/banned.h"

/* spice-protocol's vd_agent.h */
#define VDP_CLIENT_PORT 1
#define VDP_SERVER_PORT 2
#define VD_AGENT_PROTOCOL 1
#define VD_AGENT_MAX_DATA_SIZE 2048
enum {
	VD_AGENT_CLIPBOARD = 4,
	VD_AGENT_ANNOUNCE_CAPABILITIES = 6,
	VD_AGENT_CLIPBOARD_GRAB = 7,
	VD_AGENT_CLIPBOARD_REQUEST = 8,
	VD_AGENT_CLIPBOARD_RELEASE = 9,
};
#define VD_AGENT_CLIPBOARD_NONE 0
#define VD_AGENT_CLIPBOARD_UTF8_TEXT 1
#define VD_AGENT_CAP_CLIPBOARD_BY_DEMAND 5

#define CHUNK_HDR 8
#define MSG_HDR 20
/* The longest chunk taken from the guest: spice-vdagentd sends a message
 * in one chunk, so a clipboard over VDAGENT_MSG_MAX comes as one long
 * chunk, to be skipped without losing step; beyond this, nonsense. */
#define CHUNK_MAX (16u << 20)
/* A connection whose stream is out of step this often is given up. */
#define RESYNCS_MAX 20
/* Capability words taken from an announce (the protocol has one today). */
#define CAPS_WORDS_MAX 64

struct vdagent {
	/* The chunk being read. */
	unsigned char chdr[CHUNK_HDR];
	size_t chdr_got;
	uint32_t chunk_port;
	size_t chunk_left;      /* its bytes still to come */
	/* The message being assembled from VDP_CLIENT_PORT chunks. */
	unsigned char mhdr[MSG_HDR];
	size_t mhdr_got;
	uint32_t type, size;
	unsigned char *data;    /* SIZE bytes, NULL while skipping */
	size_t data_got;
	bool skip;              /* over VDAGENT_MSG_MAX: read, not kept */
	int resyncs;            /* times the stream was out of step */
	/* The clipboard. */
	bool guest_caps;        /* the guest announced itself ... */
	bool by_demand;         /* ... with CLIPBOARD_BY_DEMAND */
	bool host_owner;        /* the host's text is the clipboard */
	bool grab_pending;      /* ... and the guest was not told yet */
	char *host_text;
	size_t host_len;
};

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

struct vdagent *vdagent_new(void)
{
	return calloc(1, sizeof(struct vdagent));
}

void vdagent_free(struct vdagent *a)
{
	if (!a)
		return;
	free(a->data);
	free(a->host_text);
	free(a);
}

bool vdagent_ready(const struct vdagent *a)
{
	return a->guest_caps && a->by_demand;
}

/* One message of TYPE to the guest: HEAD (HEADLEN bytes) then BODY (LEN),
 * in chunks of at most VD_AGENT_MAX_DATA_SIZE. */
static void send_msg(struct buf *out, uint32_t type, const void *head, size_t headlen,
		     const void *body, size_t len)
{
	unsigned char mh[MSG_HDR] = { 0 };
	const unsigned char *parts[3] = { mh, head, body };
	size_t lens[3] = { MSG_HDR, headlen, len };
	size_t total = MSG_HDR + headlen + len, part = 0, off = 0;

	put32(mh, VD_AGENT_PROTOCOL);
	put32(mh + 4, type);
	/* mh + 8: opaque, 0 */
	put32(mh + 16, (uint32_t)(headlen + len));
	buf_reserve(out, total + (total / VD_AGENT_MAX_DATA_SIZE + 1) * CHUNK_HDR);
	while (total > 0) {
		size_t n = total < VD_AGENT_MAX_DATA_SIZE ? total : VD_AGENT_MAX_DATA_SIZE;
		unsigned char ch[CHUNK_HDR];
		put32(ch, VDP_CLIENT_PORT);
		put32(ch + 4, (uint32_t)n);
		buf_add(out, ch, sizeof(ch));
		total -= n;
		while (n > 0) {
			size_t k = lens[part] - off < n ? lens[part] - off : n;
			if (k)
				buf_add(out, parts[part] + off, k);
			off += k;
			n -= k;
			if (off == lens[part]) {
				part++;
				off = 0;
			}
		}
	}
}

static void send_u32(struct buf *out, uint32_t type, uint32_t v)
{
	unsigned char b[4];

	put32(b, v);
	send_msg(out, type, b, sizeof(b), NULL, 0);
}

static void send_caps(struct buf *out, bool request)
{
	unsigned char b[8];

	put32(b, request ? 1 : 0);
	put32(b + 4, 1u << VD_AGENT_CAP_CLIPBOARD_BY_DEMAND);
	send_msg(out, VD_AGENT_ANNOUNCE_CAPABILITIES, b, sizeof(b), NULL, 0);
}

void vdagent_hello(struct vdagent *a, struct buf *out)
{
	(void)a;
	send_caps(out, true);
}

int vdagent_offer(struct vdagent *a, const char *text, size_t len, struct buf *out)
{
	char *copy;

	if (len > VDAGENT_TEXT_MAX)
		return -1;
	copy = malloc(len + 1);
	if (!copy)
		return -1;
	memcpy(copy, text, len);
	copy[len] = '\0';
	free(a->host_text);
	a->host_text = copy;
	a->host_len = len;
	a->host_owner = true;
	a->grab_pending = !vdagent_ready(a);
	if (!a->grab_pending)
		send_u32(out, VD_AGENT_CLIPBOARD_GRAB, VD_AGENT_CLIPBOARD_UTF8_TEXT);
	return 0;
}

const char *vdagent_host_text(const struct vdagent *a, size_t *len)
{
	*len = a->host_owner ? a->host_len : 0;
	return a->host_owner ? a->host_text : NULL;
}

/* A whole message from the guest (TYPE, SIZE bytes DATA).  A message whose
 * content is malformed is ignored: the stream itself is still in step. */
static void handle(struct vdagent *a, uint32_t type, const unsigned char *data, uint32_t size,
		   struct buf *out, char **text, size_t *textlen)
{
	switch (type) {
	case VD_AGENT_ANNOUNCE_CAPABILITIES: {
		if (size < 4 || size % 4 != 0) {
			log_info("agent: a capabilities message of %u bytes ignored", size);
			return;
		}
		uint32_t words = (size - 4) / 4;
		bool request = get32(data) != 0;
		a->guest_caps = true;
		a->by_demand = words > 0 && (get32(data + 4) & (1u << VD_AGENT_CAP_CLIPBOARD_BY_DEMAND));
		log_info("agent: the guest's agent is there (clipboard %s)",
			 a->by_demand ? "by demand" : "not offered");
		if (request)
			send_caps(out, false);
		/* The host's text offered before the guest could take it.
		 * Not again to an agent that restarted: it may grab at its
		 * start too, and two grabs that cross cancel each other
		 * (each side gives way to the other's). */
		if (a->grab_pending && a->host_owner && vdagent_ready(a)) {
			send_u32(out, VD_AGENT_CLIPBOARD_GRAB, VD_AGENT_CLIPBOARD_UTF8_TEXT);
			a->grab_pending = false;
		}
		break;
	}
	case VD_AGENT_CLIPBOARD_GRAB: {
		bool utf8 = false;
		if (size % 4 != 0 || size > 4 * CAPS_WORDS_MAX) {
			log_info("agent: a clipboard grab of %u bytes ignored", size);
			return;
		}
		for (uint32_t i = 0; i < size / 4; i++)
			if (get32(data + 4 * i) == VD_AGENT_CLIPBOARD_UTF8_TEXT)
				utf8 = true;
		/* The guest's clipboard now, whatever it holds. */
		a->host_owner = false;
		a->grab_pending = false;
		if (utf8)
			send_u32(out, VD_AGENT_CLIPBOARD_REQUEST, VD_AGENT_CLIPBOARD_UTF8_TEXT);
		break;
	}
	case VD_AGENT_CLIPBOARD_REQUEST: {
		unsigned char b[4];
		if (size != 4) {
			log_info("agent: a clipboard request of %u bytes ignored", size);
			return;
		}
		uint32_t want = get32(data);
		/* What the host does not hold is answered empty (the guest's
		 * paste then ends rather than waits). */
		bool have = want == VD_AGENT_CLIPBOARD_UTF8_TEXT && a->host_owner && a->host_text;
		put32(b, have ? VD_AGENT_CLIPBOARD_UTF8_TEXT : VD_AGENT_CLIPBOARD_NONE);
		send_msg(out, VD_AGENT_CLIPBOARD, b, sizeof(b), have ? a->host_text : NULL,
			 have ? a->host_len : 0);
		break;
	}
	case VD_AGENT_CLIPBOARD: {
		if (size < 4 || get32(data) != VD_AGENT_CLIPBOARD_UTF8_TEXT)
			return;
		if (size - 4 > VDAGENT_TEXT_MAX) {
			log_info("agent: a clipboard text of %u bytes is over %u: dropped",
				 size - 4, VDAGENT_TEXT_MAX);
			return;
		}
		char *t = malloc(size - 4 + 1);
		if (!t)
			return;
		memcpy(t, data + 4, size - 4);
		t[size - 4] = '\0';
		free(*text);
		*text = t;
		*textlen = size - 4;
		break;
	}
	case VD_AGENT_CLIPBOARD_RELEASE:
		/* The guest's clipboard is empty: the viewers keep what they
		 * were shown. */
		break;
	default:
		/* Mouse, monitors, file transfer...: not ours. */
		break;
	}
}

int vdagent_feed(struct vdagent *a, const void *data, size_t len, struct buf *out,
		 char **text, size_t *textlen, char *err, size_t errlen)
{
	const unsigned char *p = data;

	*text = NULL;
	*textlen = 0;
	while (len > 0) {
		if (a->chunk_left == 0) {
			/* A chunk header. */
			size_t k = CHUNK_HDR - a->chdr_got < len ? CHUNK_HDR - a->chdr_got : len;
			memcpy(a->chdr + a->chdr_got, p, k);
			a->chdr_got += k;
			p += k;
			len -= k;
			if (a->chdr_got < CHUNK_HDR)
				break;
			a->chdr_got = 0;
			a->chunk_port = get32(a->chdr);
			uint32_t size = get32(a->chdr + 4);
			if (a->chunk_port != VDP_CLIENT_PORT && a->chunk_port != VDP_SERVER_PORT) {
				snprintf(err, errlen, "a chunk for port %u", a->chunk_port);
				goto resync;
			}
			if (size == 0 || size > CHUNK_MAX) {
				snprintf(err, errlen, "a chunk of %u bytes", size);
				goto resync;
			}
			a->chunk_left = size;
			continue;
		}
		size_t k = a->chunk_left < len ? a->chunk_left : len;
		if (a->chunk_port != VDP_CLIENT_PORT) {
			/* For spice-server: nobody here. */
			p += k;
			len -= k;
			a->chunk_left -= k;
			continue;
		}
		if (a->mhdr_got < MSG_HDR) {
			size_t h = MSG_HDR - a->mhdr_got < k ? MSG_HDR - a->mhdr_got : k;
			memcpy(a->mhdr + a->mhdr_got, p, h);
			a->mhdr_got += h;
			p += h;
			len -= h;
			a->chunk_left -= h;
			if (a->mhdr_got < MSG_HDR)
				continue;
			if (get32(a->mhdr) != VD_AGENT_PROTOCOL) {
				snprintf(err, errlen, "a message of protocol %u", get32(a->mhdr));
				goto resync;
			}
			a->type = get32(a->mhdr + 4);
			a->size = get32(a->mhdr + 16);
			a->data_got = 0;
			a->skip = a->size > VDAGENT_MSG_MAX;
			if (a->skip)
				log_info("agent: a message (type %u) of %u bytes skipped", a->type,
					 a->size);
			else if (a->size > 0 && !(a->data = malloc(a->size))) {
				snprintf(err, errlen, "out of memory for a message of %u bytes",
					 a->size);
				return -1;
			}
			k -= h;
		}
		/* The message's data.  A chunk never holds more than the rest
		 * of its message (spice-vdagentd's rule too). */
		if (a->chunk_left > a->size - a->data_got) {
			snprintf(err, errlen, "a chunk longer than its message");
			goto resync;
		}
		if (k > a->size - a->data_got)
			k = a->size - a->data_got;
		if (k && !a->skip)
			memcpy(a->data + a->data_got, p, k);
		a->data_got += k;
		p += k;
		len -= k;
		a->chunk_left -= k;
		if (a->data_got == a->size) {
			if (!a->skip)
				handle(a, a->type, a->data, a->size, out, text, textlen);
			free(a->data);
			a->data = NULL;
			a->mhdr_got = 0;
			a->data_got = 0;
			a->skip = false;
		}
		continue;
resync:
		/* Out of step: a message cut short (the host's end of the port
		 * was closed and opened again between a guest's writes, an
		 * agent killed mid-write) or a guest talking nonsense.  Start
		 * afresh at the next place in DATA that looks like the start
		 * of a message (chunk port 1, then protocol 1 8 bytes on), and
		 * ask the agent to announce itself again; give up when it
		 * happens too often. */
		if (++a->resyncs > RESYNCS_MAX) {
			size_t l = strlen(err);
			snprintf(err + l, errlen - l, " (out of step %d times)", RESYNCS_MAX);
			return -1;
		}
		log_info("agent: out of step (%s): looking for the next message", err);
		err[0] = '\0';
		free(a->data);
		a->data = NULL;
		a->chdr_got = a->mhdr_got = a->data_got = a->chunk_left = 0;
		a->skip = false;
		while (len >= 12 && !(get32(p) == VDP_CLIENT_PORT && get32(p + 8) == VD_AGENT_PROTOCOL)) {
			p++;
			len--;
		}
		if (len < 12)
			len = 0;  /* nothing like it here: what comes next is tried */
		send_caps(out, true);
	}
	return 0;
}

char *vdagent_latin1_to_utf8(const char *s, size_t len, size_t *outlen)
{
	char *o = malloc(2 * len + 1);
	size_t n = 0;

	if (!o)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x80) {
			o[n++] = (char)c;
		} else {
			o[n++] = (char)(0xc0 | c >> 6);
			o[n++] = (char)(0x80 | (c & 0x3f));
		}
	}
	o[n] = '\0';
	*outlen = n;
	return o;
}

char *vdagent_utf8_to_latin1(const char *s, size_t len, size_t *outlen)
{
	const unsigned char *u = (const unsigned char *)s;
	char *o = malloc(len + 1);
	size_t n = 0, i = 0;

	if (!o)
		return NULL;
	while (i < len) {
		unsigned char c = u[i];
		size_t need;
		uint32_t cp;
		if (c < 0x80) {
			o[n++] = (char)c;
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			need = 1;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			need = 2;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			need = 3;
			cp = c & 0x07;
		} else {
			o[n++] = '?';  /* a stray continuation byte, or not UTF-8 */
			i++;
			continue;
		}
		size_t j = 1;
		while (j <= need && i + j < len && (u[i + j] & 0xc0) == 0x80) {
			cp = cp << 6 | (u[i + j] & 0x3f);
			j++;
		}
		if (j <= need) {
			o[n++] = '?';  /* cut short: what was read is one '?' */
			i += j;
			continue;
		}
		o[n++] = cp <= 0xff ? (char)cp : '?';
		i += j;
	}
	o[n] = '\0';
	*outlen = n;
	return o;
}
