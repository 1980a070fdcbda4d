#include "common/hostapi.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/util.h"
#include "common/banned.h"

/* How long a call tries to connect while hostd's listen backlog is full. */
#define CONNECT_WAIT_MS 5000

/* curl_easy_perform, tried again while the connect finds the socket's
 * listen backlog full, for CONNECT_WAIT_MS at most: nothing was sent.
 * A local user's storm of connects keeps that backlog full, and each try
 * then gets a place in it as soon as hostd accepts one (hostd refuses the
 * storm's beyond its caps after the accept): root's and the gateways'
 * calls get through.  (connect gives EAGAIN then, which libcurl takes for
 * a connect in progress; the socket then polls as hung up with no error,
 * and libcurl fails the connect with OS errno 0 or EAGAIN.  A missing
 * socket or no hostd behind it, ENOENT or ECONNREFUSED, fails at once.) */
static CURLcode perform(CURL *h)
{
	int64_t t0 = mono_ms();
	useconds_t pause = 1000;
	CURLcode rc;
	long os_errno;

	for (;;) {
		rc = curl_easy_perform(h);
		os_errno = 0;
		if (rc != CURLE_COULDNT_CONNECT ||
		    curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &os_errno) != CURLE_OK ||
		    (os_errno != 0 && os_errno != EAGAIN) || mono_ms() - t0 >= CONNECT_WAIT_MS)
			return rc;
		usleep(pause);
		if (pause < 50000)
			pause *= 2;
	}
}

static size_t on_data(char *p, size_t size, size_t n, void *data)
{
	buf_add(data, p, size * n);
	return size * n;
}

int hostapi_call(const char *sock, const char *method, const char *path, json_t *body,
		 long *status, json_t **resp, char *err, size_t errlen)
{
	return hostapi_call_as(sock, NULL, method, path, body, status, resp, err, errlen);
}

int hostapi_call_as(const char *sock, const char *token, const char *method, const char *path,
		    json_t *body, long *status, json_t **resp, char *err, size_t errlen)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	int ret;

	if (body && !text)
		abort();
	ret = hostapi_send_as(sock, token, method, path, text, text ? strlen(text) : 0,
			      text ? "application/json" : NULL, status, resp, err, errlen);
	free(text);
	return ret;
}

int hostapi_send(const char *sock, const char *method, const char *path, const void *data,
		 size_t len, const char *type, long *status, json_t **resp, char *err,
		 size_t errlen)
{
	return hostapi_send_as(sock, NULL, method, path, data, len, type, status, resp, err,
			       errlen);
}

/* Aim H at PATH of AT: a UNIX socket, or berth-web's base URL. */
static void aim(CURL *h, const char *at, const char *path)
{
	char url[4096];

	if (hostapi_is_url(at)) {
		snprintf(url, sizeof(url), "%s%s", at, path);
		/* What a remote berth-web answers is bounded by it; a dead
		 * network is not waited for forever: not at the connect, and
		 * not after it (TCP keepalives find a peer gone silently within
		 * about two minutes; no transfer timeout, as a wake or a build
		 * answers after minutes of quiet). */
		curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
		curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
		curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 60L);
		curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 15L);
	} else {
		snprintf(url, sizeof(url), "http://berth%s", path);
		curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, at);
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
}

bool hostapi_is_url(const char *at)
{
	return !strncmp(at, "http://", 7) || !strncmp(at, "https://", 8);
}

/* "Authorization: Bearer TOKEN" onto HDRS when TOKEN is not NULL. */
static struct curl_slist *add_token(struct curl_slist *hdrs, const char *token)
{
	char *line;

	if (!token)
		return hdrs;
	if (asprintf(&line, "Authorization: Bearer %s", token) < 0)
		abort();
	hdrs = curl_slist_append(hdrs, line);
	free(line);
	return hdrs;
}

int hostapi_send_as(const char *sock, const char *token, const char *method, const char *path,
		    const void *data, size_t len, const char *type, long *status, json_t **resp,
		    char *err, size_t errlen)
{
	CURL *h = curl_easy_init();
	struct curl_slist *hdrs = NULL;
	struct buf out = BUF_INIT;
	char ctype[128];
	CURLcode rc;
	int ret = -1;

	*resp = NULL;
	*status = 0;
	if (!h) {
		snprintf(err, errlen, "cannot initialise libcurl");
		return -1;
	}
	aim(h, sock, path);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &out);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	/* No timeout: a wake waits for a boot, an image build for its recipe,
	 * and hostd bounds those itself. */
	hdrs = add_token(curl_slist_append(hdrs, "Expect:"), token);
	if (type) {
		snprintf(ctype, sizeof(ctype), "Content-Type: %s", type);
		hdrs = curl_slist_append(hdrs, ctype);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, len ? data : "");
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	rc = perform(h);
	if (rc != CURLE_OK) {
		snprintf(err, errlen, "cannot reach %s at %s: %s",
			 hostapi_is_url(sock) ? "berth-web" : "berth-hostd", sock,
			 curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	if (out.len)
		*resp = json_loadb(out.data, out.len, 0, NULL);
	ret = 0;
out:
	buf_free(&out);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	return ret;
}

struct stream {
	CURL *h;
	int fd;
	uint64_t size;
	hostapi_progress_fn fn;
	void *data;
	bool download;         /* a 2xx body goes to FD (or SINK) */
	hostapi_sink_fn sink;
	hostapi_until_fn until;  /* true: end the transfer (NULL: never) */
	void *until_data;
	const char *json;      /* the request's body, JSON text (NULL: none) */
	const char *token;     /* sent as a bearer token (NULL: none) */
	struct buf err_body;   /* any other body: hostd's JSON answer */
	int io_errno;          /* a failed read or write of FD */
};

static size_t on_read(char *p, size_t size, size_t n, void *data)
{
	struct stream *s = data;
	ssize_t r;

	do
		r = read(s->fd, p, size * n);
	while (r < 0 && errno == EINTR);
	if (r < 0) {
		s->io_errno = errno;
		return CURL_READFUNC_ABORT;
	}
	return (size_t)r;
}

static size_t on_write(char *p, size_t size, size_t n, void *data)
{
	struct stream *s = data;
	long code = 0;
	size_t len = size * n, done = 0;

	curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
	if (!s->download || code < 200 || code > 299) {
		buf_add(&s->err_body, p, len);
		return len;
	}
	if (s->sink)
		return s->sink(p, len, s->data) == 0 ? len : 0;
	while (done < len) {
		ssize_t w = write(s->fd, p + done, len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			s->io_errno = w < 0 ? errno : EIO;
			return 0;
		}
		done += (size_t)w;
	}
	return len;
}

static int on_progress(void *data, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	struct stream *s = data;

	(void)dltotal;
	(void)ultotal;
	if (s->until && s->until(s->until_data))
		return 1;	/* CURLE_ABORTED_BY_CALLBACK */
	if (s->fn)
		s->fn(s->size ? (uint64_t)ulnow : (uint64_t)dlnow, s->size, s->data);
	return 0;
}

static int transfer(const char *sock, const char *method, const char *path,
		    struct stream *s, bool upload, long *status, json_t **resp,
		    char *err, size_t errlen)
{
	struct curl_slist *hdrs = NULL;
	CURLcode rc;
	int ret = -1;

	*resp = NULL;
	*status = 0;
	s->h = curl_easy_init();
	if (!s->h) {
		snprintf(err, errlen, "cannot initialise libcurl");
		return -1;
	}
	aim(s->h, sock, path);
	curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(s->h, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(s->h, CURLOPT_NOPROGRESS, s->sink && !s->until ? 1L : 0L);
	curl_easy_setopt(s->h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(s->h, CURLOPT_XFERINFODATA, s);
	hdrs = add_token(curl_slist_append(hdrs, "Expect:"), s->token);
	if (upload) {
		curl_easy_setopt(s->h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(s->h, CURLOPT_CUSTOMREQUEST, method);
		curl_easy_setopt(s->h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(s->h, CURLOPT_READDATA, s);
		curl_easy_setopt(s->h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)s->size);
		curl_easy_setopt(s->h, CURLOPT_UPLOAD_BUFFERSIZE, 1L << 20);
		hdrs = curl_slist_append(hdrs, "Content-Type: application/octet-stream");
	} else {
		curl_easy_setopt(s->h, CURLOPT_CUSTOMREQUEST, method);
		if (s->json) {
			curl_easy_setopt(s->h, CURLOPT_POSTFIELDS, s->json);
			hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
		}
	}
	curl_easy_setopt(s->h, CURLOPT_HTTPHEADER, hdrs);
	rc = perform(s->h);
	curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, status);
	if (s->err_body.len)
		*resp = json_loadb(s->err_body.data, s->err_body.len, 0, NULL);
	if (s->io_errno) {
		snprintf(err, errlen, "%s: %s", upload ? "read" : "write", strerror(s->io_errno));
		goto out;
	}
	if (rc != CURLE_OK) {
		const char *who = hostapi_is_url(sock) ? "berth-web" : "berth-hostd";
		if (*status && s->sink && (rc == CURLE_WRITE_ERROR ||
					   rc == CURLE_ABORTED_BY_CALLBACK))
			snprintf(err, errlen, "the transfer from %s was ended", who);
		else if (*status)
			snprintf(err, errlen, "the transfer from %s at %s broke off: %s (%s)", who,
				 sock, curl_easy_strerror(rc), hostapi_is_url(sock) ?
				 "the network, or berth-web's or hostd's log there" : "hostd's log "
				 "says why");
		else
			snprintf(err, errlen, "cannot reach %s at %s: %s", who, sock,
				 curl_easy_strerror(rc));
		goto out;
	}
	ret = 0;
out:
	buf_free(&s->err_body);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(s->h);
	return ret;
}

int hostapi_upload(const char *sock, const char *method, const char *path, int fd,
		   uint64_t size, hostapi_progress_fn fn, void *data, long *status,
		   json_t **resp, char *err, size_t errlen)
{
	return hostapi_upload_as(sock, NULL, method, path, fd, size, fn, data, status, resp, err,
				 errlen);
}

int hostapi_upload_as(const char *sock, const char *token, const char *method,
		      const char *path, int fd, uint64_t size, hostapi_progress_fn fn, void *data,
		      long *status, json_t **resp, char *err, size_t errlen)
{
	struct stream s = { .fd = fd, .size = size, .fn = fn, .data = data, .token = token,
			    .err_body = BUF_INIT };

	return transfer(sock, method, path, &s, true, status, resp, err, errlen);
}

int hostapi_download(const char *sock, const char *path, int fd, hostapi_progress_fn fn,
		     void *data, long *status, json_t **resp, char *err, size_t errlen)
{
	return hostapi_download_as(sock, NULL, path, fd, fn, data, status, resp, err, errlen);
}

int hostapi_download_as(const char *sock, const char *token, const char *path, int fd,
			hostapi_progress_fn fn, void *data, long *status, json_t **resp,
			char *err, size_t errlen)
{
	struct stream s = { .fd = fd, .fn = fn, .data = data, .download = true, .token = token,
			    .err_body = BUF_INIT };

	return transfer(sock, "GET", path, &s, false, status, resp, err, errlen);
}

int hostapi_stream(const char *sock, const char *method, const char *path, json_t *body,
		   hostapi_sink_fn sink, void *data, long *status, json_t **resp, char *err,
		   size_t errlen)
{
	return hostapi_stream_as(sock, NULL, method, path, body, sink, data, status, resp, err,
				 errlen);
}

int hostapi_stream_as(const char *sock, const char *token, const char *method,
		      const char *path, json_t *body, hostapi_sink_fn sink, void *data,
		      long *status, json_t **resp, char *err, size_t errlen)
{
	return hostapi_stream_until_as(sock, token, method, path, body, sink, data, NULL, NULL,
				       status, resp, err, errlen);
}

int hostapi_stream_until_as(const char *sock, const char *token, const char *method,
			    const char *path, json_t *body, hostapi_sink_fn sink, void *data,
			    hostapi_until_fn until, void *until_data, long *status,
			    json_t **resp, char *err, size_t errlen)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct stream s = { .download = true, .sink = sink, .data = data, .json = text,
			    .token = token, .until = until, .until_data = until_data,
			    .err_body = BUF_INIT };
	int ret;

	if (body && !text)
		abort();
	ret = transfer(sock, method, path, &s, false, status, resp, err, errlen);
	free(text);
	return ret;
}

char *hostapi_escape(const char *s)
{
	char *c = curl_easy_escape(NULL, s, 0), *out;

	if (!c)
		abort();
	out = strdup(c);
	curl_free(c);
	if (!out)
		abort();
	return out;
}

const char *hostapi_message(json_t *resp, const char *fallback)
{
	const char *m = json_string_value(json_object_get(json_object_get(resp, "error"),
							  "message"));

	if (!m)
		m = json_string_value(json_object_get(resp, "message"));
	return m ? m : fallback;
}
