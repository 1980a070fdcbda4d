#include "common/daemon.h"

#include <errno.h>
#include <grp.h>
#include <netdb.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "common/banned.h"

int daemon_listen(const char *spec)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE |
				  AI_NUMERICHOST | AI_NUMERICSERV }, *res = NULL;
	int fd, one = 1, rc;

	if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof(host)) {
		log_error("--listen %s: expected ADDR:PORT, e.g. 127.0.0.1:2222", spec);
		return -1;
	}
	snprintf(host, sizeof(host), "%.*s", (int)(colon - spec), spec);
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	rc = getaddrinfo(host, colon + 1, &hints, &res);
	if (rc != 0 || !res) {
		log_error("--listen %s: %s", spec, rc ? gai_strerror(rc) : "no address");
		return -1;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 512) < 0) {
		log_error("listen on %s: %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd;
}

int daemon_drop_to(const char *user, const char *what)
{
	struct passwd *pw = getpwnam(user);

	if (!pw) {
		log_error("user %s does not exist: create it (deploy/install-deps.sh does: "
			  "useradd --system %s) or pass --user", user, user);
		return -1;
	}
	if (pw->pw_uid == 0) {
		log_error("--user %s is root: the %s must not keep privilege", user, what);
		return -1;
	}
	if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0) {
		log_error("become %s: %s", user, strerror(errno));
		return -1;
	}
	if (setuid(0) == 0) {
		log_error("could regain root after dropping to %s", user);
		return -1;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {  /* no core with keys in it */
		log_error("prctl: %s", strerror(errno));
		return -1;
	}
	return 0;
}

int daemon_start(const char *spec, const char *pidfile, const char *user, const char *what)
{
	int fd = daemon_listen(spec);

	if (fd < 0)
		return -1;
	if (pidfile) {
		char pid[32];
		int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
		if (file_write_atomic(pidfile, pid, (size_t)n, 0644, NULL) < 0) {
			log_error("cannot write %s", pidfile);
			close(fd);
			return -1;
		}
	}
	if (geteuid() == 0 && daemon_drop_to(user, what) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int daemon_arg_int(const char *opt, const char *text, int lo, int hi, int *out)
{
	char *end;
	long v = strtol(text, &end, 10);

	if (!*text || *end || v < lo || v > hi) {
		log_error("%s %s: expected a number from %d to %d", opt, text, lo, hi);
		return -1;
	}
	*out = (int)v;
	return 0;
}

int daemon_arg_log_level(const char *text)
{
	if (log_level_parse(text, &log_threshold) < 0) {
		log_error("--log-level %s: use error, warn, info or debug", text);
		return -1;
	}
	return 0;
}
