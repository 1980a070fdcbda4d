/* berth-web: berth over HTTP(S), unprivileged.  Usage:
 *   berth-web --state DIR [--listen ADDR:PORT] [--user USER] [--page DIR]
 *             [--xterm DIR] [--max-connections N] [--max-per-addr N]
 *             [--head-timeout S] [--idle-timeout S]
 *             [--log-level L] [--pidfile FILE]
 *
 * Started as root, it asks hostd (DIR/hostd.sock, root's GET
 * /v1/web/settings) where to listen (http_listen; --listen instead) and
 * which TLS files to serve (tls_cert, tls_key), binds, reads those files,
 * then becomes its user (web_user, default berth-web; --user) for good
 * before it reads a byte from the network.  Started as another user, it
 * needs --listen and serves plain HTTP on loopback.
 *
 * What it serves (libmicrohttpd, one thread per connection):
 *   api.DOMAIN: E2B's control plane (web/e2b.h), whatever the path;
 *   a preview's host, PORT-NAME-USER.DOMAIN: that machine's port
 *            (web/preview.h), whatever the path;
 *   /v1/...  berth's API, each request passed to hostd over DIR/web.sock
 *            (web/proxy.h), where hostd acts as the user of its bearer
 *            token: berth-web decides nothing of who calls; but GET
 *            /v1/machines/NAME/exec/ws, a command over a WebSocket, a
 *            session of berth-web's on hostd's exec routes (web/wsexec.h);
 *   /mcp     berth's MCP server over Streamable HTTP (POST; web/mcp.h), its
 *            tools acting as the bearer token's user through web.sock;
 *   /xterm/  xterm.js's files for the dashboard's terminal (npm's @xterm/:
 *            xterm/ and addon-fit/, from build/node or where `make
 *            install` put them);
 *   else     the dashboard's files (web/page/, or where `make install`
 *            put them);
 * and, when hostd's settings have a "broker", the credential broker on the
 * guests' gateway (web/broker.h), bound as root too.  At most 1024
 * connections (--max-connections), 64 per client address or IPv6 /64
 * (--max-per-addr); a request head within 10 s of the accept or of its
 * request line (--head-timeout), a kept connection's next request within
 * 60 s (--idle-timeout): web/conns.h.
 * Runs until SIGTERM or SIGINT. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "common/daemon.h"
#include "common/err.h"
#include "common/hostapi.h"
#include "common/log.h"
#include "common/util.h"
#include "web/broker.h"
#include "web/conns.h"
#include "web/envd.h"
#include "web/e2b.h"
#include "web/mcp.h"
#include "web/reply.h"
#include "web/preview.h"
#include "web/proxy.h"
#include "web/request.h"
#include "web/upgrade.h"
#include "web/wsexec.h"
#include "common/banned.h"

/* The dashboard's files, at most. */
#define PAGE_FILE_MAX (8 << 20)
/* How long berth-web waits for hostd to answer at its start. */
#define SETTINGS_WAIT_S 30

/* What the daemon was given, fixed after its start. */
struct web {
	char state[PATH_MAX];
	char web_sock[PATH_MAX + 16];   /* hostd's socket for berth-web */
	char page[PATH_MAX];            /* the dashboard's files */
	char xterm[PATH_MAX];           /* xterm.js's (npm's @xterm/), under /xterm/ */
	char listen[128];
	char user[64];
	char tls_cert[PATH_MAX], tls_key[PATH_MAX];
	char *cert, *key;               /* PEM, kept for libmicrohttpd's lifetime */
	int max_conns, max_per_addr;
	/* A request's head is owed this long after the accept or its request
	 * line; a kept connection's next request line this long after its
	 * last answer (web/conns.h). */
	int head_s, idle_s;
	json_t *broker;                 /* the credential broker's settings (null: off) */
	char preview_domain[256];       /* hostd's (an Origin of it may call /mcp) */
};

static struct web W = { .max_conns = 1024, .max_per_addr = 64, .head_s = 10, .idle_s = 60 };



/* One request, from its first line (uri_seen) to its end (completed). */
struct req {
	char *target;                   /* the request target as received */
	enum { REQ_NEW, REQ_API, REQ_PAGE, REQ_PREVIEW, REQ_MCP, REQ_E2B, REQ_ENVD } kind;
	struct envd_req *ev;            /* E2B's envd (web/envd.h) */
	struct proxy_req *px;
	struct e2b_req *e2b;
	struct preview_req *pv;
	struct wsexec_req *ws;          /* exec/ws: the session's, until the upgrade */
	struct webmcp_req *mcp;         /* POST /mcp (web/mcp.h) */
};

static void usage(FILE *f)
{
	fprintf(f, "usage: berth-web --state DIR [--listen ADDR:PORT] [--user USER] [--page DIR]\n"
		   "                 [--xterm DIR] [--max-connections N] [--max-per-addr N]\n"
		   "                 [--head-timeout S] [--idle-timeout S]\n"
		   "                 [--log-level LEVEL] [--pidfile FILE]\n");
}

/* A file of the dashboard (DIR: the page's, or xterm's): "/" is
 * index.html, otherwise a path that web_path_ok takes, read beneath DIR. */
static enum MHD_Result serve_page(struct MHD_Connection *c, const char *dir, const char *url)
{
	const char *rel = strcmp(url, "/") == 0 ? "index.html" : url + 1;
	struct MHD_Response *r;
	enum MHD_Result ret;
	size_t len = 0;
	char *data;

	/* (its method, GET or HEAD, was checked at the head: handle) */
	if (url[0] != '/' || !web_path_ok(rel))
		return web_error(c, 400, "invalid_path", "invalid path: letters, digits, '.', "
				  "'_', '-' and '/', no segment starting with '.'");
	data = file_read_beneath(dir, rel, PAGE_FILE_MAX, &len);
	if (!data)
		return web_error(c, 404, "not_found", "no such file");
	r = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", mime_type(rel));
	/* The page must always be the one that matches the running berth. */
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

/* The client's address, for X-Forwarded-For and the logs. */
static void peer_of(struct MHD_Connection *c, char *out, size_t outlen)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;

	out[0] = '\0';
	if (sa && sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out,
			  (socklen_t)outlen);
	else if (sa && sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out,
			  (socklen_t)outlen);
}

/* libmicrohttpd hands every request's target here first, as sent
 * (percent-encoded, with its query): what is passed to hostd.  The
 * answer is the request's state (*con_cls in the handler). */
static void *uri_seen(void *cls, const char *uri, struct MHD_Connection *c)
{
	struct req *r = calloc(1, sizeof(*r));

	(void)cls;
	if (!r || !(r->target = strdup(uri)))
		abort();
	conns_request_line(c);
	return r;
}

/* A connection opens and closes: its place in its address's share and
 * the reaper's list (web/conns.h), with previews' state for it in its
 * slot; and before libmicrohttpd frees a closed one, no close of an
 * upgraded connection may be inside it (web/upgrade.h). */
static void notify(void *cls, struct MHD_Connection *c, void **socket_context,
		   enum MHD_ConnectionNotificationCode code)
{
	if (code == MHD_CONNECTION_NOTIFY_STARTED)
		conns_notify(cls, c, socket_context, code);
	if (code == MHD_CONNECTION_NOTIFY_CLOSED)
		web_upgrade_wait_closes();
	preview_notify(cls, c, conns_slot(c), code);
	if (code == MHD_CONNECTION_NOTIFY_CLOSED)
		conns_notify(cls, c, socket_context, code);
}

/* exec/ws's 101 went: the socket is the session's (libmicrohttpd calls
 * this before the request's completed(), which frees r->ws). */
static void upgraded(void *cls, struct MHD_Connection *c, void *con_cls, const char *extra,
		     size_t extra_len, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct req *r = con_cls;

	(void)cls;
	conns_upgraded(c);
	if (wsexec_start(r->ws, sock, extra, extra_len, urh) < 0)
		web_upgrade_close(urh);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload_data,
			      size_t *upload_data_size, void **con_cls)
{
	struct req *r = *con_cls;
	char peer[INET6_ADDRSTRLEN];

	(void)cls;
	(void)version;
	if (!r)
		return MHD_NO;
	if (r->kind == REQ_NEW) {
		conns_head(c);
		r->ev = envd_route(c);
		r->kind = r->ev ? REQ_ENVD : e2b_host(c) ? REQ_E2B : preview_host(c) ? REQ_PREVIEW :
			  !strcmp(url, "/v1") || !strncmp(url, "/v1/", 4) ? REQ_API :
			  webmcp_route(url) ? REQ_MCP : REQ_PAGE;
		/* A page's file is answered at the request's end: answered at
		 * its head, libmicrohttpd would close the connection after it,
		 * and the browser make a new one for the next file.  So a page's
		 * request may have no body: one sent a byte a minute would hold
		 * the connection, its head's deadline passed, for as long as it
		 * lasts (refused at the head, the connection closes). */
		if (r->kind == REQ_PAGE) {
			struct web_framing f;
			char why[160];
			if (web_request_check(c, method, &f, why, sizeof(why)))
				return web_error(c, 400, "invalid_request", why);
			if (strcmp(method, "GET") && strcmp(method, "HEAD"))
				return web_error(c, 405, "method_not_allowed",
						 "only GET and HEAD outside /v1");
			if (f.has_body)
				return web_error(c, 413, "body_not_allowed",
						 "the dashboard's files take no request body");
			return MHD_YES;
		}
	}
	if (r->kind == REQ_ENVD)
		return envd_handle(r->ev, c, method, url, upload_data, upload_data_size);
	if (r->kind == REQ_E2B)
		return e2b_handle(c, W.web_sock, method, r->target, upload_data, upload_data_size,
				  &r->e2b);
	if (r->kind == REQ_PREVIEW) {
		peer_of(c, peer, sizeof(peer));
		return preview_handle(c, method, r->target, peer, upload_data, upload_data_size,
				      &r->pv);
	}
	if (r->kind == REQ_MCP)
		return webmcp_handle(c, method, W.web_sock, upload_data, upload_data_size, &r->mcp);
	if (r->kind == REQ_API) {
		char name[64];
		peer_of(c, peer, sizeof(peer));
		if (wsexec_route(url, name, sizeof(name)))
			return wsexec_answer(c, method, name, W.web_sock, peer, &r->ws, upgraded,
					     NULL);
		return proxy_handle(W.web_sock, c, method, r->target, peer, upload_data,
				    upload_data_size, &r->px);
	}
	if (*upload_data_size) {	/* (none passes the head's check) */
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (!strncmp(url, "/xterm/", 7))
		return serve_page(c, W.xterm, url + 6);
	return serve_page(c, W.page, url);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct req *r = *con_cls;

	(void)cls;
	(void)toe;
	conns_done(c);
	if (!r)
		return;
	proxy_done(r->px);
	preview_done(r->pv);
	envd_done(r->ev);
	e2b_done(r->e2b);
	wsexec_req_free(r->ws);
	webmcp_req_free(r->mcp);
	free(r->target);
	free(r);
	*con_cls = NULL;
}

/* What hostd says of berth-web's listener (root's GET /v1/web/settings),
 * waiting up to SETTINGS_WAIT_S for hostd to answer.  Fills what the
 * command line did not set.  0, or -1 (logged). */
static int settings(void)
{
	char sock[PATH_MAX + 16], err[512];
	json_t *resp = NULL;
	long status = 0;
	int64_t until = mono_ms() + SETTINGS_WAIT_S * 1000;
	bool said = false;

	snprintf(sock, sizeof(sock), "%s/hostd.sock", W.state);
	while (hostapi_call(sock, "GET", "/v1/web/settings", NULL, &status, &resp, err,
			    sizeof(err)) < 0) {
		if (mono_ms() >= until) {
			log_error("no settings from berth-hostd: %s (is it running for %s?)", err,
				  W.state);
			return -1;
		}
		if (!said)
			log_info("waiting for berth-hostd at %s", sock);
		said = true;
		sleep(1);
	}
	if (status != 200) {
		log_error("berth-hostd refused berth-web's settings (%ld): %s", status,
			  hostapi_message(resp, "no message"));
		json_decref(resp);
		return -1;
	}
	const char *listen = json_string_value(json_object_get(resp, "http_listen"));
	const char *cert = json_string_value(json_object_get(resp, "tls_cert"));
	const char *key = json_string_value(json_object_get(resp, "tls_key"));
	const char *dir = json_string_value(json_object_get(resp, "web_dir"));
	const char *user = json_string_value(json_object_get(resp, "web_user"));
	if (!W.listen[0] && listen)
		snprintf(W.listen, sizeof(W.listen), "%s", listen);
	if (!W.user[0] && user)
		snprintf(W.user, sizeof(W.user), "%s", user);
	if (!W.page[0] && dir && dir[0])
		snprintf(W.page, sizeof(W.page), "%s", dir);
	snprintf(W.tls_cert, sizeof(W.tls_cert), "%s", cert ? cert : "");
	snprintf(W.tls_key, sizeof(W.tls_key), "%s", key ? key : "");
	preview_configure(json_string_value(json_object_get(resp, "preview_domain")));
	snprintf(W.preview_domain, sizeof(W.preview_domain), "%s",
		 json_string_value(json_object_get(resp, "preview_domain")) ?
		 json_string_value(json_object_get(resp, "preview_domain")) : "");
	e2b_configure(json_string_value(json_object_get(resp, "preview_domain")));
	W.broker = json_incref(json_object_get(resp, "broker"));
	json_decref(resp);
	return 0;
}

/* The PEM file of KEY (tls_cert, tls_key) as root reads it: root's, or a
 * link of root's to it (certbot's live/).  NULL (logged). */
static char *read_pem(const char *key, const char *file)
{
	struct err e = { 0 };
	char *s = file_read_trusted_link(file, 1 << 20, &e);

	if (!s)
		log_error("%s = %s: %s", key, file, e.msg);
	return s;
}

/* The private key FILE is not open to other users (as sshd insists for its
 * host keys); a group may read it (Debian's ssl-cert group). */
static bool key_private(const char *file)
{
	struct stat st;

	if (stat(file, &st) == 0 && (st.st_mode & (S_IROTH | S_IWOTH))) {
		log_error("tls_key = %s is open to every user (mode %04o): chmod o-rw it, the "
			  "key must stay private", file, (unsigned)(st.st_mode & 07777));
		return false;
	}
	return true;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "state", required_argument, NULL, 's' },
		{ "listen", required_argument, NULL, 'l' },
		{ "user", required_argument, NULL, 'u' },
		{ "page", required_argument, NULL, 'P' },
		{ "xterm", required_argument, NULL, 'X' },
		{ "max-connections", required_argument, NULL, 'm' },
		{ "max-per-addr", required_argument, NULL, 'a' },
		{ "head-timeout", required_argument, NULL, 'H' },
		{ "idle-timeout", required_argument, NULL, 'I' },
		{ "log-level", required_argument, NULL, 'L' },
		{ "pidfile", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *pidfile = NULL;
	struct MHD_Daemon *d = NULL;
	struct sockaddr_storage ss;
	socklen_t sslen;
	bool tls;
	sigset_t sigs;
	int c, sig, lfd;

	log_init("berth-web");
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': snprintf(W.state, sizeof(W.state), "%s", optarg); break;
		case 'l': snprintf(W.listen, sizeof(W.listen), "%s", optarg); break;
		case 'u': snprintf(W.user, sizeof(W.user), "%s", optarg); break;
		case 'P': snprintf(W.page, sizeof(W.page), "%s", optarg); break;
		case 'X': snprintf(W.xterm, sizeof(W.xterm), "%s", optarg); break;
		case 'p': pidfile = optarg; break;
		case 'm':
			if (daemon_arg_int("--max-connections", optarg, 1, 65536, &W.max_conns) < 0)
				return 2;
			break;
		case 'a':
			if (daemon_arg_int("--max-per-addr", optarg, 1, 65536, &W.max_per_addr) < 0)
				return 2;
			break;
		case 'H':
			if (daemon_arg_int("--head-timeout", optarg, 1, 3600, &W.head_s) < 0)
				return 2;
			break;
		case 'I':
			if (daemon_arg_int("--idle-timeout", optarg, 1, 86400, &W.idle_s) < 0)
				return 2;
			break;
		case 'L':
			if (daemon_arg_log_level(optarg) < 0)
				return 2;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!W.state[0] || optind != argc) {
		usage(stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
		log_error("cannot initialise libcurl");
		return 1;
	}
	snprintf(W.web_sock, sizeof(W.web_sock), "%s/web.sock", W.state);
	if (geteuid() == 0 && settings() < 0)
		return 1;
	envd_configure(W.preview_domain, W.web_sock);
	if (!W.listen[0]) {
		log_error(geteuid() == 0 ? "http_listen is empty in berth.conf: nothing to serve "
			  "(set it, or pass --listen)" : "--listen is needed when berth-web is not "
			  "started as root (root asks hostd for http_listen)");
		return 1;
	}
	if (!W.user[0])
		snprintf(W.user, sizeof(W.user), "berth-web");
	if (!W.page[0])
		daemon_beside_exe("web/page", "share/berth/web", W.page, sizeof(W.page));
	if (!W.xterm[0])
		daemon_beside_exe("build/node/node_modules/@xterm", "share/berth/xterm", W.xterm,
				  sizeof(W.xterm));
	{
		char probe[PATH_MAX + 32];
		snprintf(probe, sizeof(probe), "%s/index.html", W.page);
		if (access(probe, R_OK) != 0)
			log_warn("dashboard: no %s (--page DIR, web_dir): only the API answers", probe);
		snprintf(probe, sizeof(probe), "%s/xterm/lib/xterm.js", W.xterm);
		if (access(probe, R_OK) != 0)
			log_warn("the dashboard's terminal: no %s (make deps installs it; --xterm "
				 "DIR)", probe);
	}
	if (daemon_parse_listen(W.listen, &ss, &sslen) < 0) {
		log_error("listen on '%s': not ADDR:PORT with a numeric address (127.0.0.1:8080, "
			  "[::1]:8080, 0.0.0.0:443) and a port from 1 to 65535", W.listen);
		return 1;
	}
	tls = W.tls_cert[0] && W.tls_key[0];
	if (!tls && !daemon_addr_loopback(&ss)) {
		log_error("%s is reachable from other hosts: API tokens would cross the network "
			  "in clear; set tls_cert and tls_key, or listen on 127.0.0.1 (and reach "
			  "it with ssh -L)", W.listen);
		return 1;
	}
	if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
		log_error("tls_cert is set but this libmicrohttpd has no TLS support");
		return 1;
	}
	/* As root still: the TLS files, then the port. */
	if (tls && (!(W.cert = read_pem("tls_cert", W.tls_cert)) || !key_private(W.tls_key) ||
		    !(W.key = read_pem("tls_key", W.tls_key))))
		return 1;
	/* The credential broker's port on the guests' gateway, bound as root
	 * too (web/broker.h). */
	int bfd = -1;
	const char *blisten = json_string_value(json_object_get(W.broker, "listen"));
	if (blisten && (bfd = broker_listen(blisten)) < 0)
		return 1;
	lfd = daemon_start(W.listen, pidfile, W.user, "web server");
	webmcp_configure(tls, W.preview_domain[0] ? W.preview_domain : NULL);
	if (lfd < 0 || preview_start(W.state, tls) < 0)
		return 1;

	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	struct MHD_OptionItem o[16] = {
		{ MHD_OPTION_LISTEN_SOCKET, lfd, NULL },
		{ MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)uri_seen, NULL },
		{ MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, NULL },
		/* Clients from the network: idle ones do not hold a thread;
		 * one address (an IPv6 /64) cannot take every slot, nor one
		 * that sends its request a byte at a time (web/conns.h). */
		{ MHD_OPTION_CONNECTION_TIMEOUT, W.idle_s, NULL },
		{ MHD_OPTION_CONNECTION_LIMIT, W.max_conns, NULL },
		{ MHD_OPTION_THREAD_STACK_SIZE, 512 << 10, NULL },
		{ MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)notify, NULL },
	};
	size_t n = 7;
	if (conns_start(W.max_per_addr, W.head_s, W.idle_s) < 0)
		return 1;
	if (tls) {
		o[n++] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_CERT, 0, W.cert };
		o[n++] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_KEY, 0, W.key };
		o[n++] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_PRIORITIES, 0,
			(void *)"NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2" };
	}
	o[n] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
	d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
			     MHD_USE_ERROR_LOG | MHD_ALLOW_UPGRADE | (tls ? MHD_USE_TLS : 0),
			     0, NULL, NULL, handle, NULL, MHD_OPTION_ARRAY, o, MHD_OPTION_END);
	if (!d) {
		log_error("cannot start the HTTP%s server on %s%s", tls ? "S" : "", W.listen,
			  tls ? " (is tls_key the key of tls_cert, both PEM?)" : "");
		return 1;
	}
	log_info("listening on %s (%s) as uid %u; dashboard %s://%s/ from %s; hostd at %s",
		 W.listen, tls ? "HTTPS" : "HTTP", (unsigned)getuid(), tls ? "https" : "http",
		 W.listen, W.page, W.web_sock);
	struct broker *broker = NULL;
	if (bfd >= 0) {
		char ctl[PATH_MAX + 16];
		snprintf(ctl, sizeof(ctl), "%s/webctl.sock", W.state);
		struct broker_conf bc = {
			.webctl_sock = ctl,
			.ca_file = json_string_value(json_object_get(W.broker, "ca_file")),
			.timeout_s = (int)json_integer_value(json_object_get(W.broker, "timeout_s")),
			.max_body = (uint64_t)json_integer_value(json_object_get(W.broker, "max_body")),
			.closed = json_string_value(json_object_get(W.broker, "closed")),
			.allow = json_string_value(json_object_get(W.broker, "allow")),
		};
		if (!(broker = broker_start(bfd, &bc)))
			return 1;
		log_info("credential broker on %s", blisten);
	}
	while (sigwait(&sigs, &sig) == 0 && sig != SIGTERM && sig != SIGINT)
		;
	log_info("signal %d: stopping", sig);
	broker_stop(broker);
	json_decref(W.broker);
	webmcp_stop_all();
	wsexec_stop_all(5000);
	preview_stop(5000);
	proxy_stop_all();
	MHD_stop_daemon(d);
	conns_stop();
	if (pidfile)
		unlink(pidfile);
	free(W.cert);
	free(W.key);
	curl_global_cleanup();
	return 0;
}
