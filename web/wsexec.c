#include "web/wsexec.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common/addrcount.h"
#include "common/buf.h"
#include "common/hostapi.h"
#include "common/log.h"
#include "common/util.h"
#include "web/upgrade.h"
#include "web/ws.h"
#include "common/banned.h"

/* A client that takes nothing of a frame for this long is gone. */
#define WRITE_MS 30000
/* After the server's close frame, how long the client's is awaited. */
#define CLOSE_WAIT_MS 5000
/* A ping to the client this often, and its end when nothing came from it
 * (not even a pong, which RFC 6455 requires and browsers send by
 * themselves) for SILENT_MS.  With TLS, libmicrohttpd tells the session
 * of a client that went only when something is written to it; and a
 * client whose network went says nothing at all. */
#define PING_MS 10000
#define SILENT_MS 30000
/* A line of hostd's stream is at most about 44 KiB (32 KiB of output in
 * base64): one over this is a broken stream. */
#define LINE_MAX_BYTES (1 << 20)
/* Each of a session's two threads' stack: the buffers are on the heap;
 * libcurl and jansson are what runs deepest. */
#define STACK_BYTES (512 * 1024)
#define READ_PIECE 16384

/* The first byte of a binary message to the client: whose output. */
#define TAG_STDOUT 1
#define TAG_STDERR 2

struct session {
	struct session *next;      /* in all_sessions */
	struct wsexec_req req;     /* as berth-web gave it; req.token is the header's */
	char token[512];           /* the one hostd gets ("" none): the header's or the message's */
	char base[128];            /* /v1/machines/NAME/exec */
	int sock;
	struct MHD_UpgradeResponseHandle *urh;
	int64_t t0;

	/* The client's thread's: the parser and what was read but not parsed
	 * yet (libmicrohttpd's extra bytes first). */
	struct ws_parser *parser;
	unsigned char *rbuf;
	size_t rcap, roff, rlen;
	json_t *body;              /* POST .../exec's */
	int wake_r, wake_w;        /* a byte on wake_w: the stream ended */
	bool woken;
	pthread_t stream;
	bool stream_on;

	pthread_mutex_t lock;      /* id, done, gone, stopping */
	pthread_cond_t cond;
	long long id;              /* the command's (0 until hostd's first line) */
	bool done;                 /* the stream ended; its close frame went, unless gone */
	bool gone;                 /* the client went: the stream ends at its next piece */
	bool stopping;             /* berth-web stops: wsexec_stop_all */

	pthread_mutex_t wlock;     /* writes to SOCK, and close_sent (then lock, never after) */
	bool close_sent;

	bool authed;               /* hostd accepted the token: counted in all_authed */

	char how[256];             /* under lock: how the session ended, for the log (the
				    * first story told is kept: note()) */

	/* The stream's thread's. */
	struct buf line;
	bool last;                 /* the stream's last line (exit or error) went */
	int end_code;              /* the close code after it */
	char broke[256];           /* why the stream's thread ended the transfer */
};

/* Every session, for berth-web's stop.  A session leaves the list before
 * its socket is given back (nobody shuts down a descriptor libmicrohttpd
 * may have closed), and is counted in all_count until after; all_authed
 * counts those whose token hostd accepted, for WSEXEC_MAX_SESSIONS. */
static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t all_cond = PTHREAD_COND_INITIALIZER;
static struct session *all_sessions;
static int all_count, all_authed;
static bool all_stopping;
/* Sessions not authenticated yet, per address group
 * (WSEXEC_MAX_PENDING_PER_ADDR): from the handshake to hostd's answer on
 * the token. */
static struct addrcount pending = ADDRCOUNT_INIT;

/* ---- the address groups ---------------------------------------------------- */

void wsexec_addr_group(const char *peer, char *out, size_t outlen)
{
	struct in6_addr a6;
	char text[INET6_ADDRSTRLEN];

	snprintf(out, outlen, "%s", peer);
	if (!strchr(peer, ':') || inet_pton(AF_INET6, peer, &a6) != 1)
		return;
	if (IN6_IS_ADDR_V4MAPPED(&a6)) {
		if (inet_ntop(AF_INET, &a6.s6_addr[12], text, sizeof(text)))
			snprintf(out, outlen, "%s", text);
		return;
	}
	memset(&a6.s6_addr[8], 0, 8);
	if (inet_ntop(AF_INET6, &a6, text, sizeof(text)))
		snprintf(out, outlen, "%s/64", text);
}

/* R's place among the pending, given back (once). */
static void pending_leave(struct wsexec_req *r)
{
	if (r->pending)
		addrcount_leave(&pending, r->group);
	r->pending = false;
}

void wsexec_req_free(struct wsexec_req *r)
{
	if (!r)
		return;
	pending_leave(r);
	explicit_bzero(r->token, sizeof(r->token));
	free(r);
}

/* ---- the messages ------------------------------------------------------------ */

bool wsexec_token_ok(const char *token)
{
	size_t n = strlen(token);
	size_t i = strspn(token, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			  "0123456789-._~+/");

	return n > 0 && n < 512 && i > 0 && strspn(token + i, "=") == n - i;
}

json_t *wsexec_first(const char *text, size_t len, const char *header_token, char *token,
		     size_t tokenlen, char *why, size_t whylen)
{
	json_error_t je;
	json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je), *t;
	const char *tok = header_token;

	token[0] = '\0';
	if (!j) {
		snprintf(why, whylen, "the first message is not JSON: %s", je.text);
		return NULL;
	}
	if (!json_is_object(j)) {
		snprintf(why, whylen, "the first message must be a JSON object: the body of POST "
			 "/v1/machines/NAME/exec, with \"token\"");
		goto fail;
	}
	if ((t = json_object_get(j, "token"))) {
		if (header_token[0]) {
			snprintf(why, whylen, "a token came twice: in Authorization and in the "
				 "first message");
			goto fail;
		}
		if (!json_is_string(t) || strlen(json_string_value(t)) != json_string_length(t)) {
			snprintf(why, whylen, "\"token\" must be a string: an API token "
				 "(berth token create makes one)");
			goto fail;
		}
		tok = json_string_value(t);
	}
	if (tok[0] && (!wsexec_token_ok(tok) || strlen(tok) >= tokenlen)) {
		snprintf(why, whylen, "the token has characters that no token has (letters, "
			 "digits, - . _ ~ + / and = at its end)");
		goto fail;
	}
	snprintf(token, tokenlen, "%s", tok);
	json_object_del(j, "token");
	/* Binary messages are its stdin; {"eof": true} closes it. */
	json_object_set_new(j, "stdin_open", json_true());
	return j;
fail:
	json_decref(j);
	token[0] = '\0';
	return NULL;
}

int wsexec_ctl_parse(const char *text, size_t len, struct wsexec_ctl *c, char *why,
		     size_t whylen)
{
	static const char usage[] = "a text message is one of {\"resize\": {\"cols\": C, "
				    "\"rows\": R}}, {\"signal\": \"INT\"} and {\"eof\": true} "
				    "(stdin goes in binary messages)";
	json_error_t je;
	json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je), *v;
	const char *name;
	int rc = -1;

	*c = (struct wsexec_ctl){ 0 };
	if (!json_is_object(j) || json_object_size(j) != 1) {
		snprintf(why, whylen, "%s", usage);
	} else if ((v = json_object_get(j, "resize"))) {
		c->op = WSEXEC_RESIZE;
		if (json_unpack(v, "{s:I, s:I !}", "cols", &c->cols, "rows", &c->rows) < 0)
			snprintf(why, whylen, "\"resize\" must be {\"cols\": C, \"rows\": R}, whole "
				 "numbers");
		else
			rc = 0;
	} else if ((v = json_object_get(j, "signal"))) {
		c->op = WSEXEC_SIGNAL;
		name = json_string_value(v);
		if (!name || !*name || strlen(name) >= sizeof(c->signal) ||
		    strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") !=
		    strlen(name)) {
			snprintf(why, whylen, "\"signal\" must be a signal's name (TERM, INT, "
				 "KILL, HUP, ...)");
		} else {
			snprintf(c->signal, sizeof(c->signal), "%s", name);
			rc = 0;
		}
	} else if ((v = json_object_get(j, "eof"))) {
		c->op = WSEXEC_EOF;
		if (!json_is_true(v))
			snprintf(why, whylen, "\"eof\" must be true");
		else
			rc = 0;
	} else {
		snprintf(why, whylen, "%s", usage);
	}
	json_decref(j);
	return rc;
}

/* ---- writing to the client ----------------------------------------------------- */

/* How the session ended, for the log, unless it was told already. */
__attribute__((format(printf, 2, 3)))
static void note(struct session *s, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&s->lock);
	if (!s->how[0]) {
		va_start(ap, fmt);
		vsnprintf(s->how, sizeof(s->how), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&s->lock);
}

static void set_gone(struct session *s)
{
	pthread_mutex_lock(&s->lock);
	s->gone = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static bool is_gone(struct session *s)
{
	pthread_mutex_lock(&s->lock);
	bool g = s->gone;
	pthread_mutex_unlock(&s->lock);
	return g;
}

static bool is_stopping(struct session *s)
{
	pthread_mutex_lock(&s->lock);
	bool st = s->stopping;
	pthread_mutex_unlock(&s->lock);
	return st;
}

/* All LEN bytes of DATA to the client, each part taken within WRITE_MS:
 * 0, or -1 (the client is gone, or reads nothing).  wlock held. */
static int write_all(struct session *s, const char *data, size_t len)
{
	int64_t last = mono_ms();

	while (len) {
		ssize_t n = send(s->sock, data, len, MSG_NOSIGNAL);
		if (n > 0) {
			data += n;
			len -= (size_t)n;
			last = mono_ms();
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
			return -1;
		int64_t left = last + WRITE_MS - mono_ms();
		struct pollfd p = { .fd = s->sock, .events = POLLOUT };
		if (left <= 0 || (poll(&p, 1, (int)left) < 0 && errno != EINTR) ||
		    (p.revents & (POLLERR | POLLNVAL)))
			return -1;
	}
	return 0;
}

/* One frame to the client (a close frame: the last it gets).  0, or -1
 * when nothing more may go: the close went already, or the client is gone
 * (then the stream ends at its next piece). */
static int send_frame(struct session *s, enum ws_opcode op, const void *data, size_t len)
{
	struct buf f = BUF_INIT;
	int rc = -1;

	ws_frame_add(&f, op, data, len);
	pthread_mutex_lock(&s->wlock);
	if (!s->close_sent) {
		s->close_sent = op == WS_OP_CLOSE;
		rc = write_all(s, f.data, f.len);
		if (rc < 0)
			set_gone(s);
	}
	pthread_mutex_unlock(&s->wlock);
	buf_free(&f);
	return rc;
}

static int send_close(struct session *s, int code, const char *reason)
{
	struct buf f = BUF_INIT;

	ws_close_add(&f, code, reason);
	/* The frame's payload: past its 2-byte head (at most 125 bytes). */
	int rc = send_frame(s, WS_OP_CLOSE, f.data + 2, f.len - 2);
	buf_free(&f);
	return rc;
}

/* J (taken) as a text message. */
static int send_json(struct session *s, json_t *j)
{
	char *text = json_dumps(j, JSON_COMPACT);
	int rc;

	json_decref(j);
	if (!text)
		abort();
	rc = send_frame(s, WS_OP_TEXT, text, strlen(text));
	free(text);
	return rc;
}

/* The end of the session on an error: {"error": {"code", "message"}}, then
 * a close frame of CLOSE_CODE whose reason is CODE and the message. */
static void send_error(struct session *s, const char *code, const char *message, int close_code)
{
	char reason[256];

	send_json(s, json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", message));
	snprintf(reason, sizeof(reason), "%s: %s", code, message);
	send_close(s, close_code, reason);
	note(s, "ended (%d): %s", close_code, reason);
}

/* hostd answered STATUS (not 2xx) with RESP (NULL: no JSON): the answer
 * as it is, then close 4000 + STATUS (4401, 4404, 4409...). */
static void send_refusal(struct session *s, long status, json_t *resp)
{
	json_t *e = json_object_get(resp, "error");
	const char *code = json_string_value(json_object_get(e, "code"));
	char reason[256], fallback[64];
	int close_code = status >= 400 && status <= 599 ? 4000 + (int)status : WS_CLOSE_INTERNAL;

	snprintf(fallback, sizeof(fallback), "berth-hostd answered %ld", status);
	if (!json_is_object(e)) {
		resp = json_pack("{s:{s:s, s:s}}", "error", "code", "http_error", "message",
				 fallback);
		code = "http_error";
	} else {
		json_incref(resp);
	}
	snprintf(reason, sizeof(reason), "%s: %s", code ? code : "error",
		 hostapi_message(resp, fallback));
	send_json(s, resp);
	send_close(s, close_code, reason);
	note(s, "refused (%d): %s", close_code, reason);
}

/* hostd's word on the session's token, before the session counts against
 * WSEXEC_MAX_SESSIONS and its command starts: GET .../exec (the commands
 * running in the machine: nothing happens, nothing wakes) with it.  0
 * when hostd accepted it and the session is counted; -1 when the session
 * ends (its refusal went: hostd's, as POST would have had it, or 1013). */
static int authenticate(struct session *s)
{
	char err[512], msg[768];
	long status = 0;
	json_t *resp = NULL;
	bool full;

	if (hostapi_call_as(s->req.web_sock, s->token[0] ? s->token : NULL, "GET", s->base, NULL,
			    &status, &resp, err, sizeof(err)) < 0) {
		snprintf(msg, sizeof(msg), "berth-web cannot ask berth-hostd: %s", err);
		send_error(s, "unavailable", msg, WS_CLOSE_INTERNAL);
		return -1;
	}
	if (status != 200) {
		send_refusal(s, status, resp);
		json_decref(resp);
		return -1;
	}
	json_decref(resp);
	pending_leave(&s->req);
	pthread_mutex_lock(&all_lock);
	full = all_authed >= WSEXEC_MAX_SESSIONS;
	if (!full) {
		all_authed++;
		s->authed = true;
	}
	pthread_mutex_unlock(&all_lock);
	if (full) {
		snprintf(msg, sizeof(msg), "%d sessions run at once in berth-web, its most: try "
			 "again later", WSEXEC_MAX_SESSIONS);
		send_error(s, "too_many_sessions", msg, WS_CLOSE_TRY_LATER);
		return -1;
	}
	return 0;
}

/* ---- hostd's stream to the client ------------------------------------------------ */

/* One line of hostd's NDJSON to the client: output as a binary message
 * (its tag, then the bytes), a keepalive as a ping, anything else as the
 * text message it is.  0, or -1 to end the stream. */
static int forward_line(struct session *s, const char *l, size_t n)
{
	json_t *j = json_loadb(l, n, 0, NULL), *v;
	int rc;

	if (!json_is_object(j)) {
		json_decref(j);
		snprintf(s->broke, sizeof(s->broke), "a line of its stream is not JSON");
		return -1;
	}
	if ((v = json_object_get(j, "stdout")) || (v = json_object_get(j, "stderr"))) {
		unsigned char tag = json_object_get(j, "stdout") ? TAG_STDOUT : TAG_STDERR;
		struct buf b = BUF_INIT;
		buf_add(&b, &tag, 1);
		if (!json_is_string(v) ||
		    buf_add_unbase64(&b, json_string_value(v), json_string_length(v)) < 0) {
			snprintf(s->broke, sizeof(s->broke), "output in its stream is not base64");
			rc = -1;
		} else {
			rc = send_frame(s, WS_OP_BINARY, b.data, b.len);
		}
		buf_free(&b);
	} else if (json_is_true(json_object_get(j, "keepalive"))) {
		/* The client (a browser answers by itself) and any proxy between
		 * see a quiet command's connection alive. */
		rc = send_frame(s, WS_OP_PING, "", 0);
	} else {
		if ((v = json_object_get(j, "id")) && json_is_integer(v)) {
			pthread_mutex_lock(&s->lock);
			s->id = (long long)json_integer_value(v);
			pthread_cond_broadcast(&s->cond);
			pthread_mutex_unlock(&s->lock);
			log_info("wsexec %s: %s: command %lld started", s->req.peer, s->req.machine,
				 s->id);
		}
		if (json_object_get(j, "exit") || json_object_get(j, "error")) {
			s->last = true;
			s->end_code = json_object_get(j, "exit") ? WS_CLOSE_NORMAL : WS_CLOSE_INTERNAL;
			note(s, "%.*s", (int)n, l);
		}
		rc = send_frame(s, WS_OP_TEXT, l, n);
	}
	json_decref(j);
	return rc;
}

static int on_stream(const char *p, size_t len, void *data)
{
	struct session *s = data;
	size_t start = 0;
	char *nl;

	if (is_gone(s))
		return -1;
	buf_add(&s->line, p, len);
	while ((nl = memchr(s->line.data + start, '\n', s->line.len - start))) {
		size_t n = (size_t)(nl - (s->line.data + start));
		if (forward_line(s, s->line.data + start, n) < 0)
			return -1;
		start += n + 1;
	}
	memmove(s->line.data, s->line.data + start, s->line.len - start);
	s->line.len -= start;
	s->line.data[s->line.len] = '\0';
	if (s->line.len > LINE_MAX_BYTES) {
		snprintf(s->broke, sizeof(s->broke), "a line of its stream is over %d bytes",
			 LINE_MAX_BYTES);
		return -1;
	}
	return 0;
}

static void *stream_main(void *arg)
{
	struct session *s = arg;
	char err[512];
	long status = 0;
	json_t *resp = NULL;
	int rc;

	rc = hostapi_stream_as(s->req.web_sock, s->token[0] ? s->token : NULL, "POST", s->base,
			       s->body, on_stream, s, &status, &resp, err, sizeof(err));
	if (is_gone(s)) {
		note(s, "its client went");
	} else if (status >= 200 && status <= 299 && s->last) {
		send_close(s, s->end_code, "");
	} else if (status && (status < 200 || status > 299)) {
		send_refusal(s, status, resp);
	} else {
		char msg[768];
		snprintf(msg, sizeof(msg), "the command's stream from berth-hostd broke off: %s",
			 s->broke[0] ? s->broke : rc < 0 ? err : "it ended without the command's end");
		send_error(s, status ? "stream_failed" : "unavailable", msg, WS_CLOSE_INTERNAL);
	}
	json_decref(resp);
	pthread_mutex_lock(&s->lock);
	s->done = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	if (write(s->wake_w, "x", 1) < 0)
		log_debug("wsexec %s: wake pipe: %s", s->req.peer, strerror(errno));
	return NULL;
}

/* ---- the client's messages to hostd ----------------------------------------------- */

/* The command's id once hostd gave it; 0 when the stream ended (or the
 * client went) without one. */
static long long wait_id(struct session *s)
{
	long long id;

	pthread_mutex_lock(&s->lock);
	while (!s->id && !s->done && !s->gone && !s->stopping)
		pthread_cond_wait(&s->cond, &s->lock);
	id = s->done || s->gone || s->stopping ? 0 : s->id;
	pthread_mutex_unlock(&s->lock);
	return id;
}

/* hostd refused WHAT (stdin, resize, signal, eof): the client is told,
 * and the session goes on: {"refused": WHAT, "error": {...}}. */
static void send_refused(struct session *s, const char *what, long status, json_t *resp)
{
	json_t *e = json_object_get(resp, "error");
	char msg[64];

	snprintf(msg, sizeof(msg), "berth-hostd answered %ld", status);
	if (json_is_object(e))
		json_incref(e);
	else
		e = json_pack("{s:s, s:s}", "code", "http_error", "message", msg);
	send_json(s, json_pack("{s:s, s:o}", "refused", what, "error", e));
}

/* True when the client closed its side (non-consuming). */
static bool client_hung_up(struct session *s)
{
	struct pollfd p = { .fd = s->sock, .events = POLLRDHUP };

	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void stdin_send(struct session *s, const void *data, size_t len)
{
	char path[256], err[512];
	long long id = wait_id(s);
	size_t done = 0;

	if (!id || !len)
		return;
	snprintf(path, sizeof(path), "%s/%lld/stdin", s->base, id);
	while (done < len) {
		long status;
		json_t *r = NULL;
		if (hostapi_send_as(s->req.web_sock, s->token[0] ? s->token : NULL, "POST", path,
				    (const char *)data + done, len - done, "application/octet-stream",
				    &status, &r, err, sizeof(err)) < 0) {
			log_warn("wsexec %s: %s: stdin: %s", s->req.peer, s->req.machine, err);
			return;	/* the stream meets the same: its end says so */
		}
		json_int_t w = json_integer_value(json_object_get(r, "written"));
		if (status != 200 && status != 503) {
			send_refused(s, "stdin", status, r);
			json_decref(r);
			return;
		}
		json_decref(r);
		if (w < 0 || (size_t)w > len - done)
			return;
		done += (size_t)w;
		/* 503 stdin_full: the command took only W within hostd's 5 s.
		 * The rest again, while it runs and the client stays: the client's
		 * next message waits meanwhile. */
		if (status == 503) {
			pthread_mutex_lock(&s->lock);
			bool over = s->done || s->gone || s->stopping;
			pthread_mutex_unlock(&s->lock);
			if (over || client_hung_up(s))
				return;
		}
	}
}

/* A text message: resize, signal or eof.  0, or -1 when the session ends
 * (the message is none of them). */
static int control(struct session *s, const char *text, size_t len)
{
	static const char *const what[] = { [WSEXEC_RESIZE] = "resize",
					    [WSEXEC_SIGNAL] = "signal", [WSEXEC_EOF] = "eof" };
	struct wsexec_ctl c;
	char why[256], path[256], err[512], *body = NULL;
	long status;
	json_t *r = NULL;
	long long id;
	int rc;

	if (wsexec_ctl_parse(text, len, &c, why, sizeof(why)) < 0) {
		send_error(s, "invalid_message", why, 4400);
		return -1;
	}
	if (!(id = wait_id(s)))
		return 0;
	switch (c.op) {
	case WSEXEC_RESIZE:
		snprintf(path, sizeof(path), "%s/%lld/resize", s->base, id);
		if (asprintf(&body, "{\"cols\":%lld,\"rows\":%lld}", (long long)c.cols,
			     (long long)c.rows) < 0)
			abort();
		break;
	case WSEXEC_SIGNAL:
		snprintf(path, sizeof(path), "%s/%lld/signal", s->base, id);
		/* A name of letters and digits: nothing to escape. */
		if (asprintf(&body, "{\"signal\":\"%s\"}", c.signal) < 0)
			abort();
		break;
	case WSEXEC_EOF:
		snprintf(path, sizeof(path), "%s/%lld/stdin?eof=1", s->base, id);
		break;
	}
	rc = hostapi_send_as(s->req.web_sock, s->token[0] ? s->token : NULL, "POST", path,
			     body ? body : "", body ? strlen(body) : 0,
			     body ? "application/json" : "application/octet-stream", &status, &r,
			     err, sizeof(err));
	if (rc < 0)
		log_warn("wsexec %s: %s: %s: %s", s->req.peer, s->req.machine, what[c.op], err);
	else if (status < 200 || status > 299)
		send_refused(s, what[c.op], status, r);
	json_decref(r);
	free(body);
	return 0;
}

/* ---- the client's thread ------------------------------------------------------------ */

enum rd { RD_MSG, RD_TIMEOUT, RD_GONE, RD_WAKE };

/* The client's next message into M (valid until the next call), waiting
 * until DEADLINE (mono_ms; 0: no end); RD_WAKE when the stream ends
 * meanwhile (once). */
static enum rd next_msg(struct session *s, int64_t deadline, struct ws_msg *m)
{
	for (;;) {
		if (s->roff < s->rlen) {
			s->roff += ws_parser_feed(s->parser, s->rbuf + s->roff, s->rlen - s->roff, m);
			if (m->kind != WS_NONE)
				return RD_MSG;
		}
		s->roff = s->rlen = 0;
		struct pollfd p[2] = { { .fd = s->sock, .events = POLLIN },
				       { .fd = s->woken ? -1 : s->wake_r, .events = POLLIN } };
		int wait = -1;
		if (deadline) {
			int64_t left = deadline - mono_ms();
			if (left <= 0)
				return RD_TIMEOUT;
			wait = left > INT_MAX ? INT_MAX : (int)left;
		}
		int n = poll(p, 2, wait);
		if (n < 0 && errno != EINTR)
			return RD_GONE;
		if (n <= 0)
			continue;
		if (p[1].revents) {
			s->woken = true;
			return RD_WAKE;
		}
		if (!p[0].revents)
			continue;
		ssize_t got = recv(s->sock, s->rbuf, s->rcap, 0);
		if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
			return RD_GONE;
		if (got > 0)
			s->rlen = (size_t)got;
	}
}

/* The code to answer a client's close with: its own (none: 1000). */
static int close_echo(int code)
{
	return code == WS_CLOSE_NO_STATUS ? WS_CLOSE_NORMAL : code;
}

/* The client's first message: the command.  0 with s->body, or -1 when
 * the session ends (its close went). */
static int first_message(struct session *s)
{
	int64_t deadline = s->t0 + WSEXEC_FIRST_MS;
	char why[512];
	struct ws_msg m;

	for (;;) {
		enum rd r = next_msg(s, deadline, &m);
		if (r == RD_TIMEOUT) {
			send_error(s, "timeout", "no command within 10 s: the first message is the "
				   "body of POST /v1/machines/NAME/exec, with \"token\"", 4408);
			return -1;
		}
		if (r == RD_GONE) {
			note(s, is_stopping(s) ? "berth-web stopped" : "its client went before its "
			     "command");
			return -1;
		}
		if (m.kind == WS_PING) {
			send_frame(s, WS_OP_PONG, m.data, m.len);
		} else if (m.kind == WS_CLOSE) {
			send_close(s, close_echo(m.code), "");
			note(s, "its client closed (%d) before its command", m.code);
			return -1;
		} else if (m.kind == WS_ERROR) {
			send_close(s, m.code, m.why);
			note(s, "closed (%d): in the client's frames, %s", m.code, m.why);
			return -1;
		} else if (m.kind == WS_BINARY) {
			send_error(s, "invalid_message", "the first message must be text: the body of "
				   "POST /v1/machines/NAME/exec, with \"token\"", 4400);
			return -1;
		} else if (m.kind == WS_TEXT) {
			break;
		}
	}
	s->body = wsexec_first((const char *)m.data, m.len, s->req.token, s->token,
			       sizeof(s->token), why, sizeof(why));
	if (!s->body) {
		send_error(s, "invalid_message", why, 4400);
		return -1;
	}
	return 0;
}

/* The command runs: the client's messages to hostd until either side
 * ends, and a ping every PING_MS.  After the stream's end (its close frame
 * sent), the client's close is awaited CLOSE_WAIT_MS, and what else it
 * sends is dropped. */
static void converse(struct session *s)
{
	int64_t closing = 0, heard = mono_ms(), ping = heard + PING_MS;
	struct ws_msg m;

	for (;;) {
		int64_t silent = heard + SILENT_MS;
		enum rd r = next_msg(s, closing ? closing : ping < silent ? ping : silent, &m);
		if (r == RD_WAKE) {
			closing = mono_ms() + CLOSE_WAIT_MS;
			continue;
		}
		if (r == RD_TIMEOUT && !closing && mono_ms() < silent) {
			send_frame(s, WS_OP_PING, "", 0);
			ping = mono_ms() + PING_MS;
			continue;
		}
		if (r != RD_MSG) {
			note(s, is_stopping(s) ? "berth-web stopped" : r == RD_GONE ?
			     "its client went" : closing ? "its client did not close" :
			     "its client answered nothing for 30 s");
			return;
		}
		/* (After a wait on hostd, what the client sent meanwhile is read
		 * before any silence is judged: poll finds it at once.) */
		heard = mono_ms();
		switch (m.kind) {
		case WS_PING:
			send_frame(s, WS_OP_PONG, m.data, m.len);
			break;
		case WS_CLOSE:
			send_close(s, close_echo(m.code), "");
			note(s, "its client closed (%d)", m.code);
			return;
		case WS_ERROR:
			send_close(s, m.code, m.why);
			note(s, "closed (%d): in the client's frames, %s", m.code, m.why);
			return;
		case WS_BINARY:
			if (!closing)
				stdin_send(s, m.data, m.len);
			break;
		case WS_TEXT:
			if (!closing && control(s, (const char *)m.data, m.len) < 0)
				return;
			break;
		default:
			break;
		}
	}
}

static void session_free(struct session *s)
{
	ws_parser_free(s->parser);
	json_decref(s->body);
	buf_free(&s->line);
	free(s->rbuf);
	if (s->wake_r >= 0)
		close(s->wake_r);
	if (s->wake_w >= 0)
		close(s->wake_w);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->wlock);
	pthread_cond_destroy(&s->cond);
	free(s);
}

/* The end: a command still running is killed (as hostd kills one whose
 * client went; the KILL makes its stream end now rather than at its next
 * keepalive), the stream's thread joined, the socket given back. */
static void finish(struct session *s)
{
	bool done;
	long long id;

	if (is_stopping(s)) {
		send_close(s, WS_CLOSE_GOING_AWAY, "berth-web is stopping");
		note(s, "berth-web stopped");
	}
	pthread_mutex_lock(&s->lock);
	s->gone = true;
	pthread_cond_broadcast(&s->cond);
	done = s->done;
	id = s->id;
	pthread_mutex_unlock(&s->lock);
	if (s->stream_on) {
		if (!done) {
			char path[256], err[512];
			long status;
			json_t *r = NULL;
			snprintf(path, sizeof(path), "%s/%lld/signal", s->base, id);
			if (id && hostapi_send_as(s->req.web_sock, s->token[0] ? s->token : NULL,
						  "POST", path, "{\"signal\":\"KILL\"}", 17,
						  "application/json", &status, &r, err,
						  sizeof(err)) == 0)
				json_decref(r);
			/* A frame being written to a client that reads nothing. */
			shutdown(s->sock, SHUT_RDWR);
		}
		pthread_join(s->stream, NULL);
	}
	log_info("wsexec %s: %s: %s after %.1f s", s->req.peer, s->req.machine,
		 s->how[0] ? s->how : "ended", (double)(mono_ms() - s->t0) / 1000.0);
	pthread_mutex_lock(&all_lock);
	for (struct session **pp = &all_sessions; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	pthread_mutex_unlock(&all_lock);
	web_upgrade_close(s->urh);
	pending_leave(&s->req);
	bool authed = s->authed;
	session_free(s);
	pthread_mutex_lock(&all_lock);
	all_count--;
	if (authed)
		all_authed--;
	pthread_cond_broadcast(&all_cond);
	pthread_mutex_unlock(&all_lock);
}

void wsexec_stop_all(int wait_ms)
{
	struct timespec until;
	int left;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += wait_ms / 1000;
	until.tv_nsec += (long)(wait_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&all_lock);
	all_stopping = true;
	for (struct session *s = all_sessions; s; s = s->next) {
		pthread_mutex_lock(&s->lock);
		s->stopping = true;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
		/* The client's thread wakes from its read (and finds the end). */
		shutdown(s->sock, SHUT_RD);
	}
	while (all_count > 0 && pthread_cond_timedwait(&all_cond, &all_lock, &until) == 0)
		;
	left = all_count;
	pthread_mutex_unlock(&all_lock);
	if (left)
		log_warn("wsexec: %d sessions still ending after %d ms", left, wait_ms);
}

static void *session_main(void *arg)
{
	struct session *s = arg;
	pthread_attr_t a;

	if (!name_valid(s->req.machine)) {
		send_error(s, "invalid_name", "not a machine's name", 4400);
		goto out;
	}
	if (s->req.token[0] && !wsexec_token_ok(s->req.token)) {
		send_error(s, "invalid_token", "the token has characters that no token has", 4401);
		goto out;
	}
	if (first_message(s) < 0 || authenticate(s) < 0)
		goto out;
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, STACK_BYTES);
	s->stream_on = pthread_create(&s->stream, &a, stream_main, s) == 0;
	pthread_attr_destroy(&a);
	if (!s->stream_on) {
		send_error(s, "internal", "berth-web cannot start a thread", WS_CLOSE_INTERNAL);
		goto out;
	}
	converse(s);
out:
	finish(s);
	return NULL;
}

/* ---- the handshake, in berth-web's access handler -------------------------------- */

bool wsexec_route(const char *url, char *name, size_t namelen)
{
	static const char pre[] = "/v1/machines/", post[] = "/exec/ws";
	size_t n = strlen(url), lp = sizeof(pre) - 1, ls = sizeof(post) - 1;

	if (n <= lp + ls || strncmp(url, pre, lp) || strcmp(url + n - ls, post) ||
	    memchr(url + lp, '/', n - lp - ls) || n - lp - ls >= namelen)
		return false;
	memcpy(name, url + lp, n - lp - ls);
	name[n - lp - ls] = '\0';
	return true;
}

/* A refusal of the handshake, as hostd's errors read; 426 says which
 * version berth-web speaks (RFC 6455 section 4.4). */
static enum MHD_Result refuse(struct MHD_Connection *c, unsigned status, const char *code,
			      const char *msg)
{
	json_t *j = json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg);
	char *text = json_dumps(j, JSON_COMPACT);
	struct MHD_Response *r;
	enum MHD_Result ret;

	json_decref(j);
	if (!text)
		abort();
	r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", "application/json");
	MHD_add_response_header(r, "Cache-Control", "no-store");
	if (status == 426)
		MHD_add_response_header(r, "Sec-WebSocket-Version", "13");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

enum MHD_Result wsexec_answer(struct MHD_Connection *c, const char *method, const char *name,
			      const char *web_sock, const char *peer, struct wsexec_req **slot,
			      MHD_UpgradeHandler upgraded, void *upgraded_cls)
{
	struct ws_upgrade u = {
		method,
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_UPGRADE),
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONNECTION),
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Version"),
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Key"),
	};
	const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						       MHD_HTTP_HEADER_AUTHORIZATION);
	char accept[WS_ACCEPT_SIZE], why[256];
	struct wsexec_req *r;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	int status;

	*slot = NULL;
	if ((status = ws_upgrade_check(&u, accept, why, sizeof(why))))
		return refuse(c, (unsigned)status, status == 405 ? "method_not_allowed" :
			      "invalid_upgrade", why);
	if (!name_valid(name))
		return refuse(c, 400, "invalid_name", "not a machine's name");
	r = calloc(1, sizeof(*r));
	if (!r)
		abort();
	if (auth && !strncasecmp(auth, "Bearer ", 7)) {
		for (auth += 7; *auth == ' '; auth++)
			;
		if (!wsexec_token_ok(auth)) {
			free(r);
			return refuse(c, 400, "invalid_token", "the token has characters that no "
				      "token has");
		}
		snprintf(r->token, sizeof(r->token), "%s", auth);
	}
	snprintf(r->machine, sizeof(r->machine), "%s", name);
	snprintf(r->web_sock, sizeof(r->web_sock), "%s", web_sock);
	snprintf(r->peer, sizeof(r->peer), "%s", peer);
	/* Sessions that no token let in yet: a few per client, so that
	 * handshakes that never say anything keep no one else out. */
	wsexec_addr_group(peer, r->group, sizeof(r->group));
	if (!addrcount_enter(&pending, r->group, WSEXEC_MAX_PENDING_PER_ADDR)) {
		char msg[256];
		log_warn("wsexec %s: refused: %d sessions of %s wait for their token's check",
			 peer, WSEXEC_MAX_PENDING_PER_ADDR, r->group);
		wsexec_req_free(r);
		snprintf(msg, sizeof(msg), "%d sessions from your address are waiting for their "
			 "first message or its token's check: try again when one has started",
			 WSEXEC_MAX_PENDING_PER_ADDR);
		return refuse(c, 429, "too_many_pending", msg);
	}
	r->pending = true;
	resp = MHD_create_response_for_upgrade(upgraded, upgraded_cls);
	if (!resp) {
		wsexec_req_free(r);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
	MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
	ret = MHD_queue_response(c, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
	MHD_destroy_response(resp);
	if (ret == MHD_YES)
		*slot = r;
	else
		wsexec_req_free(r);
	return ret;
}

/* ---- the session's start --------------------------------------------------------------- */

/* A session that never started is not counted. */
static void uncount(void)
{
	pthread_mutex_lock(&all_lock);
	all_count--;
	pthread_cond_broadcast(&all_cond);
	pthread_mutex_unlock(&all_lock);
}

int wsexec_start(struct wsexec_req *r, int sock, const char *extra, size_t extra_len,
		 struct MHD_UpgradeResponseHandle *urh)
{
	struct session *s;
	pthread_attr_t a;
	pthread_t t;
	int p[2], rc;

	/* (the cap, WSEXEC_MAX_SESSIONS, is applied once hostd accepted the
	 * session's token: authenticate) */
	pthread_mutex_lock(&all_lock);
	bool stopping = all_stopping;
	if (!stopping)
		all_count++;
	pthread_mutex_unlock(&all_lock);
	if (stopping) {
		struct buf f = BUF_INIT;
		log_warn("wsexec %s: refused: berth-web is stopping", r->peer);
		ws_close_add(&f, WS_CLOSE_TRY_LATER, "berth-web is stopping");
		if (send(sock, f.data, f.len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
			log_debug("wsexec %s: %s", r->peer, strerror(errno));
		buf_free(&f);
		web_upgrade_close(urh);
		return 0;
	}
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
		uncount();
		return -1;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		abort();
	s->req = *r;
	r->pending = false;     /* the session's place now */
	s->sock = sock;
	s->urh = urh;
	s->t0 = mono_ms();
	s->wake_r = p[0];
	s->wake_w = p[1];
	s->parser = ws_parser_new(WSEXEC_MAX_MESSAGE);
	s->rcap = extra_len > READ_PIECE ? extra_len : READ_PIECE;
	s->rbuf = malloc(s->rcap);
	if (!s->rbuf)
		abort();
	if (extra_len)
		memcpy(s->rbuf, extra, extra_len);
	s->rlen = extra_len;
	s->line = (struct buf)BUF_INIT;
	snprintf(s->base, sizeof(s->base), "/v1/machines/%s/exec", r->machine);
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->wlock, NULL);
	pthread_cond_init(&s->cond, NULL);
	fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
	/* A terminal's echo goes at once, and so does a close after its
	 * message (Nagle held it for the client's delayed ACK: 40 ms).  A
	 * socketpair (libmicrohttpd's TLS) refuses it: nothing to do then. */
	setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));

	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, STACK_BYTES);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_mutex_lock(&all_lock);
	s->next = all_sessions;
	all_sessions = s;
	rc = pthread_create(&t, &a, session_main, s);
	if (rc != 0)
		all_sessions = s->next;
	pthread_mutex_unlock(&all_lock);
	pthread_attr_destroy(&a);
	if (rc != 0) {
		log_error("wsexec %s: cannot start a thread: %s", r->peer, strerror(rc));
		r->pending = s->req.pending;
		session_free(s);
		uncount();
		return -1;
	}
	return 0;
}
