#include "web/proxy.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/util.h"
#include "web/reply.h"
#include "common/banned.h"

/* What is read from hostd at once; and the buffer's most, for an answer's
 * head. */
#define IO_BUF (64 << 10)
#define HEAD_MAX (256 << 10)
/* How long a connect to hostd is tried while its listen backlog is full
 * (as common/hostapi.c does). */
#define CONNECT_WAIT_MS 5000

/* How hostd's answer's body ends. */
enum body_end {
	END_NONE,       /* no body (a 204, 304, or a HEAD request's answer) */
	END_LENGTH,     /* after Content-Length bytes */
	END_CHUNKED,    /* chunked, decoded here */
	END_CLOSE,      /* when hostd closes */
};

struct proxy_req {
	int fd;                 /* hostd's connection, -1 when there is none */
	int client_fd;          /* the client's socket, watched for its going */
	bool has_body;          /* the request has a body */
	bool up_chunked;        /* which goes to hostd chunked */
	bool broken;            /* a write to hostd failed: its answer may follow */
	bool answered;          /* an answer is queued */
	bool head_req;          /* a HEAD request: the answer has no body */
	/* Bytes read from hostd and not used yet: buf[off, len). */
	char *buf;
	size_t off, len, cap;
	enum body_end end;
	uint64_t left;          /* END_LENGTH: bytes to come; END_CHUNKED: of this chunk */
	bool crlf_owed;         /* END_CHUNKED: a chunk's data ended, its CRLF is next */
	bool eof;               /* hostd closed */
};

/* Client headers passed on (the rest are the client's and berth-web's
 * business, not hostd's). */
static const char *const passed[] = { "Authorization", "Content-Type", "Accept",
				      "X-Berth-User", NULL };
/* hostd's headers not passed back: the connection's own, and what
 * libmicrohttpd writes itself. */
static const char *const dropped[] = { "Connection", "Keep-Alive", "Transfer-Encoding",
				       "Content-Length", "Date", "Proxy-Connection", "TE",
				       "Trailer", "Upgrade", NULL };

static int hostd_connect(const char *sock)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int64_t t0 = mono_ms();
	useconds_t pause = 1000;

	if (strlen(sock) >= sizeof(sa.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	for (;;) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -1;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		int errnum = errno;
		close(fd);
		if (errnum != EAGAIN || mono_ms() - t0 >= CONNECT_WAIT_MS) {
			errno = errnum;
			return -1;
		}
		usleep(pause);
		if (pause < 50000)
			pause *= 2;
	}
}

/* LEN bytes of DATA to hostd; -1 when it does not take them (it closed). */
static int to_hostd(struct proxy_req *r, const void *data, size_t len)
{
	const char *p = data;

	while (len > 0) {
		ssize_t n = send(r->fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* More of hostd's answer into the buffer, waiting for it: the number of
 * bytes, 0 when hostd closed, -1 on an error or when the client went. */
static ssize_t fill(struct proxy_req *r)
{
	if (r->off == r->len) {
		r->off = r->len = 0;
	} else if (r->off > 0 && r->len == r->cap) {
		memmove(r->buf, r->buf + r->off, r->len - r->off);
		r->len -= r->off;
		r->off = 0;
	}
	if (r->len == r->cap) {
		if (r->cap >= HEAD_MAX)
			return -1;
		r->cap = r->cap ? r->cap * 2 : IO_BUF;
		r->buf = realloc(r->buf, r->cap);
		if (!r->buf)
			abort();
	}
	for (;;) {
		struct pollfd p[2] = { { .fd = r->fd, .events = POLLIN },
				       { .fd = r->client_fd, .events = POLLRDHUP } };
		nfds_t np = r->client_fd >= 0 ? 2 : 1;
		if (poll(p, np, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		/* The client went: nothing more is read for it, and closing
		 * hostd's connection ends what hostd does for it. */
		if (np == 2 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
			return -1;
		if (!p[0].revents)
			continue;
		ssize_t n = read(r->fd, r->buf + r->len, r->cap - r->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n > 0)
			r->len += (size_t)n;
		return n;
	}
}

/* A line of buf[off, len) ending in CRLF: its length (without the CRLF),
 * -1 when it is not all there yet, -2 when it ends in a bare LF. */
static ssize_t line_len(const struct proxy_req *r)
{
	const char *s = r->buf + r->off, *nl = memchr(s, '\n', r->len - r->off);

	if (!nl)
		return -1;
	if (nl == s || nl[-1] != '\r')
		return -2;
	return nl - s - 1;
}

/* hostd's answer's head, parsed: STATUS, and the header lines (name and
 * value, NUL-terminated, pointing into *TEXT, which the caller frees). */
struct head {
	int status;
	char *text;
	char *name[64], *value[64];
	size_t n;
};

/* Read and parse the head of hostd's next answer (1xx included).  0, or
 * -1 when hostd closed, sent no answer or a malformed one, or the client
 * went. */
static int read_head(struct proxy_req *r, struct head *h)
{
	char *end = NULL, *line, *save = NULL;
	size_t n;

	memset(h, 0, sizeof(*h));
	while (!(r->len > r->off &&
		 (end = memmem(r->buf + r->off, r->len - r->off, "\r\n\r\n", 4)))) {
		if (fill(r) <= 0)
			return -1;
	}
	n = (size_t)(end - (r->buf + r->off)) + 2;
	h->text = malloc(n + 1);
	if (!h->text)
		abort();
	memcpy(h->text, r->buf + r->off, n);
	h->text[n] = '\0';
	r->off += n + 2;
	line = strtok_r(h->text, "\r\n", &save);
	if (!line || strncmp(line, "HTTP/1.", 7) != 0 || strlen(line) < 12 || line[8] != ' ')
		goto bad;
	h->status = atoi(line + 9);
	if (h->status < 100 || h->status > 599)
		goto bad;
	while ((line = strtok_r(NULL, "\r\n", &save)) && h->n < 64) {
		char *colon = strchr(line, ':');
		if (!colon || colon == line)
			goto bad;
		*colon = '\0';
		for (colon++; *colon == ' ' || *colon == '\t'; colon++)
			;
		h->name[h->n] = line;
		h->value[h->n++] = colon;
	}
	return 0;
bad:
	free(h->text);
	h->text = NULL;
	return -1;
}

static const char *head_get(const struct head *h, const char *name)
{
	for (size_t i = 0; i < h->n; i++)
		if (!strcasecmp(h->name[i], name))
			return h->value[i];
	return NULL;
}

/* The chunk size line at buf[off]: consumed and 0 with *SIZE, 1 when it
 * is not all there yet, -1 when it is malformed. */
static int chunk_size(struct proxy_req *r, uint64_t *size)
{
	ssize_t n = line_len(r);
	char *end;

	if (n == -1)
		return 1;
	if (n < 0)
		return -1;
	errno = 0;
	*size = strtoull(r->buf + r->off, &end, 16);
	if (errno || end == r->buf + r->off || (*end != ';' && *end != '\r'))
		return -1;
	r->off += (size_t)n + 2;
	return 0;
}

/* libmicrohttpd's reader of the answer's body: hostd's, as it comes. */
static ssize_t body_read(void *cls, uint64_t pos, char *out, size_t max)
{
	struct proxy_req *r = cls;

	(void)pos;
	for (;;) {
		size_t avail = r->len - r->off, n;
		switch (r->end) {
		case END_NONE:
			return MHD_CONTENT_READER_END_OF_STREAM;
		case END_LENGTH:
			if (r->left == 0)
				return MHD_CONTENT_READER_END_OF_STREAM;
			if (!avail)
				break;
			n = avail < max ? avail : max;
			n = n < r->left ? n : (size_t)r->left;
			memcpy(out, r->buf + r->off, n);
			r->off += n;
			r->left -= n;
			return (ssize_t)n;
		case END_CLOSE:
			if (avail) {
				n = avail < max ? avail : max;
				memcpy(out, r->buf + r->off, n);
				r->off += n;
				return (ssize_t)n;
			}
			if (r->eof)
				return MHD_CONTENT_READER_END_OF_STREAM;
			break;
		case END_CHUNKED:
			if (r->left) {
				if (!avail)
					break;
				n = avail < max ? avail : max;
				n = n < r->left ? n : (size_t)r->left;
				memcpy(out, r->buf + r->off, n);
				r->off += n;
				r->left -= n;
				r->crlf_owed = r->left == 0;
				return (ssize_t)n;
			}
			if (r->crlf_owed) {
				if (avail < 2)
					break;
				if (memcmp(r->buf + r->off, "\r\n", 2) != 0)
					return MHD_CONTENT_READER_END_WITH_ERROR;
				r->off += 2;
				r->crlf_owed = false;
				continue;
			}
			if (r->eof)    /* the last chunk was read: trailers follow */
				goto trailers;
			{
				uint64_t size;
				int rc = chunk_size(r, &size);
				if (rc < 0)
					return MHD_CONTENT_READER_END_WITH_ERROR;
				if (rc > 0)
					break;
				if (size == 0) {
					r->eof = true;
					goto trailers;
				}
				r->left = size;
			}
			continue;
trailers:
			{
				ssize_t l = line_len(r);
				if (l == -1)
					break;
				if (l < 0)
					return MHD_CONTENT_READER_END_WITH_ERROR;
				r->off += (size_t)l + 2;
				if (l == 0)
					return MHD_CONTENT_READER_END_OF_STREAM;
				continue;
			}
		}
		ssize_t got = fill(r);
		if (got < 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (got == 0) {
			if (r->end != END_CLOSE)
				return MHD_CONTENT_READER_END_WITH_ERROR;  /* cut short */
			r->eof = true;
		}
	}
}

/* Queue hostd's answer (head H, its body still to be read) for the
 * client. */
static enum MHD_Result answer(struct proxy_req *r, struct MHD_Connection *c, struct head *h)
{
	const char *te = head_get(h, "Transfer-Encoding"), *cl = head_get(h, "Content-Length");
	struct MHD_Response *resp;
	enum MHD_Result ret;
	uint64_t size = MHD_SIZE_UNKNOWN;

	if (r->head_req || h->status == 204 || h->status == 304) {
		r->end = END_NONE;
		size = 0;
	} else if (te && !strcasecmp(te, "chunked")) {
		r->end = END_CHUNKED;
	} else if (cl) {
		char *end;
		errno = 0;
		size = strtoull(cl, &end, 10);
		if (errno || *end || end == cl)
			return web_error(c, 502, "bad_gateway", "berth-hostd's answer has a "
					  "malformed Content-Length");
		r->end = END_LENGTH;
		r->left = size;
	} else {
		r->end = END_CLOSE;
	}
	resp = size == 0 ? MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT)
			 : MHD_create_response_from_callback(size, IO_BUF, body_read, r, NULL);
	if (!resp)
		return MHD_NO;
	for (size_t i = 0; i < h->n; i++) {
		size_t k;
		for (k = 0; dropped[k] && strcasecmp(dropped[k], h->name[i]) != 0; k++)
			;
		if (!dropped[k])
			MHD_add_response_header(resp, h->name[i], h->value[i]);
	}
	if (!head_get(h, "X-Content-Type-Options"))
		MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	if (!head_get(h, "Cache-Control"))
		MHD_add_response_header(resp, "Cache-Control", "no-store");
	r->answered = true;
	ret = MHD_queue_response(c, (unsigned)h->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* A header value safe to copy into a request head: printable, no CR/LF. */
static bool value_ok(const char *v)
{
	for (; *v; v++)
		if ((unsigned char)*v < 0x20 && *v != '\t')
			return false;
	return true;
}

/* The head of the request, to hostd. */
static void make_head(struct proxy_req *r, struct MHD_Connection *c, const char *method,
		      const char *target, const char *peer, uint64_t length, struct buf *b)
{
	buf_printf(b, "%s %s HTTP/1.1\r\nHost: berth\r\nConnection: close\r\n", method, target);
	for (size_t i = 0; passed[i]; i++) {
		const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, passed[i]);
		if (v && value_ok(v))
			buf_printf(b, "%s: %s\r\n", passed[i], v);
	}
	if (peer[0])
		buf_printf(b, "X-Forwarded-For: %s\r\n", peer);
	if (r->up_chunked)
		buf_adds(b, "Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n");
	else if (r->has_body)
		buf_printf(b, "Content-Length: %llu\r\nExpect: 100-continue\r\n",
			   (unsigned long long)length);
	buf_adds(b, "\r\n");
}

/* The head of a request arrived. */
static enum MHD_Result begin(const char *sock, struct MHD_Connection *c, const char *method,
			     const char *target, const char *peer, struct proxy_req *r)
{
	const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct buf head = BUF_INIT;
	uint64_t length = 0;
	char msg[256];
	struct head h;
	enum MHD_Result ret;

	r->client_fd = ci ? ci->connect_fd : -1;
	r->head_req = !strcmp(method, "HEAD");
	if (!value_ok(target) || target[0] != '/')
		return web_error(c, 400, "invalid_path", "invalid request target");
	if (te && !strcasecmp(te, "chunked")) {
		r->has_body = r->up_chunked = true;
	} else if (cl) {
		length = strtoull(cl, NULL, 10);
		r->has_body = length > 0;
	}
	r->fd = hostd_connect(sock);
	if (r->fd < 0) {
		snprintf(msg, sizeof(msg), "berth-web cannot reach berth-hostd at %s: %s", sock,
			 strerror(errno));
		log_warn("%s", msg);
		return web_error(c, 502, "hostd_unreachable", msg);
	}
	make_head(r, c, method, target, peer, length, &head);
	if (to_hostd(r, head.data, head.len) < 0) {
		buf_free(&head);
		return web_error(c, 502, "hostd_unreachable", "berth-hostd closed the connection "
				  "before the request was sent");
	}
	buf_free(&head);
	if (!r->has_body)
		return MHD_YES;
	/* hostd's verdict on the head: go on, or its refusal, which the
	 * client gets before sending its body. */
	if (read_head(r, &h) < 0)
		return web_error(c, 502, "bad_gateway", "berth-hostd answered nothing to the "
				  "request's head");
	if (h.status == 100) {
		free(h.text);
		return MHD_YES;
	}
	ret = answer(r, c, &h);
	free(h.text);
	return ret;
}

enum MHD_Result proxy_handle(const char *sock, struct MHD_Connection *c, const char *method,
			     const char *target, const char *peer, const char *upload_data,
			     size_t *upload_data_size, struct proxy_req **state)
{
	struct proxy_req *r = *state;
	struct head h;
	enum MHD_Result ret;

	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			abort();
		r->fd = -1;
		*state = r;
		return begin(sock, c, method, target, peer, r);
	}
	if (*upload_data_size) {
		/* The body, as it arrives.  A write hostd does not take (it
		 * closed) leaves its answer, if any, for the end. */
		if (!r->answered && !r->broken) {
			char frame[32];
			int n = snprintf(frame, sizeof(frame), "%zx\r\n", *upload_data_size);
			if ((r->up_chunked && to_hostd(r, frame, (size_t)n) < 0) ||
			    to_hostd(r, upload_data, *upload_data_size) < 0 ||
			    (r->up_chunked && to_hostd(r, "\r\n", 2) < 0))
				r->broken = true;
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (r->answered)
		return MHD_YES;
	if (r->up_chunked && !r->broken && to_hostd(r, "0\r\n\r\n", 5) < 0)
		r->broken = true;
	do {
		if (read_head(r, &h) < 0)
			return web_error(c, 502, "bad_gateway", r->broken ?
					  "berth-hostd stopped reading the request and "
					  "answered nothing" :
					  "berth-hostd closed the connection without an answer");
		if (h.status < 200)
			free(h.text);
	} while (h.status < 200);
	ret = answer(r, c, &h);
	free(h.text);
	return ret;
}

void proxy_done(struct proxy_req *r)
{
	if (!r)
		return;
	if (r->fd >= 0)
		close(r->fd);
	free(r->buf);
	free(r);
}
