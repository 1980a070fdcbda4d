/* berth-sshgw: the SSH gateway.  Usage:
 *   berth-sshgw --state DIR [--listen ADDR:PORT] [--user USER]
 *               [--max-sessions N] [--login-grace SECONDS]
 *               [--kex-timeout SECONDS] [--max-unauth-per-addr N]
 *               [--max-auth-tries N] [--auth-fail-limit N] [--log-level L]
 *               [--pidfile FILE]
 *
 * `ssh NAME@host` lands in the caller's machine NAME (docs/architecture.md,
 * "SSH gateway").  Started as root, it makes or loads its host key
 * (DIR/sshgw/ssh_host_ed25519_key, made once and kept), binds its port and
 * drops to USER (default berth-sshgw) before it accepts a connection: it never
 * reads a network byte with privilege, and it never opens libvirt; what it
 * needs it asks hostd over DIR/hostd.sock.  One thread per connection.
 * Runs until SIGTERM or SIGINT. */
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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <libssh/libssh.h>
#include <libssh/server.h>

#include "common/addrcount.h"
#include "common/daemon.h"
#include "common/log.h"
#include "common/util.h"
#include "common/hostapi.h"
#include "sshgw/algos.h"
#include "sshgw/proxy.h"
#include "common/banned.h"

#define RATE_SLOTS 1024
#define RATE_WINDOW_S 60

static void usage(FILE *f)
{
	fprintf(f, "usage: berth-sshgw --state DIR [--listen ADDR:PORT] [--user USER]\n"
		   "                   [--max-sessions N] [--login-grace SECONDS]\n"
		   "                   [--kex-timeout SECONDS] [--max-unauth-per-addr N]\n"
		   "                   [--max-auth-tries N] [--auth-fail-limit N] "
		   "[--log-level LEVEL]\n"
		   "                   [--pidfile FILE]\n");
}

/* ---- limits ------------------------------------------------------------- */

/* What the connections report back to main through struct gw's
 * callbacks (its data). */
struct watch {
	/* Refused keys per source address in the current window; an
	 * address over the limit has its connections closed at accept until
	 * the window ends. */
	struct rate {
		char addr[64];
		int64_t start;
		int fails;
	} rates[RATE_SLOTS];
	pthread_mutex_t rate_mu;
	int auth_fail_limit;
	/* hostd's epoch at watch_hostd's last look, and how many times it
	 * saw a new one (hostd restarted). */
	char epoch[64];
	atomic_int generation;
};

static atomic_int active;
static int max_sessions = 2000;

/* Connections not yet authenticated, per source address. */
static struct addrcount unauth = ADDRCOUNT_INIT;
static int max_unauth_per_addr = 100;

/* struct gw's authenticated. */
static void authenticated(const char *addr, void *data)
{
	(void)data;
	addrcount_leave(&unauth, addr);
}

static struct rate *rate_slot(struct watch *w, const char *addr)
{
	unsigned h = 5381;

	for (const char *p = addr; *p; p++)
		h = h * 33 + (unsigned char)*p;
	return &w->rates[h % RATE_SLOTS];
}

/* struct gw's auth_failed. */
static void auth_failed(const char *addr, void *data)
{
	struct watch *w = data;
	int64_t now = mono_ms() / 1000;

	pthread_mutex_lock(&w->rate_mu);
	struct rate *r = rate_slot(w, addr);
	if (strcmp(r->addr, addr) != 0 || now - r->start >= RATE_WINDOW_S) {
		snprintf(r->addr, sizeof(r->addr), "%s", addr);
		r->start = now;
		r->fails = 0;
	}
	if (++r->fails == w->auth_fail_limit)
		log_warn("%s: %d refused keys within %d s: its connections are refused for the "
			 "rest of the minute", addr, r->fails, RATE_WINDOW_S);
	pthread_mutex_unlock(&w->rate_mu);
}

static bool addr_blocked(struct watch *w, const char *addr)
{
	int64_t now = mono_ms() / 1000;
	bool blocked;

	pthread_mutex_lock(&w->rate_mu);
	struct rate *r = rate_slot(w, addr);
	blocked = strcmp(r->addr, addr) == 0 && now - r->start < RATE_WINDOW_S &&
		  r->fails >= w->auth_fail_limit;
	pthread_mutex_unlock(&w->rate_mu);
	return blocked;
}

/* ---- connections -------------------------------------------------------- */

struct job {
	struct gw *g;
	int fd;
	char addr[64];
	int port;
};

static void *conn_main(void *arg)
{
	struct job *j = arg;

	if (!proxy_serve(j->g, j->fd, j->addr, j->port))
		addrcount_leave(&unauth, j->addr);
	free(j);
	atomic_fetch_sub(&active, 1);
	return NULL;
}

static void peer_name(const struct sockaddr_storage *ss, char *addr, size_t len, int *port)
{
	char host[NI_MAXHOST], serv[NI_MAXSERV];

	if (getnameinfo((const struct sockaddr *)ss, sizeof(*ss), host, sizeof(host), serv,
			sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
		snprintf(addr, len, "?");
		*port = 0;
		return;
	}
	/* An IPv4 client of a dual-stack socket reads as itself. */
	xsnprintf(addr, len, "%s", strncmp(host, "::ffff:", 7) == 0 ? host + 7 : host);
	*port = atoi(serv);
}

/* ---- hostd's restarts ----------------------------------------------------- */

/* struct gw's hostd_generation. */
static int hostd_generation(void *data)
{
	struct watch *w = data;

	return atomic_load(&w->generation);
}

/* Ask hostd which run of it this is; a new one since the last look means
 * it restarted and every live connection must open its session again. */
static void watch_hostd(struct watch *w, const char *sock)
{
	json_t *resp = NULL;
	char err[256];
	long st;

	if (hostapi_call(sock, "GET", "/v1/gateway/epoch", NULL, &st, &resp, err,
			 sizeof(err)) == 0 && st == 200 &&
	    json_is_string(json_object_get(resp, "epoch"))) {
		const char *now = json_string_value(json_object_get(resp, "epoch"));
		if (w->epoch[0] && strcmp(w->epoch, now) != 0) {
			log_info("hostd restarted: the live sessions are registered again");
			atomic_fetch_add(&w->generation, 1);
		}
		snprintf(w->epoch, sizeof(w->epoch), "%s", now);
	}
	json_decref(resp);
}

/* ---- setup -------------------------------------------------------------- */

/* Sessions hostd still counts from an earlier run of the gateway (one that
 * crashed or was killed) are over: say so, or the idle policy would never
 * see their machines idle. */
static void forget_sessions(const char *sock)
{
	json_t *body = json_pack("{s:s}", "kind", "ssh"), *resp = NULL;
	char err[256];
	long st;

	if (hostapi_call(sock, "DELETE", "/v1/gateway/sessions", body, &st, &resp, err,
			 sizeof(err)) < 0)
		log_warn("%s (sessions an earlier gateway left stay counted)", err);
	else if (st != 200)
		log_warn("hostd answered %ld to forgetting old sessions: %s", st,
			 hostapi_message(resp, "no message"));
	json_decref(body);
	json_decref(resp);
}

static volatile sig_atomic_t stopping;
static int wake_pipe[2] = { -1, -1 };

static void on_signal(int sig)
{
	int saved = errno;

	(void)sig;
	stopping = 1;
	if (write(wake_pipe[1], "x", 1) < 0) {
		/* nothing to do: the flag is set */
	}
	errno = saved;
}

/* The host key in DIR, made on the first start. */
static ssh_key host_key(const char *dir)
{
	char path[PATH_MAX], pub[PATH_MAX + 8];
	ssh_key key = NULL;

	xsnprintf(path, sizeof(path), "%s/ssh_host_ed25519_key", dir);
	if (access(path, F_OK) == 0) {
		/* Not through a link, root's or ours, writable by no one else. */
		struct err e = { 0 };
		char *pem = file_read_trusted(path, 65536, &e);
		if (!pem) {
			log_error("host key: %s", e.msg);
			return NULL;
		}
		if (ssh_pki_import_privkey_base64(pem, NULL, NULL, NULL, &key) != SSH_OK) {
			log_error("cannot read the host key %s", path);
			key = NULL;
		}
		explicit_bzero(pem, strlen(pem));
		free(pem);
		return key;
	}
	if (mkdir_p(dir, 0700) < 0) {
		log_error("create %s: %s", dir, strerror(errno));
		return NULL;
	}
	snprintf(pub, sizeof(pub), "%s.pub", path);
	if (ssh_pki_generate(SSH_KEYTYPE_ED25519, 0, &key) != SSH_OK ||
	    ssh_pki_export_privkey_file(key, NULL, NULL, NULL, pub) != SSH_OK ||
	    rename(pub, path) < 0) {
		log_error("cannot make the host key %s", path);
		unlink(pub);
		ssh_key_free(key);
		return NULL;
	}
	/* The public half, for users to check the fingerprint against. */
	ssh_key pk = NULL;
	if (ssh_pki_export_privkey_to_pubkey(key, &pk) == SSH_OK)
		ssh_pki_export_pubkey_file(pk, pub);
	ssh_key_free(pk);
	log_info("made the host key %s", path);
	return key;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "state", required_argument, NULL, 's' },
		{ "listen", required_argument, NULL, 'l' },
		{ "user", required_argument, NULL, 'u' },
		{ "max-sessions", required_argument, NULL, 'm' },
		{ "login-grace", required_argument, NULL, 'g' },
		{ "kex-timeout", required_argument, NULL, 'k' },
		{ "max-unauth-per-addr", required_argument, NULL, 'a' },
		{ "max-auth-tries", required_argument, NULL, 't' },
		{ "auth-fail-limit", required_argument, NULL, 'f' },
		{ "log-level", required_argument, NULL, 'L' },
		{ "pidfile", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *state = NULL, *listen_spec = "0.0.0.0:22", *user = "berth-sshgw", *pidfile = NULL;
	char sock[PATH_MAX], keydir[PATH_MAX];
	/* Static, as PTHREAD_MUTEX_INITIALIZER wants. */
	static struct watch w = { .rate_mu = PTHREAD_MUTEX_INITIALIZER, .auth_fail_limit = 20 };
	struct gw g = { .login_grace_s = 30, .kex_timeout_s = 10, .max_auth_tries = 6,
			.auth_failed = auth_failed, .authenticated = authenticated,
			.hostd_generation = hostd_generation, .data = &w };
	int c, lfd;
	ssh_key key;

	log_init("berth-sshgw");
	umask(077);
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's': state = optarg; break;
		case 'l': listen_spec = optarg; break;
		case 'u': user = optarg; break;
		case 'p': pidfile = optarg; break;
		case 'm':
			if (daemon_arg_int("--max-sessions", optarg, 1, 1000000, &max_sessions) < 0)
				return 2;
			break;
		case 'k':
			if (daemon_arg_int("--kex-timeout", optarg, 1, 3600, &g.kex_timeout_s) < 0)
				return 2;
			break;
		case 'a':
			if (daemon_arg_int("--max-unauth-per-addr", optarg, 1, 100000,
				      &max_unauth_per_addr) < 0)
				return 2;
			break;
		case 'g':
			if (daemon_arg_int("--login-grace", optarg, 1, 3600, &g.login_grace_s) < 0)
				return 2;
			break;
		case 't':
			if (daemon_arg_int("--max-auth-tries", optarg, 1, 100, &g.max_auth_tries) < 0)
				return 2;
			break;
		case 'f':
			if (daemon_arg_int("--auth-fail-limit", optarg, 1, 1000000, &w.auth_fail_limit) < 0)
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
	snprintf(sock, sizeof(sock), "%s/hostd.sock", state);
	snprintf(keydir, sizeof(keydir), "%s/sshgw", state);
	g.hostd_sock = sock;

	signal(SIGPIPE, SIG_IGN);
	if (ssh_init() < 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
		log_error("cannot initialise libssh or libcurl");
		return 1;
	}
	key = host_key(keydir);
	if (!key)
		return 1;
	g.bind = ssh_bind_new();
	if (!g.bind || ssh_bind_options_set(g.bind, SSH_BIND_OPTIONS_IMPORT_KEY, key) < 0) {
		log_error("cannot set up libssh's server");
		return 1;
	}
	/* What clients may negotiate: the lists and their reasons are in
	 * algos.c. */
	if (algos_bind(g.bind) < 0)
		return 1;
	lfd = daemon_start(listen_spec, pidfile, user, "gateway");
	if (lfd < 0)
		return 1;
	if (pipe2(wake_pipe, O_CLOEXEC) < 0) {
		log_error("pipe: %s", strerror(errno));
		return 1;
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	log_info("listening on %s as uid %u; hostd at %s", listen_spec, (unsigned)getuid(), sock);
	forget_sessions(sock);
	watch_hostd(&w, sock);
	int64_t watched = mono_ms();

	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 512 * 1024);
	while (!stopping) {
		struct pollfd pfd[2] = { { .fd = lfd, .events = POLLIN },
					 { .fd = wake_pipe[0], .events = POLLIN } };
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		pthread_t t;
		int fd;

		if (poll(pfd, 2, 5000) < 0 && errno != EINTR)
			break;
		if (stopping)
			break;
		if (mono_ms() - watched >= 5000) {
			watch_hostd(&w, sock);
			watched = mono_ms();
		}
		if (!(pfd[0].revents & POLLIN))
			continue;
		fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		struct job *j = calloc(1, sizeof(*j));
		if (!j)
			abort();
		j->g = &g;
		j->fd = fd;
		peer_name(&ss, j->addr, sizeof(j->addr), &j->port);
		if (addr_blocked(&w, j->addr) || atomic_load(&active) >= max_sessions) {
			log_debug("refused a connection from %s:%d (%s)", j->addr, j->port,
				  addr_blocked(&w, j->addr) ? "too many refused keys" : "session limit");
			close(fd);
			free(j);
			continue;
		}
		if (!addrcount_enter(&unauth, j->addr, max_unauth_per_addr)) {
			log_debug("refused a connection from %s:%d: %d of its connections are not "
				  "authenticated yet (--max-unauth-per-addr)", j->addr, j->port,
				  max_unauth_per_addr);
			close(fd);
			free(j);
			continue;
		}
		atomic_fetch_add(&active, 1);
		if (pthread_create(&t, &attr, conn_main, j) != 0) {
			log_error("cannot start a thread for %s:%d", j->addr, j->port);
			atomic_fetch_sub(&active, 1);
			addrcount_leave(&unauth, j->addr);
			close(fd);
			free(j);
		}
	}
	log_info("stopping (%d sessions end with it)", atomic_load(&active));
	close(lfd);
	ssh_bind_free(g.bind);	/* and the host key: the bind owns it */
	return 0;
}
