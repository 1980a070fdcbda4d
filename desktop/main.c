/* berth-desktop: the machines' screens in the browser.  Usage:
 *   berth-desktop --state DIR [--listen ADDR:PORT] [--user USER]
 *                 [--max-fps N] [--max-unauth-per-addr N] [--page DIR]
 *                 [--novnc DIR]
 *                 [--log-level L] [--pidfile FILE]
 *
 * One TCP port for every machine (docs/desktop.md).  A connection's HTTP
 * request is peeked at (MSG_PEEK) without being consumed:
 *   GET /ws/USER/NAME?token=T (a WebSocket upgrade): hostd redeems the
 *       one-time token T over DIR/desktop.sock (bound to USER and NAME,
 *       unexpired, unused); the connection then goes, request unread, to
 *       the machine's libvncserver screen, which does the WebSocket
 *       handshake and serves RFB (desktop/screen.h).
 *   GET /ws/USER/NAME?resume=K: a viewer coming back (desktop/screen.h).
 *   GET /state?token=T[&resume=K]: the viewer's state for the page, as
 *       JSON (K: the resume key the page came back with).
 *   GET /novnc/...: noVNC's files; GET /page/...: the page's own files;
 *   GET /USER/NAME/ (or anything else): the page.
 * Started as root it binds, then drops to USER (default berth-desktop) before
 * it reads a byte from the network; it never opens libvirt.  One thread
 * per connection until it is handed over.  Runs until SIGTERM or SIGINT. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/openat2.h>

#include <curl/curl.h>
#include <jansson.h>

#include "common/hostapi.h"
#include "common/addrcount.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/util.h"
#include "desktop/hostfd.h"
#include "desktop/request.h"
#include "desktop/screen.h"
#include "common/banned.h"

#define REQ_MAX 8192
/* libvncserver 0.9.14 reads a WebSocket handshake of at most 4095 bytes:
 * a longer /ws/ request would spend its token and then fail. */
#define WS_HEAD_MAX 4095
/* Connections at once: those being read and the viewers handed over. */
#define CONN_MAX 256
/* Of those being read (no token redeemed yet), per source address: one
 * client's silent connections cannot fill CONN_MAX. */
static struct addrcount reading_from = ADDRCOUNT_INIT;
static int max_unauth_per_addr = 32;
#define FILE_MAX (16 << 20)

static char desktop_sock[PATH_MAX], hostd_sock[PATH_MAX];
static char page_dir[PATH_MAX], novnc_dir[PATH_MAX];
static volatile sig_atomic_t stopping;
static int wake_pipe[2] = { -1, -1 };
static atomic_int reading;  /* connections whose request is being read */

static void usage(FILE *f)
{
	fprintf(f, "usage: berth-desktop --state DIR [--listen ADDR:PORT] [--user USER]\n"
		   "                     [--max-fps N] [--max-unauth-per-addr N] [--page DIR]\n"
		   "                     [--novnc DIR]\n"
		   "                     [--log-level LEVEL] [--pidfile FILE]\n");
}

static void on_signal(int sig)
{
	(void)sig;
	stopping = 1;
	if (write(wake_pipe[1], "x", 1) < 0) {
		/* nothing to do: poll's timeout ends the loop too */
	}
}

static void reply(int fd, int status, const char *reason, const char *type,
		  const char *body, size_t len)
{
	char head[1024];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
			 "Referrer-Policy: no-referrer\r\nX-Frame-Options: SAMEORIGIN\r\n"
			 "Content-Security-Policy: default-src 'self'; connect-src 'self' ws: wss:; "
			 "img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "
			 "object-src 'none'; base-uri 'none'\r\n"
			 "Connection: close\r\n\r\n", status, reason, type, len);
	if (send(fd, head, (size_t)n, MSG_NOSIGNAL) != n)
		return;
	while (len > 0) {
		ssize_t w = send(fd, body, len, MSG_NOSIGNAL);
		if (w <= 0)
			return;
		body += w;
		len -= (size_t)w;
	}
}

static void reply_error(int fd, int status, const char *reason, const char *code,
			const char *msg)
{
	json_t *j = json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

	if (s)
		reply(fd, status, reason, "application/json", s, strlen(s));
	free(s);
	json_decref(j);
}

/* Serve file REL (web_path_ok: no "..", only [A-Za-z0-9._/-]) under DIR. */
static void serve_file(int fd, const char *dir, const char *rel)
{
	size_t len = 0;
	char *data;

	if (!web_path_ok(rel)) {
		reply_error(fd, 400, "Bad Request", "invalid_path", "invalid path");
		return;
	}
	data = file_read_beneath(dir, rel, FILE_MAX, &len);
	if (!data)
		reply_error(fd, 404, "Not Found", "not_found", "no such file");
	else
		reply(fd, 200, "OK", mime_type(rel), data, len);
	free(data);
}

/* Read and drop the N bytes of a request head that were only peeked at:
 * closing a socket with unread data would reset it, losing the answer. */
static int drain(int fd, size_t n)
{
	char sink[REQ_MAX];

	while (n > 0) {
		ssize_t r = read(fd, sink, n < sizeof(sink) ? n : sizeof(sink));
		if (r <= 0)
			return -1;
		n -= (size_t)r;
	}
	return 0;
}

/* GET /ws/USER/NAME?token=T (HEAD bytes of request head): redeem, then
 * hand FD to the screen. */
static void viewer(int fd, char *rest, size_t head, const char *from)
{
	char token[64], err[512];
	char *query, *user, *name;
	json_t *req, *resp = NULL;
	const char *code = NULL;

	if (!request_ws_split(rest, &user, &name, &query)) {
		/* Nothing of it is logged or redeemed. */
		drain(fd, head);
		reply_error(fd, 400, "Bad Request", "invalid_name",
			    "expected /ws/USER/MACHINE with a valid user and machine name");
		close(fd);
		return;
	}
	if (query && request_query_get(query, "resume", token, sizeof(token)) &&
	    request_token_ok(token)) {
		/* A viewer coming back after its connection broke. */
		char orig[64];
		int64_t grant = 0;
		if (screen_resume(token, user, name, orig, sizeof(orig), &grant) < 0) {
			/* The page asks /state with this key, and stops. */
			screen_refused(token, name, "unknown or expired resume key: ask "
				       "for a new URL");
			drain(fd, head);
			reply_error(fd, 403, "Forbidden", "invalid_resume",
				    "unknown or expired resume key: ask for a new URL");
			close(fd);
			return;
		}
		log_info("viewer from %s back on %s/%s", from, user, name);
		screen_add_viewer(user, name, false, fd, orig, token, from, grant, NULL);
		return;
	}
	if (!query || !request_query_get(query, "token", token, sizeof(token)) ||
	    !request_token_ok(token)) {
		drain(fd, head);
		reply_error(fd, 400, "Bad Request", "invalid_request",
			    "expected /ws/USER/MACHINE?token=TOKEN");
		close(fd);
		return;
	}
	req = json_pack("{s:s, s:s, s:s, s:s}", "op", "redeem", "token", token, "user", user,
			"machine", name);
	if (!req || hostfd_call(desktop_sock, req, &resp, NULL, 0, err, sizeof(err)) < 0) {
		log_error("redeem a token: %s", err);
		drain(fd, head);
		reply_error(fd, 503, "Service Unavailable", "hostd_unavailable", err);
		close(fd);
		json_decref(req);
		return;
	}
	json_decref(req);
	const char *msg = hostfd_error(resp, &code);
	if (*msg) {
		log_info("viewer from %s for %s/%s refused: %s", from, user, name, msg);
		screen_refused(token, name, msg);
		drain(fd, head);
		reply_error(fd, 403, "Forbidden", code ? code : "refused", msg);
		close(fd);
		json_decref(resp);
		return;
	}
	const char *state = json_string_value(json_object_get(resp, "state"));
	const char *handle = json_string_value(json_object_get(resp, "handle"));
	json_int_t grant = json_integer_value(json_object_get(resp, "grant"));
	bool wake = !state || strcmp(state, "running") != 0;
	if (!handle || grant <= 0) {
		log_error("hostd redeemed a token for %s/%s without a grant", user, name);
		drain(fd, head);
		reply_error(fd, 502, "Bad Gateway", "hostd_unavailable",
			    "hostd gave no attach handle: is it older than the bridge?");
		close(fd);
		json_decref(resp);
		return;
	}
	screen_add_viewer(user, name, wake, fd, token, NULL, from, (int64_t)grant, handle);
	json_decref(resp);
}

struct conn {
	int fd;
	char from[64];	/* ADDR:PORT, for the log */
	char addr[48];	/* ADDR, counted in reading_from */
};

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	int fd = c->fd;
	char buf[REQ_MAX + 1], *end = NULL;
	size_t len = 0;
	int64_t t0 = mono_ms();

	/* Peek until the whole request head is in: the WebSocket handshake
	 * must still find it in the socket. */
	while (!end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int left = 10000 - (int)(mono_ms() - t0);
		if (left <= 0 || poll(&p, 1, left) <= 0)
			goto close;
		ssize_t n = recv(fd, buf, REQ_MAX, MSG_PEEK);
		if (n <= 0)
			goto close;
		len = (size_t)n;
		buf[len] = '\0';
		end = strstr(buf, "\r\n\r\n");
		if (!end && len == REQ_MAX) {
			reply_error(fd, 431, "Request Header Fields Too Large", "too_large",
				    "request head over 8 KiB");
			goto close;
		}
		if (!end)
			usleep(10 * 1000);  /* more to come; MSG_PEEK returns at once */
	}
	char *path = request_target(buf);
	if (!path) {
		drain(fd, (size_t)(end + 4 - buf));
		reply_error(fd, 405, "Method Not Allowed", "method", "only GET");
		goto close;
	}
	if (!strncmp(path, "/ws/", 4)) {
		size_t head = (size_t)(end + 4 - buf);
		if (head > WS_HEAD_MAX) {
			/* Refused before the token is spent. */
			drain(fd, head);
			reply_error(fd, 431, "Request Header Fields Too Large", "too_large",
				    "a WebSocket request head over 4 KiB");
			goto close;
		}
		viewer(fd, path + 4, head, c->from);
		/* Counted until then (a viewer handed over is counted twice
		 * for a moment, never not at all). */
		atomic_fetch_sub(&reading, 1);
		addrcount_leave(&reading_from, c->addr);
		free(c);
		return NULL;
	}
	/* A plain GET: consume the head (the answer closes the connection). */
	if (drain(fd, (size_t)(end + 4 - buf)) < 0)
		goto close;
	if (!strncmp(path, "/state?", 7)) {
		char token[64], key[64];
		bool has_key = request_query_get(path + 7, "resume", key, sizeof(key)) &&
			       request_token_ok(key);
		bool has_token = request_query_get(path + 7, "token", token, sizeof(token)) &&
				 request_token_ok(token);
		char *s = has_token ? screen_state(token, has_key ? key : NULL) : NULL;
		if (s)
			reply(fd, 200, "OK", "application/json", s, strlen(s));
		else
			reply_error(fd, 400, "Bad Request", "invalid_token", "token required");
		free(s);
	} else if (!strncmp(path, "/novnc/", 7)) {
		serve_file(fd, novnc_dir, path + 7);
	} else if (!strncmp(path, "/page/", 6)) {
		serve_file(fd, page_dir, path + 6);
	} else if (!strcmp(path, "/favicon.ico")) {
		reply_error(fd, 404, "Not Found", "not_found", "no such file");
	} else {
		serve_file(fd, page_dir, "index.html");
	}
close:
	atomic_fetch_sub(&reading, 1);
	addrcount_leave(&reading_from, c->addr);
	close(fd);
	free(c);
	return NULL;
}

/* SS as "ADDR:PORT" into OUT and, when HOST is not NULL, its address
 * alone into HOST (48 bytes). */
static void peer_name(const struct sockaddr_storage *ss, char *out, size_t outlen, char *host_out)
{
	char host[INET6_ADDRSTRLEN] = "?";
	int port = 0;

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)ss;
		inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
		port = ntohs(a->sin_port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)ss;
		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
		port = ntohs(a->sin6_port);
	}
	snprintf(out, outlen, "%s:%d", host, port);
	if (host_out)
		snprintf(host_out, 48, "%s", host);
}

/* Every second: hold the viewers' grants, and drop the viewers of those
 * hostd revoked (screen_hold).  Every 5 s: which run of hostd is this?  A
 * restarted hostd forgot the live sessions; the viewers' are opened
 * again. */
static void *watch_hostd(void *arg)
{
	char last[64] = "";
	unsigned tick = 0;

	(void)arg;
	while (!stopping) {
		screen_hold();
		if (tick++ % 5) {
			sleep(1);
			continue;
		}
		json_t *resp = NULL;
		long status = 0;
		char err[256];
		if (hostapi_call(hostd_sock, "GET", "/v1/gateway/epoch", NULL, &status, &resp,
				 err, sizeof(err)) == 0 && status == 200) {
			const char *ep = json_string_value(json_object_get(resp, "epoch"));
			if (ep && last[0] && strcmp(ep, last) != 0)
				screen_reopen_sessions();
			if (ep)
				snprintf(last, sizeof(last), "%s", ep);
		}
		json_decref(resp);
		sleep(1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "state", required_argument, NULL, 's' },
		{ "listen", required_argument, NULL, 'l' },
		{ "user", required_argument, NULL, 'u' },
		{ "max-fps", required_argument, NULL, 'f' },
		{ "max-unauth-per-addr", required_argument, NULL, 'a' },
		{ "page", required_argument, NULL, 'P' },
		{ "novnc", required_argument, NULL, 'N' },
		{ "log-level", required_argument, NULL, 'L' },
		{ "pidfile", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *state = NULL, *listen_spec = "127.0.0.1:6080", *user = "berth-desktop";
	const char *pidfile = NULL;
	int c, lfd, max_fps = 60;

	log_init("berth-desktop");
	daemon_beside_exe("desktop/page", "share/berth/desktop", page_dir, sizeof(page_dir));
	daemon_beside_exe("build/node/node_modules/@novnc/novnc", "share/berth/novnc", novnc_dir,
		   sizeof(novnc_dir));
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': state = optarg; break;
		case 'l': listen_spec = optarg; break;
		case 'u': user = optarg; break;
		case 'p': pidfile = optarg; break;
		case 'P': snprintf(page_dir, sizeof(page_dir), "%s", optarg); break;
		case 'N': snprintf(novnc_dir, sizeof(novnc_dir), "%s", optarg); break;
		case 'f':
			if (daemon_arg_int("--max-fps", optarg, 1, 1000, &max_fps) < 0)
				return 2;
			break;
		case 'a':
			if (daemon_arg_int("--max-unauth-per-addr", optarg, 1, CONN_MAX,
					   &max_unauth_per_addr) < 0)
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
	if (!state || optind != argc) {
		usage(stderr);
		return 2;
	}
	char check[PATH_MAX + 32];
	snprintf(check, sizeof(check), "%s/index.html", page_dir);
	if (access(check, R_OK) < 0) {
		log_error("the page is missing: %s (--page DIR)", check);
		return 1;
	}
	snprintf(check, sizeof(check), "%s/core/rfb.js", novnc_dir);
	if (access(check, R_OK) < 0) {
		log_error("noVNC is missing: %s (make deps installs it; --novnc DIR)", check);
		return 1;
	}
	snprintf(desktop_sock, sizeof(desktop_sock), "%s/desktop.sock", state);
	snprintf(hostd_sock, sizeof(hostd_sock), "%s/hostd.sock", state);
	signal(SIGPIPE, SIG_IGN);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
		log_error("cannot initialise libcurl");
		return 1;
	}
	lfd = daemon_start(listen_spec, pidfile, user, "bridge");
	if (lfd < 0)
		return 1;
	if (pipe2(wake_pipe, O_CLOEXEC) < 0) {
		log_error("pipe: %s", strerror(errno));
		return 1;
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	struct screen_cfg sc = { .desktop_sock = desktop_sock, .hostd_sock = hostd_sock,
				 .max_fps = max_fps };
	screen_init(&sc);
	{
		/* What an earlier run of the bridge left open is over. */
		json_t *body = json_pack("{s:s}", "kind", "desktop"), *resp = NULL;
		long status = 0;
		char err[256];
		if (hostapi_call(hostd_sock, "DELETE", "/v1/gateway/sessions", body, &status,
				 &resp, err, sizeof(err)) < 0)
			log_warn("forget old desktop sessions: %s", err);
		json_decref(body);
		json_decref(resp);
	}
	log_info("listening on %s as uid %u; hostd at %s; at most %d fps; page %s; noVNC %s",
		 listen_spec, (unsigned)getuid(), desktop_sock, max_fps, page_dir, novnc_dir);

	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 512 * 1024);
	pthread_t watcher;
	if (pthread_create(&watcher, &attr, watch_hostd, NULL) != 0)
		log_warn("cannot watch hostd's epoch: sessions are not reopened after its restart");
	while (!stopping) {
		struct pollfd pfd[2] = { { .fd = lfd, .events = POLLIN },
					 { .fd = wake_pipe[0], .events = POLLIN } };
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		pthread_t t;

		if (poll(pfd, 2, 5000) < 0 && errno != EINTR)
			break;
		if (stopping)
			break;
		if (!(pfd[0].revents & POLLIN))
			continue;
		int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
		if (fd < 0) {
			/* Out of descriptors: the pending connection stays
			 * readable, so poll would spin; give them time. */
			if (errno == EMFILE || errno == ENFILE) {
				log_warn("accept: %s", strerror(errno));
				usleep(100 * 1000);
			}
			continue;
		}
		int busy = atomic_load(&reading) + screen_viewer_count();
		if (busy >= CONN_MAX) {
			char from[64];
			peer_name(&ss, from, sizeof(from), NULL);
			log_warn("%d connections at once, at most %d: %s is turned away", busy,
				 CONN_MAX, from);
			close(fd);
			continue;
		}
		struct conn *cn = calloc(1, sizeof(*cn));
		if (!cn) {
			close(fd);
			continue;
		}
		cn->fd = fd;
		peer_name(&ss, cn->from, sizeof(cn->from), cn->addr);
		if (!addrcount_enter(&reading_from, cn->addr, max_unauth_per_addr)) {
			log_debug("%s has %d connections whose request is being read: one more is "
				  "turned away", cn->addr, max_unauth_per_addr);
			close(fd);
			free(cn);
			continue;
		}
		atomic_fetch_add(&reading, 1);
		if (pthread_create(&t, &attr, conn_main, cn) != 0) {
			atomic_fetch_sub(&reading, 1);
			addrcount_leave(&reading_from, cn->addr);
			log_error("cannot start a thread for %s", cn->from);
			close(fd);
			free(cn);
		}
	}
	uint64_t in, rects;
	screen_stats(&in, &rects);
	log_info("stopping (%llu upstream updates, %llu rectangles)", (unsigned long long)in,
		 (unsigned long long)rects);
	close(lfd);
	return 0;
}
