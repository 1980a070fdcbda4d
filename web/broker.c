#include "web/broker.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/netpolicy.h"
#include "common/util.h"
#include "web/hostctl.h"
#include "web/reply.h"
#include "web/request.h"
#include "common/banned.h"

/* Each call's two buffers (the request's body going up, the answer's
 * coming down), what the answer's reader gives libmicrohttpd at once. */
#define CHAN_SIZE (64 << 10)
#define READ_BLOCK (16 << 10)
/* A call's longest life, whatever its pace. */
#define CALL_MAX_S (4 * 3600)
/* Connections: all guests', and one guest address's. */
#define MAX_CONNS 512
#define MAX_PER_ADDR 32
/* hostd's answers on webctl.sock. */
#define HOSTD_WAIT_MS 30000

/* libcurl handles kept between calls (each keeps its live connections and
 * TLS sessions: the next call to the same upstream skips the TCP and TLS
 * handshakes); a handle is one call's at a time. */
#define POOL 16

struct broker {
	struct MHD_Daemon *d;
	char *webctl_sock, *ca_file;
	int timeout_s;
	uint64_t max_body;
	struct netpolicy *policy;   /* where calls may connect */
	pthread_mutex_t pool_lock;
	CURL *pool[POOL];
	int npool;
};

/* A handle for a call: a kept one (its connections kept, its options
 * reset), or a new one.  NULL when none can be made. */
static CURL *handle_take(struct broker *b)
{
	CURL *cu = NULL;

	pthread_mutex_lock(&b->pool_lock);
	if (b->npool > 0)
		cu = b->pool[--b->npool];
	pthread_mutex_unlock(&b->pool_lock);
	return cu ? cu : curl_easy_init();
}

/* CU's call ended (OK: it did, so its connection may serve another). */
static void handle_give(struct broker *b, CURL *cu, bool ok)
{
	/* Nothing of the call stays in it (its buffers, its header list):
	 * only its connections and TLS sessions. */
	curl_easy_reset(cu);
	pthread_mutex_lock(&b->pool_lock);
	if (ok && b->npool < POOL) {
		b->pool[b->npool++] = cu;
		cu = NULL;
	}
	pthread_mutex_unlock(&b->pool_lock);
	if (cu)
		curl_easy_cleanup(cu);
}

/* A bounded byte buffer between a call's two threads, under the call's
 * lock. */
struct chan {
	char *buf;
	size_t start, len;
	bool closed;    /* the writer is done: the reader gets the end after the data */
	bool aborted;   /* the reader is gone (or the call is over): writes fail */
};

/* One call, from its request line to its end. */
struct call {
	struct broker *b;
	char *target;             /* the request target as the guest sent it */
	char method[16];
	char secret[64];
	int client_fd;            /* the guest's connection (libmicrohttpd's) */
	int ctl;                  /* hostd's webctl connection for this call, -1 */
	bool started;             /* the head was seen */
	bool answered;            /* a response was queued */
	bool has_body;
	uint64_t bytes_in, bytes_out;
	int status;               /* what the guest got */
	char error[200];          /* why the call failed, for the log */
	bool too_big;

	/* The upstream's transfer (its own thread, libcurl). */
	char *url;
	struct curl_slist *headers;  /* the request's, the secret's among them */
	int64_t length;           /* the request body's (-1: chunked) */
	pthread_t thread;
	bool thread_on;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct chan up, down;
	bool head_done;           /* the answer's head is in: status, resp_headers */
	int up_status;
	int64_t up_length;        /* its Content-Length, -1 when it has none */
	char **resp_headers;
	size_t n_resp, cap_resp;
	bool done;                /* the transfer ended: cc says how */
	CURLcode cc;
	char cerr[CURL_ERROR_SIZE];
	bool cut;                 /* the guest went: the transfer is abandoned */
	bool up_taken;            /* libcurl took some of the body */
	char refused[300];        /* why an address of the upstream's was not connected to */
};

/* ---- the buffers ------------------------------------------------------------ */

static void wait_ms(struct call *k, int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&k->cv, &k->lock, &ts);
}

/* LEN bytes into CH, waiting up to the broker's timeout for room.  0, or
 * -1 when the reader is gone or does not read. */
static int chan_write(struct call *k, struct chan *ch, const char *data, size_t len)
{
	int64_t deadline = mono_ms() + (int64_t)k->b->timeout_s * 1000;

	pthread_mutex_lock(&k->lock);
	while (len > 0) {
		while (ch->len == CHAN_SIZE && !ch->aborted && mono_ms() < deadline)
			wait_ms(k, 1000);
		if (ch->aborted || ch->len == CHAN_SIZE) {
			pthread_mutex_unlock(&k->lock);
			return -1;
		}
		size_t end = (ch->start + ch->len) % CHAN_SIZE;
		size_t room = CHAN_SIZE - ch->len, n = len < room ? len : room;
		if (n > CHAN_SIZE - end)
			n = CHAN_SIZE - end;
		memcpy(ch->buf + end, data, n);
		ch->len += n;
		data += n;
		len -= n;
		pthread_cond_broadcast(&k->cv);
	}
	pthread_mutex_unlock(&k->lock);
	return 0;
}

/* Up to MAX bytes out of CH, waiting up to WAIT ms: the number of bytes;
 * 0 at its end; -1 when the call is abandoned; -2 when nothing came. */
static ssize_t chan_read(struct call *k, struct chan *ch, char *out, size_t max, int wait)
{
	ssize_t n;

	pthread_mutex_lock(&k->lock);
	if (!ch->len && !ch->closed && !ch->aborted)
		wait_ms(k, wait);
	if (ch->aborted) {
		n = -1;
	} else if (!ch->len) {
		n = ch->closed ? 0 : -2;
	} else {
		size_t take = ch->len < max ? ch->len : max;
		if (take > CHAN_SIZE - ch->start)
			take = CHAN_SIZE - ch->start;
		memcpy(out, ch->buf + ch->start, take);
		ch->start = (ch->start + take) % CHAN_SIZE;
		ch->len -= take;
		n = (ssize_t)take;
		pthread_cond_broadcast(&k->cv);
	}
	pthread_mutex_unlock(&k->lock);
	return n;
}

/* Whether the guest closed its side of the connection. */
static bool guest_gone(const struct call *k)
{
	struct pollfd p = { .fd = k->client_fd, .events = POLLRDHUP };

	return k->client_fd >= 0 && poll(&p, 1, 0) > 0 &&
	       (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* ---- the upstream's transfer (its own thread) ----------------------------------- */

/* Headers of the upstream's answer that are the connection's own, or
 * libmicrohttpd's to write. */
static const char *const resp_dropped[] = {
	"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
	"upgrade", "content-length", "date", NULL,
};

static bool listed(const char *const *list, const char *name, size_t len)
{
	for (size_t i = 0; list[i]; i++)
		if (strlen(list[i]) == len && !strncasecmp(list[i], name, len))
			return true;
	return false;
}

static size_t on_header(char *line, size_t size, size_t n, void *arg)
{
	struct call *k = arg;
	size_t len = size * n, l = len;
	char *colon;

	while (l > 0 && (line[l - 1] == '\r' || line[l - 1] == '\n'))
		l--;
	pthread_mutex_lock(&k->lock);
	if (!strncmp(line, "HTTP/", 5)) {
		/* A status line: a new answer (after a 100 Continue, say). */
		const char *sp = memchr(line, ' ', l);
		k->up_status = sp ? atoi(sp + 1) : 0;
		k->up_length = -1;
		for (size_t i = 0; i < k->n_resp; i++)
			free(k->resp_headers[i]);
		k->n_resp = 0;
	} else if (l == 0) {
		if (k->up_status >= 200 && !k->head_done) {
			k->head_done = true;
			pthread_cond_broadcast(&k->cv);
		}
	} else if ((colon = memchr(line, ':', l)) && colon - line == 14 &&
		   !strncasecmp(line, "content-length", 14)) {
		/* libmicrohttpd writes it again, from the answer's size. */
		char num[24];
		snprintf(num, sizeof(num), "%.*s", (int)(l - 15 < 23 ? l - 15 : 23), colon + 1);
		char *end;
		errno = 0;
		long long v = strtoll(num, &end, 10);
		k->up_length = errno || v < 0 || (*end && *end != ' ') ? -1 : v;
	} else if (colon && colon > line && !listed(resp_dropped, line, (size_t)(colon - line)) &&
		   k->n_resp < 100) {
		if (k->n_resp == k->cap_resp) {
			k->cap_resp = k->cap_resp ? k->cap_resp * 2 : 16;
			k->resp_headers = realloc(k->resp_headers, k->cap_resp * sizeof(char *));
			if (!k->resp_headers)
				abort();
		}
		k->resp_headers[k->n_resp] = strndup(line, l);
		if (!k->resp_headers[k->n_resp])
			abort();
		k->n_resp++;
	}
	pthread_mutex_unlock(&k->lock);
	return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	struct call *k = arg;

	return chan_write(k, &k->down, data, size * n) < 0 ? 0 : size * n;
}

static size_t on_read(char *out, size_t size, size_t n, void *arg)
{
	struct call *k = arg;

	for (;;) {
		ssize_t got = chan_read(k, &k->up, out, size * n, 1000);
		if (got > 0) {
			pthread_mutex_lock(&k->lock);
			k->up_taken = true;
			pthread_mutex_unlock(&k->lock);
		}
		if (got >= 0)
			return (size_t)got;
		if (got == -1)
			return CURL_READFUNC_ABORT;
	}
}

/* libcurl would send the body again from OFFSET: only from its start, and
 * only when none of it was taken yet. */
static int on_seek(void *arg, curl_off_t offset, int origin)
{
	struct call *k = arg;
	bool fresh;

	pthread_mutex_lock(&k->lock);
	fresh = !k->up_taken;
	pthread_mutex_unlock(&k->lock);
	return offset == 0 && origin == SEEK_SET && fresh ? CURL_SEEKFUNC_OK
							  : CURL_SEEKFUNC_CANTSEEK;
}

/* libcurl asks now and then: go on, unless the guest went. */
static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct call *k = arg;
	bool cut;

	(void)dt;
	(void)dn;
	(void)ut;
	(void)un;
	pthread_mutex_lock(&k->lock);
	cut = k->cut;
	pthread_mutex_unlock(&k->lock);
	return cut;
}

/* libcurl's socket for a connection to A, an address its name resolved
 * to: none when the policy closes that address (libcurl tries the next
 * one, then fails the call; the first reason is kept for the guest). */
static curl_socket_t open_checked(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct call *k = arg;
	char why[200];

	if (purpose != CURLSOCKTYPE_IPCXN ||
	    !netpolicy_allows(k->b->policy, &a->addr, why, sizeof(why))) {
		pthread_mutex_lock(&k->lock);
		if (!k->refused[0])
			snprintf(k->refused, sizeof(k->refused), "the broker does not connect to "
				 "%.200s: berth.conf's broker_allow opens a network to it",
				 purpose == CURLSOCKTYPE_IPCXN ? why : "an address not for a "
				 "connection");
		pthread_mutex_unlock(&k->lock);
		return CURL_SOCKET_BAD;
	}
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

static void *transfer(void *arg)
{
	struct call *k = arg;
	struct broker *b = k->b;
	CURL *cu = handle_take(b);
	CURLcode cc = CURLE_FAILED_INIT;

	if (cu) {
		curl_easy_setopt(cu, CURLOPT_URL, k->url);
		curl_easy_setopt(cu, CURLOPT_PROTOCOLS_STR, "https");
		/* Every address is checked as it is connected to, after the
		 * name was resolved (a name that resolves, or comes to
		 * resolve, to a closed address gets nothing); no proxy of the
		 * environment's, which would connect where nothing checks. */
		curl_easy_setopt(cu, CURLOPT_OPENSOCKETFUNCTION, open_checked);
		curl_easy_setopt(cu, CURLOPT_OPENSOCKETDATA, k);
		curl_easy_setopt(cu, CURLOPT_PROXY, "");
		curl_easy_setopt(cu, CURLOPT_FOLLOWLOCATION, 0L);
		curl_easy_setopt(cu, CURLOPT_SSL_VERIFYPEER, 1L);
		curl_easy_setopt(cu, CURLOPT_SSL_VERIFYHOST, 2L);
		if (b->ca_file)
			curl_easy_setopt(cu, CURLOPT_CAINFO, b->ca_file);
		curl_easy_setopt(cu, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(cu, CURLOPT_CONNECTTIMEOUT, (long)(b->timeout_s < 30 ? b->timeout_s
									 : 30));
		/* Silent for timeout_s (no byte either way): given up. */
		curl_easy_setopt(cu, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(cu, CURLOPT_LOW_SPEED_TIME, (long)b->timeout_s);
		curl_easy_setopt(cu, CURLOPT_TIMEOUT, (long)CALL_MAX_S);
		curl_easy_setopt(cu, CURLOPT_ERRORBUFFER, k->cerr);
		curl_easy_setopt(cu, CURLOPT_HTTPHEADER, k->headers);
		curl_easy_setopt(cu, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(cu, CURLOPT_HEADERDATA, k);
		curl_easy_setopt(cu, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(cu, CURLOPT_WRITEDATA, k);
		curl_easy_setopt(cu, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(cu, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(cu, CURLOPT_XFERINFODATA, k);
		curl_easy_setopt(cu, CURLOPT_TCP_NODELAY, 1L);
		if (k->has_body) {
			curl_easy_setopt(cu, CURLOPT_UPLOAD, 1L);
			curl_easy_setopt(cu, CURLOPT_READFUNCTION, on_read);
			curl_easy_setopt(cu, CURLOPT_READDATA, k);
			/* A kept connection the upstream closed meanwhile: libcurl
			 * sends the request again on a new one, as long as no byte
			 * of the body was taken yet. */
			curl_easy_setopt(cu, CURLOPT_SEEKFUNCTION, on_seek);
			curl_easy_setopt(cu, CURLOPT_SEEKDATA, k);
			curl_easy_setopt(cu, CURLOPT_INFILESIZE_LARGE, (curl_off_t)k->length);
			curl_easy_setopt(cu, CURLOPT_CUSTOMREQUEST, k->method);
		} else if (!strcmp(k->method, "HEAD")) {
			curl_easy_setopt(cu, CURLOPT_NOBODY, 1L);
		} else if (strcmp(k->method, "GET") != 0) {
			curl_easy_setopt(cu, CURLOPT_CUSTOMREQUEST, k->method);
		}
		cc = curl_easy_perform(cu);
		handle_give(b, cu, cc == CURLE_OK);
	}
	pthread_mutex_lock(&k->lock);
	k->cc = cc;
	k->done = true;
	k->down.closed = true;
	/* The rest of the request's body goes nowhere. */
	k->up.aborted = true;
	pthread_cond_broadcast(&k->cv);
	pthread_mutex_unlock(&k->lock);
	return NULL;
}

/* ---- the guest's side (libmicrohttpd's connection thread) ---------------------------- */

/* Headers of the guest's request not passed on: the connection's own, what
 * libcurl writes, and credentials (the guest has none: the secret's
 * replace them). */
static const char *const req_dropped[] = {
	"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
	"upgrade", "proxy-authorization", "proxy-authenticate", "host", "content-length",
	"expect", "authorization", "x-api-key", NULL,
};

/* What the request's headers are checked against. */
struct hdr_walk {
	struct call *k;
	const char *connection;   /* the Connection header's value: names it drops too */
	json_t *secret;           /* the secret's [[name, value], ...] */
	struct curl_slist *out;
};

/* Whether NAME is one of the comma-separated tokens of LIST. */
static bool in_token_list(const char *list, const char *name)
{
	size_t nl = strlen(name);

	while (list && *list) {
		while (*list == ' ' || *list == '\t' || *list == ',')
			list++;
		size_t l = strcspn(list, ", \t");
		if (l == nl && !strncasecmp(list, name, nl))
			return true;
		list += l;
	}
	return false;
}

static enum MHD_Result pass_header(void *cls, enum MHD_ValueKind kind, const char *key,
				   const char *value)
{
	struct hdr_walk *w = cls;
	json_t *p;
	size_t i;
	char line[8192];

	(void)kind;
	if (!key || !value || listed(req_dropped, key, strlen(key)) ||
	    in_token_list(w->connection, key))
		return MHD_YES;
	json_array_foreach(w->secret, i, p)
		if (!strcasecmp(json_string_value(json_array_get(p, 0)), key))
			return MHD_YES;
	for (const char *v = value; *v; v++)
		if ((unsigned char)*v < 0x20 && *v != '\t')
			return MHD_YES;
	if (snprintf(line, sizeof(line), "%s: %s", key, value) < (int)sizeof(line))
		w->out = curl_slist_append(w->out, line);
	return MHD_YES;
}

/* The request's headers for the upstream: the guest's that pass, then the
 * secret's (SECRET, from hostd). */
static struct curl_slist *upstream_headers(struct MHD_Connection *c, struct call *k,
					   json_t *secret)
{
	struct hdr_walk w = { k, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Connection"),
			      secret, NULL };
	json_t *p;
	size_t i;
	char line[8300];

	MHD_get_connection_values(c, MHD_HEADER_KIND, pass_header, &w);
	json_array_foreach(secret, i, p) {
		snprintf(line, sizeof(line), "%s: %s", json_string_value(json_array_get(p, 0)),
			 json_string_value(json_array_get(p, 1)));
		w.out = curl_slist_append(w.out, line);
		explicit_bzero(line, sizeof(line));
	}
	/* No "Expect: 100-continue" (libcurl's for large bodies): a second
	 * round trip for nothing. */
	w.out = curl_slist_append(w.out, "Expect:");
	return w.out;
}

static void free_headers(struct curl_slist *l)
{
	for (struct curl_slist *p = l; p; p = p->next)
		explicit_bzero(p->data, strlen(p->data));
	curl_slist_free_all(l);
}

/* Our own answer to the guest (JSON, as hostd's errors). */
static enum MHD_Result refuse(struct call *k, struct MHD_Connection *c, unsigned status,
			      const char *code, const char *msg)
{
	k->answered = true;
	k->status = (int)status;
	if (!k->error[0])
		snprintf(k->error, sizeof(k->error), "%.190s", msg);
	return web_error(c, status, code, msg);
}

/* The head of a call arrived: ask hostd, start the transfer. */
static enum MHD_Result begin(struct call *k, struct MHD_Connection *c, const char *method)
{
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	const char *t = k->target, *code, *msg;
	char path[4200], err[512];
	struct web_framing f;
	json_t *req = NULL, *ans = NULL;
	enum MHD_Result ret;
	size_t nl;
	int st;

	snprintf(k->method, sizeof(k->method), "%s", method);
	/* /NAME/PATH: NAME the secret; PATH what follows ("/" for none). */
	nl = t[0] == '/' ? strcspn(t + 1, "/?") : 0;
	if (nl == 0 || nl > 63 || strspn(t + 1, "abcdefghijklmnopqrstuvwxyz0123456789-") < nl)
		return refuse(k, c, 404, "not_found", "the broker answers /NAME/... for a secret "
			      "NAME that this machine may use (NAME_BASE_URL in the machine)");
	if (strlen(t) > 4000)
		return refuse(k, c, 414, "uri_too_long", "the request target is longer than 4000 "
			      "bytes");
	snprintf(k->secret, sizeof(k->secret), "%.*s", (int)nl, t + 1);
	snprintf(path, sizeof(path), "%s%s", t[1 + nl] == '/' ? "" : "/", t + 1 + nl);
	/* Framing and names the upstream would read otherwise
	 * (web/request.h): libcurl is told the length checked here. */
	if (web_request_check(c, method, &f, err, sizeof(err)))
		return refuse(k, c, 400, "invalid_request", err);
	if (f.chunked) {
		k->has_body = true;
		k->length = -1;
	} else if (cl) {
		if (f.length > k->b->max_body) {
			char m[128];
			snprintf(m, sizeof(m), "the request body is larger than the broker's "
				 "%llu bytes (broker_max_body)", (unsigned long long)k->b->max_body);
			return refuse(k, c, 413, "body_too_large", m);
		}
		/* (Content-Length: 0 too: the upstream is told it) */
		k->has_body = true;
		k->length = (int64_t)f.length;
	}
	/* hostd knows the machine by the connection itself. */
	req = json_pack("{s:s, s:s, s:s, s:s}", "op", "broker", "secret", k->secret,
			"method", k->method, "path", path);
	k->ctl = req ? hostctl_open(k->b->webctl_sock, req, k->client_fd, &ans, NULL, 0,
				    HOSTD_WAIT_MS, err, sizeof(err)) : -1;
	json_decref(req);
	if (k->ctl < 0) {
		log_warn("broker: %s", err);
		return refuse(k, c, 502, "hostd_unreachable", "the broker cannot ask berth-hostd");
	}
	if ((st = hostctl_error(ans, &code, &msg)) != 0) {
		/* hostd logged a refusal itself: no end to report. */
		close(k->ctl);
		k->ctl = -1;
		ret = refuse(k, c, (unsigned)st, code, msg);
		json_decref(ans);
		return ret;
	}
	const char *url = json_string_value(json_object_get(ans, "url"));
	json_t *secret = json_object_get(ans, "headers");
	if (!url || !json_is_array(secret)) {
		json_decref(ans);
		return refuse(k, c, 502, "hostd_answer", "berth-hostd's answer has no URL");
	}
	k->url = strdup(url);
	if (!k->url)
		abort();
	k->headers = upstream_headers(c, k, secret);
	json_decref(ans);
	if (pthread_create(&k->thread, NULL, transfer, k) != 0)
		return refuse(k, c, 503, "busy", "the broker cannot start a transfer");
	k->thread_on = true;
	return MHD_YES;
}

/* libmicrohttpd's reader of the answer's body: the upstream's, as it
 * comes. */
static ssize_t body_read(void *cls, uint64_t pos, char *out, size_t max)
{
	struct call *k = cls;

	(void)pos;
	for (;;) {
		ssize_t n = chan_read(k, &k->down, out, max, 1000);
		if (n > 0) {
			k->bytes_out += (uint64_t)n;
			return n;
		}
		if (n == 0) {
			pthread_mutex_lock(&k->lock);
			CURLcode cc = k->cc;
			pthread_mutex_unlock(&k->lock);
			if (cc == CURLE_OK)
				return MHD_CONTENT_READER_END_OF_STREAM;
			snprintf(k->error, sizeof(k->error), "the upstream's answer was cut: %.160s",
				 cc == CURLE_OPERATION_TIMEDOUT ? "silent too long" :
				 k->cerr[0] ? k->cerr : curl_easy_strerror(cc));
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (n == -1 || guest_gone(k))
			return MHD_CONTENT_READER_END_WITH_ERROR;
	}
}

/* The request's body is all in: the upstream's answer, or why there is
 * none. */
static enum MHD_Result finish(struct call *k, struct MHD_Connection *c)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;
	uint64_t size = MHD_SIZE_UNKNOWN;
	char msg[CURL_ERROR_SIZE + 128];

	pthread_mutex_lock(&k->lock);
	k->up.closed = true;
	pthread_cond_broadcast(&k->cv);
	while (!k->head_done && !k->done) {
		pthread_mutex_unlock(&k->lock);
		bool gone = guest_gone(k);
		pthread_mutex_lock(&k->lock);
		if (gone) {
			k->cut = true;
			k->up.aborted = k->down.aborted = true;
			pthread_mutex_unlock(&k->lock);
			snprintf(k->error, sizeof(k->error), "the guest went before the answer");
			return MHD_NO;
		}
		wait_ms(k, 1000);
	}
	bool head = k->head_done;
	CURLcode cc = k->cc;
	pthread_mutex_unlock(&k->lock);
	if (!head) {
		if (k->too_big) {
			snprintf(msg, sizeof(msg), "the request body is larger than the broker's %llu "
				 "bytes (broker_max_body)", (unsigned long long)k->b->max_body);
			return refuse(k, c, 413, "body_too_large", msg);
		}
		if (k->refused[0])
			return refuse(k, c, 403, "destination_refused", k->refused);
		if (cc == CURLE_OPERATION_TIMEDOUT) {
			snprintf(msg, sizeof(msg), "the upstream did not answer within %d s: %s",
				 k->b->timeout_s, k->cerr);
			return refuse(k, c, 504, "upstream_timeout", msg);
		}
		snprintf(msg, sizeof(msg), "the upstream cannot be reached: %s",
			 k->cerr[0] ? k->cerr : curl_easy_strerror(cc));
		return refuse(k, c, 502, "upstream_failed", msg);
	}
	/* The answer's size, when the upstream says it: the guest gets the
	 * same Content-Length (else chunked). */
	if (!strcmp(k->method, "HEAD") || k->up_status == 204 || k->up_status == 304)
		size = 0;
	else if (k->up_length >= 0)
		size = (uint64_t)k->up_length;
	resp = size == 0 ? MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT)
			 : MHD_create_response_from_callback(size, READ_BLOCK, body_read, k, NULL);
	if (!resp)
		return MHD_NO;
	for (size_t i = 0; i < k->n_resp; i++) {
		char *colon = strchr(k->resp_headers[i], ':');
		const char *v = colon + 1;
		*colon = '\0';
		while (*v == ' ' || *v == '\t')
			v++;
		MHD_add_response_header(resp, k->resp_headers[i], v);
		*colon = ':';
	}
	k->answered = true;
	k->status = k->up_status;
	ret = MHD_queue_response(c, (unsigned)k->up_status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload_data,
			      size_t *upload_data_size, void **con_cls)
{
	struct call *k = *con_cls;

	(void)cls;
	(void)url;
	(void)version;
	if (!k)
		return MHD_NO;
	if (!k->started) {
		k->started = true;
		return begin(k, c, method);
	}
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		/* Never past the length libcurl was told. */
		if (k->length >= 0 && n > (uint64_t)k->length - k->bytes_in)
			n = (size_t)((uint64_t)k->length - k->bytes_in);
		k->bytes_in += n;
		if (k->answered || !k->thread_on || k->too_big)
			return MHD_YES;
		if (k->bytes_in > k->b->max_body) {
			/* A chunked body past the limit: the transfer is given up. */
			pthread_mutex_lock(&k->lock);
			k->too_big = k->cut = true;
			k->up.aborted = true;
			pthread_cond_broadcast(&k->cv);
			pthread_mutex_unlock(&k->lock);
			return MHD_YES;
		}
		if (chan_write(k, &k->up, upload_data, n) < 0) {
			/* The upstream no longer reads (it failed, or answered
			 * already): the rest is dropped. */
		}
		return MHD_YES;
	}
	if (k->answered)
		return MHD_YES;
	return finish(k, c);
}

static void *uri_seen(void *cls, const char *uri, struct MHD_Connection *c)
{
	struct broker *b = cls;
	struct call *k = calloc(1, sizeof(*k));
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);

	if (!k || !(k->target = strdup(uri)) || !(k->up.buf = malloc(CHAN_SIZE)) ||
	    !(k->down.buf = malloc(CHAN_SIZE)))
		abort();
	k->b = b;
	k->ctl = -1;
	k->up_length = -1;
	k->client_fd = ci ? ci->connect_fd : -1;
	pthread_mutex_init(&k->lock, NULL);
	pthread_cond_init(&k->cv, NULL);
	return k;
}

/* The call is over: the transfer ends, hostd gets its end. */
static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct call *k = *con_cls;
	char err[256];

	(void)cls;
	(void)c;
	if (!k)
		return;
	if (k->thread_on) {
		pthread_mutex_lock(&k->lock);
		k->cut = true;
		k->up.aborted = k->down.aborted = true;
		pthread_cond_broadcast(&k->cv);
		pthread_mutex_unlock(&k->lock);
		pthread_join(k->thread, NULL);
	}
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && !k->error[0])
		snprintf(k->error, sizeof(k->error), "%s", toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ?
			 "the guest was silent too long" : "the guest went before the end");
	if (k->ctl >= 0) {
		json_t *end = json_pack("{s:i, s:I, s:I}", "status", k->status,
					"bytes_in", (json_int_t)k->bytes_in,
					"bytes_out", (json_int_t)k->bytes_out), *ans = NULL;
		if (end && k->error[0])
			json_object_set_new(end, "error", json_string(k->error));
		if (!end || hostctl_say(k->ctl, end, &ans, 5000, err, sizeof(err)) < 0)
			log_warn("broker: the end of a call of secret %s was not logged: %s",
				 k->secret, end ? err : "out of memory");
		json_decref(end);
		json_decref(ans);
		close(k->ctl);
	}
	free_headers(k->headers);
	for (size_t i = 0; i < k->n_resp; i++)
		free(k->resp_headers[i]);
	free(k->resp_headers);
	free(k->url);
	free(k->target);
	free(k->up.buf);
	free(k->down.buf);
	pthread_cond_destroy(&k->cv);
	pthread_mutex_destroy(&k->lock);
	free(k);
	*con_cls = NULL;
}

/* ---- start and stop ------------------------------------------------------------ */

int broker_listen(const char *spec)
{
	char host[64];
	const char *colon = strrchr(spec, ':');
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fd = -1, one = 1;
	long port;
	char *end;

	if (!colon || (size_t)(colon - spec) >= sizeof(host))
		goto bad;
	snprintf(host, sizeof(host), "%.*s", (int)(colon - spec), spec);
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (errno || *end || port < 1 || port > 65535 || inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		goto bad;
	sa.sin_port = htons((uint16_t)port);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	/* The gateway address is on the machines' taps only: bound before
	 * any exists. */
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 512) < 0) {
		log_error("broker: listen on %s: %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
bad:
	log_error("broker: '%s' is not IPv4 ADDR:PORT", spec);
	return -1;
}

struct broker *broker_start(int listen_fd, const struct broker_conf *c)
{
	struct broker *b = calloc(1, sizeof(*b));

	if (!b)
		abort();
	b->webctl_sock = strdup(c->webctl_sock);
	b->ca_file = c->ca_file && c->ca_file[0] ? strdup(c->ca_file) : NULL;
	b->timeout_s = c->timeout_s > 0 ? c->timeout_s : 300;
	b->max_body = c->max_body;
	pthread_mutex_init(&b->pool_lock, NULL);
	struct err e = { 0 };
	if (!(b->policy = netpolicy_new(c->closed, c->allow, &e))) {
		log_error("broker: %s", e.msg);
		broker_stop(b);
		return NULL;
	}
	if (!b->webctl_sock)
		abort();
	struct MHD_OptionItem o[] = {
		{ MHD_OPTION_LISTEN_SOCKET, listen_fd, NULL },
		{ MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)uri_seen, b },
		{ MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, b },
		/* A guest silent for timeout_s (its request, or reading the
		 * answer) is dropped; one guest takes at most MAX_PER_ADDR. */
		{ MHD_OPTION_CONNECTION_TIMEOUT, b->timeout_s, NULL },
		{ MHD_OPTION_CONNECTION_LIMIT, MAX_CONNS, NULL },
		{ MHD_OPTION_PER_IP_CONNECTION_LIMIT, MAX_PER_ADDR, NULL },
		{ MHD_OPTION_THREAD_STACK_SIZE, 256 << 10, NULL },
		{ MHD_OPTION_CONNECTION_MEMORY_LIMIT, 128 << 10, NULL },
		{ MHD_OPTION_END, 0, NULL },
	};
	b->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
				MHD_USE_ERROR_LOG, 0, NULL, NULL, handle, b, MHD_OPTION_ARRAY, o,
				MHD_OPTION_END);
	if (!b->d) {
		log_error("broker: cannot start its HTTP server");
		broker_stop(b);
		return NULL;
	}
	log_info("broker: serving guests, upstreams verified against %s, silent ones given "
		 "up after %d s, bodies up to %llu bytes; not connecting to loopback, "
		 "link-local, private networks, the host's own addresses, %s%s%s",
		 b->ca_file ? b->ca_file : "the system's CAs", b->timeout_s,
		 (unsigned long long)b->max_body, c->closed ? c->closed : "",
		 c->allow && c->allow[0] ? " but to " : "",
		 c->allow && c->allow[0] ? c->allow : " (broker_allow: none)");
	return b;
}

void broker_stop(struct broker *b)
{
	if (!b)
		return;
	if (b->d)
		MHD_stop_daemon(b->d);
	for (int i = 0; i < b->npool; i++)
		curl_easy_cleanup(b->pool[i]);
	pthread_mutex_destroy(&b->pool_lock);
	netpolicy_free(b->policy);
	free(b->webctl_sock);
	free(b->ca_file);
	free(b);
}
