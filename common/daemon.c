#include "common/daemon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
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

int daemon_parse_listen(const char *spec, struct sockaddr_storage *ss, socklen_t *sslen)
{
	char host[80], port[8];
	const char *colon = strrchr(spec, ':');
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE };
	struct addrinfo *res = NULL;
	size_t hl;
	char *end;
	long p;

	if (!colon || colon == spec || strlen(colon + 1) >= sizeof(port))
		return -1;
	hl = (size_t)(colon - spec);
	if (spec[0] == '[') {
		if (hl < 3 || spec[hl - 1] != ']')
			return -1;
		snprintf(host, sizeof(host), "%.*s", (int)(hl - 2), spec + 1);
	} else {
		if (hl >= sizeof(host) || memchr(spec, ':', hl))
			return -1;
		snprintf(host, sizeof(host), "%.*s", (int)hl, spec);
	}
	snprintf(port, sizeof(port), "%s", colon + 1);
	errno = 0;
	p = strtol(port, &end, 10);
	if (errno || *end || end == port || p < 1 || p > 65535)
		return -1;
	if (getaddrinfo(host, port, &hints, &res) != 0 || !res)
		return -1;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*sslen = (socklen_t)res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

bool daemon_addr_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
	if (ss->ss_family == AF_INET6)
		return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ss)->sin6_addr);
	return false;
}

int daemon_listen(const char *spec)
{
	struct sockaddr_storage ss;
	socklen_t sslen;
	int fd, one = 1;

	if (daemon_parse_listen(spec, &ss, &sslen) < 0) {
		log_error("--listen %s: expected ADDR:PORT with a numeric address and a port "
			  "from 1 to 65535, e.g. 127.0.0.1:2222 or [::1]:2222", spec);
		return -1;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&ss, sslen) < 0 || listen(fd, 512) < 0) {
		log_error("listen on %s: %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
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

void daemon_beside_exe(const char *rel, const char *installed, char *out, size_t outlen)
{
	static const char *const up[] = { "..", "../../..", NULL };
	char dir[PATH_MAX];

	out[0] = '\0';
	if (exe_dir(dir, sizeof(dir)) < 0)
		return;
	for (int i = 0; up[i]; i++) {
		xsnprintf(out, outlen, "%s/%s/%s", dir, up[i], rel);
		if (access(out, F_OK) == 0)
			return;
	}
	xsnprintf(out, outlen, "%s/../%s", dir, installed);
	if (access(out, F_OK) == 0)
		return;
	xsnprintf(out, outlen, "%s/../%s", dir, rel);
}
