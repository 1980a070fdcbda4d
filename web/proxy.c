#include "web/proxy.h"

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
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
#include "web/request.h"
#include "web/upstream.h"
#include "common/banned.h"

/* What is read from hostd at once; and the buffer's most, for an answer's
 * head. */
#define IO_BUF (64 << 10)
#define HEAD_MAX UPSTREAM_HEAD_MAX
/* How long a connect to hostd is tried while its listen backlog is full
 * (as common/hostapi.c does). */
#define CONNECT_WAIT_MS 5000

struct proxy_req {
	struct proxy_req *prev, *next;  /* the open ones (proxy_stop_all) */
	int fd;                 /* hostd's connection, -1 when there is none */
	int client_fd;          /* the client's socket, watched for its going */
	bool has_body;          /* the request has a body */
	bool up_chunked;        /* which goes to hostd chunked */
	bool broken;            /* a write to hostd failed: its answer may follow */
	bool answered;          /* an answer is queued */
	bool head_req;          /* a HEAD request: the answer has no body */
	uint64_t left;          /* of a body with a Content-Length, the bytes still to pass */
	/* Bytes read from hostd and not used yet: buf[off, len). */
	char *buf;
	size_t off, len, cap;
	struct upstream_body body;  /* hostd's answer's body, as web/upstream.c decodes it */
};

/* The requests with a connection to hostd, for proxy_stop_all: a stream
 * (a command's output, events followed) would otherwise keep its thread,
 * and libmicrohttpd's stop that joins it, for as long as hostd sends. */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct proxy_req *open_reqs;
static bool stopping;

/* R has its connection to hostd: listed (false: berth-web stops, and R
 * is not). */
static bool open_add(struct proxy_req *r)
{
	bool ok;

	pthread_mutex_lock(&open_lock);
	ok = !stopping;
	if (ok) {
		r->next = open_reqs;
		if (open_reqs)
			open_reqs->prev = r;
		open_reqs = r;
	}
	pthread_mutex_unlock(&open_lock);
	return ok;
}

static void open_remove(struct proxy_req *r)
{
	pthread_mutex_lock(&open_lock);
	if (r->prev)
		r->prev->next = r->next;
	else if (open_reqs == r)
		open_reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
	pthread_mutex_unlock(&open_lock);
}

void proxy_stop_all(void)
{
	pthread_mutex_lock(&open_lock);
	stopping = true;
	for (struct proxy_req *r = open_reqs; r; r = r->next)
		shutdown(r->fd, SHUT_RDWR);	/* its reads end: so does its answer */
	pthread_mutex_unlock(&open_lock);
}

/* Client headers passed on (the rest are the client's and berth-web's
 * business, not hostd's). */
static const char *const passed[] = { "Authorization", "Content-Type", "Accept",
				      "X-Berth-User", "Last-Event-ID", NULL };

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
static int to_hostd(void *ctx, const void *data, size_t len)
{
	struct proxy_req *r = ctx;
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
		/* The client's socket is watched for its going only: a client
		 * that shut down its sending side after its request (a read of
		 * 0, POLLRDHUP) still waits for the answer.  One that went is
		 * found when a write to it fails (it answers with a reset:
		 * POLLHUP, POLLERR), at the latest at hostd's next keepalive. */
		struct pollfd p[2] = { { .fd = r->fd, .events = POLLIN },
				       { .fd = r->client_fd, .events = 0 } };
		nfds_t np = r->client_fd >= 0 ? 2 : 1;
		if (poll(p, np, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		/* The client went: nothing more is read for it, and closing
		 * hostd's connection ends what hostd does for it. */
		if (np == 2 && (p[1].revents & (POLLHUP | POLLERR | POLLNVAL)))
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

/* Read and parse the head of hostd's next answer (1xx included; ANSWER to
 * a HEAD request when R->head_req) with web/upstream.c, the reader of
 * previews' guests' answers too.  0 with *H (upstream_head_free it), or -1
 * when hostd closed, sent no answer or a malformed one (logged), or the
 * client went. */
static int read_head(struct proxy_req *r, struct upstream_head *h)
{
	char why[160];
	ssize_t hl;

	while ((hl = upstream_head_parse(r->buf + r->off, r->len - r->off, r->head_req, h, why,
					 sizeof(why))) == 0) {
		if (fill(r) <= 0)
			return -1;
	}
	if (hl < 0) {
		log_warn("berth-hostd's answer is malformed: %s", why);
		return -1;
	}
	r->off += (size_t)hl;
	return 0;
}

/* libmicrohttpd's reader of the answer's body: hostd's, as it comes. */
static ssize_t body_read(void *cls, uint64_t pos, char *out, size_t max)
{
	struct proxy_req *r = cls;
	char why[128];

	(void)pos;
	for (;;) {
		if (r->off < r->len) {
			size_t avail = r->len - r->off, used, n;
			const char *data;
			int rc = upstream_body_step(&r->body, r->buf + r->off, avail < max ? avail : max,
						    &used, &data, &n, why, sizeof(why));
			if (rc < 0) {
				log_warn("berth-hostd's answer's body is malformed: %s", why);
				return MHD_CONTENT_READER_END_WITH_ERROR;
			}
			if (n)
				memmove(out, data, n);
			r->off += used;
			if (n)
				return (ssize_t)n;
			if (rc == 1)
				return MHD_CONTENT_READER_END_OF_STREAM;
			continue;
		}
		if (r->body.done)
			return MHD_CONTENT_READER_END_OF_STREAM;
		ssize_t got = fill(r);
		if (got < 0)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (got == 0)      /* hostd closed: the end, or cut short */
			return upstream_body_eof(&r->body) == 1 ? MHD_CONTENT_READER_END_OF_STREAM
								 : MHD_CONTENT_READER_END_WITH_ERROR;
	}
}

/* Queue hostd's answer (head H, its body still to be read) for the
 * client. */
static enum MHD_Result answer(struct proxy_req *r, struct MHD_Connection *c,
			      struct upstream_head *h)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;
	uint64_t size = h->framing == UPSTREAM_NONE ? 0 : h->framing == UPSTREAM_LENGTH ?
			h->length : MHD_SIZE_UNKNOWN;

	upstream_body_init(&r->body, h);
	resp = size == 0 ? MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT)
			 : MHD_create_response_from_callback(size, IO_BUF, body_read, r, NULL);
	if (!resp)
		return MHD_NO;
	/* Not passed back: the connection's own headers, and what
	 * libmicrohttpd writes itself. */
	for (size_t i = 0; i < h->n; i++)
		if (!upstream_hop_by_hop(h, h->name[i]) && strcasecmp(h->name[i], "Content-Length") &&
		    strcasecmp(h->name[i], "Date"))
			MHD_add_response_header(resp, h->name[i], h->value[i]);
	if (!upstream_head_get(h, "X-Content-Type-Options"))
		MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	if (!upstream_head_get(h, "Cache-Control"))
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
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct buf head = BUF_INIT;
	struct web_framing f;
	char msg[256];
	struct upstream_head h;
	enum MHD_Result ret;

	r->client_fd = ci ? ci->connect_fd : -1;
	r->head_req = !strcmp(method, "HEAD");
	if (!value_ok(target) || target[0] != '/')
		return web_error(c, 400, "invalid_path", "invalid request target");
	/* Framing and names hostd would read otherwise (web/request.h). */
	if (web_request_check(c, method, &f, msg, sizeof(msg)))
		return web_error(c, 400, "invalid_request", msg);
	r->has_body = f.has_body;
	r->up_chunked = f.chunked;
	r->left = f.length;
	r->fd = hostd_connect(sock);
	if (r->fd < 0) {
		snprintf(msg, sizeof(msg), "berth-web cannot reach berth-hostd at %s: %s", sock,
			 strerror(errno));
		log_warn("%s", msg);
		return web_error(c, 502, "hostd_unreachable", msg);
	}
	if (!open_add(r)) {
		close(r->fd);
		r->fd = -1;
		return web_error(c, 503, "stopping", "berth-web is stopping");
	}
	make_head(r, c, method, target, peer, f.length, &head);
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
		upstream_head_free(&h);
		return MHD_YES;
	}
	ret = answer(r, c, &h);
	upstream_head_free(&h);
	return ret;
}

enum MHD_Result proxy_handle(const char *sock, struct MHD_Connection *c, const char *method,
			     const char *target, const char *peer, const char *upload_data,
			     size_t *upload_data_size, struct proxy_req **state)
{
	struct proxy_req *r = *state;
	struct upstream_head h;
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
		/* The body, as it arrives, never past the length hostd was told.
		 * A write hostd does not take (it closed) leaves its answer, if
		 * any, for the end. */
		if (!r->answered && !r->broken &&
		    web_body_pass(r->up_chunked, &r->left, upload_data, *upload_data_size,
				  to_hostd, r) < 0)
			r->broken = true;
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (r->answered)
		return MHD_YES;
	if (!r->broken && web_body_end(r->up_chunked, to_hostd, r) < 0)
		r->broken = true;
	do {
		if (read_head(r, &h) < 0)
			return web_error(c, 502, "bad_gateway", r->broken ?
					  "berth-hostd stopped reading the request and "
					  "answered nothing" :
					  "berth-hostd closed the connection without an answer");
		if (h.status < 200)
			upstream_head_free(&h);
	} while (h.status < 200);
	ret = answer(r, c, &h);
	upstream_head_free(&h);
	return ret;
}

void proxy_done(struct proxy_req *r)
{
	if (!r)
		return;
	if (r->fd >= 0) {
		open_remove(r);
		close(r->fd);
	}
	free(r->buf);
	free(r);
}
