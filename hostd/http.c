#include "hostd/http.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "hostd/api.h"
#include "common/banned.h"

#define STATIC_MAX (8 << 20)

struct http {
	struct hostd *h;
	struct api *api;
	struct MHD_Daemon *d;
	int fd;
	char *cert, *key;       /* PEM, kept for libmicrohttpd's lifetime */
	char web[PATH_MAX];
};

int http_parse_listen(const char *listen, struct sockaddr_storage *ss, unsigned *sslen,
		      struct err *e)
{
	char host[80], port[8];
	const char *colon = strrchr(listen, ':');
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE };
	struct addrinfo *res = NULL;
	size_t hl;
	char *end;
	long p;

	if (!colon || colon == listen || strlen(colon + 1) >= sizeof(port))
		goto bad;
	hl = (size_t)(colon - listen);
	if (listen[0] == '[') {
		if (hl < 3 || listen[hl - 1] != ']')
			goto bad;
		snprintf(host, sizeof(host), "%.*s", (int)(hl - 2), listen + 1);
	} else {
		if (hl >= sizeof(host) || memchr(listen, ':', hl))
			goto bad;
		snprintf(host, sizeof(host), "%.*s", (int)hl, listen);
	}
	snprintf(port, sizeof(port), "%s", colon + 1);
	errno = 0;
	p = strtol(port, &end, 10);
	if (errno || *end || end == port || p < 1 || p > 65535)
		goto bad;
	if (getaddrinfo(host, port, &hints, &res) != 0 || !res)
		goto bad;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*sslen = (unsigned)res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
bad:
	return err_set(e, 400, "invalid_config", "http_listen = '%s' is not ADDR:PORT with a "
		       "numeric address (127.0.0.1:8080, [::1]:8080, 0.0.0.0:443) and a port "
		       "from 1 to 65535", listen);
}

/* The dashboard's files: web_dir, else web/ of the source tree bin/ is in,
 * else the copy `make install` put in PREFIX/share/berth/web (the binary
 * in PREFIX/bin), else /usr/share/berth/web. */
static void resolve_web(struct http *x)
{
	char dir[PATH_MAX], probe[PATH_MAX + 16];

	if (x->h->cfg.web_dir[0]) {
		snprintf(x->web, sizeof(x->web), "%s", x->h->cfg.web_dir);
	} else {
		snprintf(x->web, sizeof(x->web), "/usr/share/berth/web");
		/* bin/ of a source tree, build/asan/bin/ (make asan), or an
		 * installed PREFIX/bin/. */
		static const char *const rel[] = { "../web/page", "../../../web/page", "../share/berth/web",
						   NULL };
		for (int i = 0; rel[i] && exe_dir(dir, sizeof(dir)) == 0; i++) {
			xsnprintf(probe, sizeof(probe), "%s/%s/index.html", dir, rel[i]);
			if (access(probe, R_OK) == 0) {
				xsnprintf(x->web, sizeof(x->web), "%s/%s", dir, rel[i]);
				break;
			}
		}
	}
	snprintf(probe, sizeof(probe), "%s/index.html", x->web);
	if (access(probe, R_OK) != 0)
		log_warn("dashboard: no %s (web_dir): only the API answers over HTTP", probe);
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, const char *code,
				 const char *msg)
{
	json_t *j = json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg);
	char *text = json_dumps(j, JSON_COMPACT);
	struct MHD_Response *r;
	enum MHD_Result ret;

	json_decref(j);
	if (!text)
		return MHD_NO;
	r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", "application/json");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static const char *content_type(const char *path)
{
	static const struct { const char *ext, *type; } types[] = {
		{ ".html", "text/html; charset=utf-8" },
		{ ".js", "text/javascript; charset=utf-8" },
		{ ".mjs", "text/javascript; charset=utf-8" },
		{ ".css", "text/css; charset=utf-8" },
		{ ".svg", "image/svg+xml" },
		{ ".png", "image/png" },
		{ ".ico", "image/x-icon" },
		{ ".json", "application/json" },
		{ ".txt", "text/plain; charset=utf-8" },
	};
	const char *dot = strrchr(path, '.');

	for (size_t i = 0; dot && i < sizeof(types) / sizeof(types[0]); i++)
		if (!strcmp(dot, types[i].ext))
			return types[i].type;
	return "application/octet-stream";
}

/* A request path for a file of web/: "/" is index.html; otherwise
 * segments of [A-Za-z0-9._-] that do not start with '.', so nothing
 * above web/ nor hidden in it is reachable. */
static bool static_path_ok(const char *p)
{
	if (*p != '/' || strlen(p) > 200)
		return false;
	for (const char *s = p; *s; s++) {
		if (*s == '/') {
			if (s[1] == '.' || s[1] == '/')
				return false;
			continue;
		}
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '.' || *s == '_' || *s == '-'))
			return false;
	}
	return true;
}

static enum MHD_Result serve_static(struct http *x, struct MHD_Connection *c, const char *url,
				    const char *method)
{
	char path[PATH_MAX + 256];
	const char *rel;
	struct stat st;
	struct MHD_Response *r;
	enum MHD_Result ret;
	char *data = NULL;
	size_t got = 0;
	int fd;

	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return send_json(c, 405, "method_not_allowed", "only GET and HEAD outside /v1");
	if (!static_path_ok(url))
		return send_json(c, 400, "invalid_path", "invalid path: letters, digits, '.', "
				 "'_', '-' and '/', no segment starting with '.'");
	rel = strcmp(url, "/") == 0 ? "index.html" : url + 1;
	if (rel[strlen(rel) - 1] == '/')
		return send_json(c, 404, "not_found", "no such file");
	snprintf(path, sizeof(path), "%s/%s", x->web, rel);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > STATIC_MAX) {
		if (fd >= 0)
			close(fd);
		return send_json(c, 404, "not_found", "no such file");
	}
	data = malloc((size_t)st.st_size + 1);
	if (!data)
		abort();
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, data + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	if (got != (size_t)st.st_size) {
		free(data);
		return send_json(c, 500, "internal", "cannot read the file");
	}
	r = MHD_create_response_from_buffer(got, data, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", content_type(rel));
	/* The page must always be the one that matches the running hostd. */
	MHD_add_response_header(r, "Cache-Control", strcmp(rel, "index.html") == 0 ?
				"no-store" : "no-cache");
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(r, "Content-Security-Policy",
				"default-src 'self'; img-src 'self' data:; "
				"frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
	ret = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version,
			      const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct http *x = cls;

	/* /v1 is the API, the same routes as on the UNIX socket. */
	if (!strcmp(url, "/v1") || !strncmp(url, "/v1/", 4))
		return api_handler(x->api, c, url, method, version, upload_data,
				   upload_data_size, con_cls);
	return serve_static(x, c, url, method);
}

/* A connection closes (libmicrohttpd has sent its answer and shut down its
 * writing side; the descriptor is still open).  When the client is still
 * sending (a refused upload: the answer went before its body), closing now
 * would make the kernel reset the connection, and the reset can reach the
 * client before the answer it has not read yet.  So, as HTTP servers'
 * lingering close does, what still arrives is read and dropped until the
 * client closes its side, goes quiet for 500 ms, or 2 s have passed; then
 * libmicrohttpd closes.  A connection with nothing unread closes at once. */
static void linger(void *cls, struct MHD_Connection *c, void **socket_context,
		   enum MHD_ConnectionNotificationCode code)
{
	const union MHD_ConnectionInfo *ci;
	char sink[16384];
	int fd, pending = 0;
	int64_t until = mono_ms() + 2000;

	(void)cls;
	(void)socket_context;
	if (code != MHD_CONNECTION_NOTIFY_CLOSED ||
	    !(ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD)))
		return;
	fd = ci->connect_fd;
	if (ioctl(fd, FIONREAD, &pending) < 0 || pending == 0)
		return;
	shutdown(fd, SHUT_WR);
	while (mono_ms() < until) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 500) <= 0 || read(fd, sink, sizeof(sink)) <= 0)
			break;
	}
}

static char *read_pem(const char *key, const char *file, struct err *e)
{
	char *s = file_read_trusted_link(file, 1 << 20, e);

	if (!s) {
		char msg[sizeof(e->msg)];
		snprintf(msg, sizeof(msg), "%s", e->msg);
		err_clear(e);
		err_set(e, 400, "invalid_config", "%s = %s: %s", key, file, msg);
	}
	return s;
}

/* The private key FILE is not open to other users (as sshd insists for its
 * host keys); a group may read it (Debian's ssl-cert group). */
static int key_private(const char *file, struct err *e)
{
	struct stat st;

	if (stat(file, &st) < 0)
		return 0;  /* read_pem names the problem */
	if (st.st_mode & (S_IROTH | S_IWOTH))
		return err_set(e, 400, "invalid_config",
			       "tls_key = %s is open to every user (mode %04o): "
			       "chmod o-rw it, the key must stay private",
			       file, (unsigned)(st.st_mode & 07777));
	return 0;
}

static bool loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
	if (ss->ss_family == AF_INET6)
		return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ss)->sin6_addr);
	return false;
}

int http_start(struct hostd *h, struct http **out, struct err *e)
{
	struct http *x = NULL;
	struct sockaddr_storage ss;
	unsigned sslen = 0;
	bool tls;
	int one = 1;

	*out = NULL;
	h->dashboard_url[0] = '\0';
	if (!h->cfg.http_listen[0]) {
		log_info("http_listen is empty: no dashboard, no HTTP API");
		return 0;
	}
	if (http_parse_listen(h->cfg.http_listen, &ss, &sslen, e) < 0)
		return -1;
	if (!h->cfg.tls_cert[0] != !h->cfg.tls_key[0])
		return err_set(e, 400, "invalid_config", "HTTPS needs both tls_cert and tls_key "
			       "(only %s is set)", h->cfg.tls_cert[0] ? "tls_cert" : "tls_key");
	tls = h->cfg.tls_cert[0] != '\0';
	if (!tls && !loopback(&ss))
		return err_set(e, 400, "invalid_config", "http_listen = %s is reachable from other "
			       "hosts: API tokens would cross the network in clear; set tls_cert "
			       "and tls_key, or listen on 127.0.0.1 (and reach it with ssh -L)",
			       h->cfg.http_listen);
	if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
		return err_set(e, 400, "invalid_config", "tls_cert is set but this "
			       "libmicrohttpd has no TLS support");
	x = calloc(1, sizeof(*x));
	if (!x)
		abort();
	x->h = h;
	x->fd = -1;
	if (tls && (!(x->cert = read_pem("tls_cert", h->cfg.tls_cert, e)) ||
		    key_private(h->cfg.tls_key, e) < 0 ||
		    !(x->key = read_pem("tls_key", h->cfg.tls_key, e))))
		goto fail;
	resolve_web(x);
	x->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (x->fd < 0) {
		err_errno(e, errno, "http_listen %s: socket", h->cfg.http_listen);
		goto fail;
	}
	setsockopt(x->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(x->fd, (struct sockaddr *)&ss, sslen) < 0 || listen(x->fd, 128) < 0) {
		int errnum = errno;
		if (!strcmp(h->cfg.http_listen, HTTP_LISTEN_DEFAULT) && errnum == EADDRINUSE) {
			/* The default on a machine with several hostds (tests,
			 * several state directories): the first one has it. */
			log_warn("http_listen %s (the default) is in use: no dashboard for this "
				 "hostd; set http_listen to another address", h->cfg.http_listen);
			close(x->fd);
			free(x);
			return 0;
		}
		err_errno(e, errnum, "http_listen %s", h->cfg.http_listen);
		goto fail;
	}
	x->api = api_http_new(h);
	struct MHD_OptionItem opts[13] = {
		{ MHD_OPTION_LISTEN_SOCKET, x->fd, NULL },
		{ MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)api_completed, x->api },
		{ MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)linger, NULL },
		/* Clients from the network: idle ones do not hold a thread,
		 * and one address cannot take every slot. */
		{ MHD_OPTION_CONNECTION_TIMEOUT, 60, NULL },
		{ MHD_OPTION_CONNECTION_LIMIT, 256, NULL },
		{ MHD_OPTION_PER_IP_CONNECTION_LIMIT, 64, NULL },
		{ MHD_OPTION_THREAD_STACK_SIZE, 1 << 20, NULL },
	};
	size_t nopt = 7;
	if (tls) {
		opts[nopt++] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_CERT, 0, x->cert };
		opts[nopt++] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_KEY, 0, x->key };
		opts[nopt++] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_PRIORITIES, 0,
			(void *)"NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2" };
	}
	opts[nopt] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
	x->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
				MHD_USE_ERROR_LOG | (tls ? MHD_USE_TLS : 0),
				0, NULL, NULL, handle, x,
				MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
	/* The listening socket is libmicrohttpd's now, even when it failed
	 * (it closes it): not closed again below. */
	x->fd = -1;
	if (!x->d) {
		err_set(e, 500, "internal", "cannot start the HTTP%s server on %s%s", tls ? "S" : "",
			h->cfg.http_listen, tls ? " (is tls_key the key of tls_cert, both PEM?)" : "");
		goto fail;
	}
	snprintf(h->dashboard_url, sizeof(h->dashboard_url), "%s://%s/", tls ? "https" : "http",
		 h->cfg.http_listen);
	log_info("dashboard and API on %s (web files %s)", h->dashboard_url, x->web);
	*out = x;
	return 0;
fail:
	if (x->fd >= 0)
		close(x->fd);
	api_http_free(x->api);
	free(x->cert);
	free(x->key);
	free(x);
	return -1;
}

void http_stop(struct http *x)
{
	if (!x)
		return;
	/* The listening socket is libmicrohttpd's since it started: it
	 * closes it. */
	MHD_stop_daemon(x->d);
	api_http_free(x->api);
	free(x->cert);
	free(x->key);
	free(x);
}
