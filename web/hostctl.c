#include "web/hostctl.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/util.h"
#include "common/banned.h"

#define LINE_MAX_BYTES 65536
#define FDS_MAX 4

/* One line (and the descriptors passed with it) from S within TIMEOUT_MS:
 * what is there is peeked at, and only the line is taken from the
 * connection (what follows stays for the next read).  WATCH (-1: none)
 * closing its side ends the wait: -2. */
static int read_line(int s, json_t **out, int *fds, size_t nfds, int timeout_ms, int watch,
		     char *err, size_t errlen)
{
	char *line = malloc(LINE_MAX_BYTES + 1);
	size_t len = 0, ngot = 0;
	int got[FDS_MAX], rc = -1;
	int64_t deadline = mono_ms() + timeout_ms;

	*out = NULL;
	for (size_t i = 0; i < nfds; i++)
		fds[i] = -1;
	if (!line)
		abort();
	while (len < LINE_MAX_BYTES) {
		union {
			char c[CMSG_SPACE(FDS_MAX * sizeof(int))];
			struct cmsghdr align;
		} u;
		struct iovec iov = { line + len, LINE_MAX_BYTES - len };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.c,
				     .msg_controllen = sizeof(u.c) };
		struct pollfd p[2] = { { .fd = s, .events = POLLIN },
				       { .fd = watch, .events = POLLRDHUP } };
		int64_t left = deadline - mono_ms();
		if (left <= 0 || poll(p, watch >= 0 ? 2 : 1, (int)left) <= 0) {
			if (left > 0 && errno == EINTR)
				continue;
			snprintf(err, errlen, "berth-hostd did not answer on its webctl socket");
			goto out;
		}
		if (watch >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
			snprintf(err, errlen, "the client went");
			rc = -2;
			goto out;
		}
		if (!p[0].revents)
			continue;
		/* How much of what is there is this line's. */
		ssize_t n = recv(s, line + len, LINE_MAX_BYTES - len, MSG_PEEK);
		if (n <= 0) {
			snprintf(err, errlen, "berth-hostd closed its webctl socket without an "
				 "answer");
			goto out;
		}
		char *nl = memchr(line + len, '\n', (size_t)n);
		iov.iov_len = nl ? (size_t)(nl - (line + len)) + 1 : (size_t)n;
		n = recvmsg(s, &mh, MSG_CMSG_CLOEXEC);
		if (n <= 0) {
			snprintf(err, errlen, "berth-hostd closed its webctl socket without an "
				 "answer");
			goto out;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < k; i++) {
				int f;
				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (ngot < FDS_MAX)
					got[ngot++] = f;
				else
					close(f);
			}
		}
		len += (size_t)n;
		if (line[len - 1] == '\n') {
			len--;
			break;
		}
	}
	line[len] = '\0';
	*out = json_loads(line, 0, NULL);
	if (!*out || !json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		snprintf(err, errlen, "berth-hostd's webctl answer is not a JSON object");
		goto out;
	}
	for (size_t i = 0; i < nfds && i < ngot; i++) {
		fds[i] = got[i];
		got[i] = -1;
	}
	rc = 0;
out:
	for (size_t i = 0; i < ngot; i++)
		if (got[i] >= 0)
			close(got[i]);
	free(line);
	return rc;
}

/* LINE (JSON) on S, with FD (-1: none). */
static int send_line(int s, json_t *line, int fd, char *err, size_t errlen)
{
	char *text = json_dumps(line, JSON_COMPACT);
	struct iovec iov[2];
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
	union {
		char c[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	int rc = 0;

	if (!text) {
		snprintf(err, errlen, "a webctl request that is not JSON");
		return -1;
	}
	iov[0] = (struct iovec){ text, strlen(text) };
	iov[1] = (struct iovec){ (char *)"\n", 1 };
	if (fd >= 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.c;
		mh.msg_controllen = sizeof(u.c);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	/* A hostd that refuses at accept (webctl's connections all taken)
	 * writes why and closes: that line is read even when the request
	 * could not be sent. */
	if (sendmsg(s, &mh, MSG_NOSIGNAL) != (ssize_t)(iov[0].iov_len + 1) && errno != EPIPE &&
	    errno != ECONNRESET) {
		snprintf(err, errlen, "write to berth-hostd's webctl socket: %s", strerror(errno));
		rc = -1;
	}
	free(text);
	return rc;
}

int hostctl_open(const char *sock, json_t *req, int fd, json_t **answer, int *fds,
		 size_t nfds, int timeout_ms, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s;

	*answer = NULL;
	for (size_t i = 0; i < nfds; i++)
		fds[i] = -1;
	if (strlen(sock) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path too long: %s", sock);
		return -1;
	}
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		snprintf(err, errlen, "cannot reach berth-hostd at %s: %s", sock, strerror(errno));
		if (s >= 0)
			close(s);
		return -1;
	}
	if (send_line(s, req, fd, err, errlen) < 0 ||
	    read_line(s, answer, fds, nfds, timeout_ms, -1, err, errlen) < 0) {
		close(s);
		return -1;
	}
	return s;
}

int hostctl_open_held(const char *sock, json_t *req, json_t **answer, int *fds, size_t nfds,
		      int timeout_ms, int watch, char *err, size_t errlen)
{
	int s, rc;

	s = hostctl_open(sock, req, -1, answer, fds, nfds, timeout_ms, err, errlen);
	while (s >= 0 && json_is_true(json_object_get(*answer, "waiting"))) {
		/* (nothing is passed with a "waiting" line) */
		for (size_t i = 0; i < nfds; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		json_decref(*answer);
		rc = read_line(s, answer, fds, nfds, timeout_ms, watch, err, errlen);
		if (rc < 0) {
			close(s);
			return rc;
		}
	}
	return s;
}

int hostctl_say(int s, json_t *line, json_t **answer, int timeout_ms, char *err,
		size_t errlen)
{
	*answer = NULL;
	if (send_line(s, line, -1, err, errlen) < 0)
		return -1;
	return read_line(s, answer, NULL, 0, timeout_ms, -1, err, errlen);
}

int hostctl_error(json_t *answer, const char **code, const char **message)
{
	json_t *e = json_object_get(answer, "error");

	if (!json_is_object(e))
		return 0;
	*code = json_string_value(json_object_get(e, "code"));
	*message = json_string_value(json_object_get(e, "message"));
	if (!*code)
		*code = "internal";
	if (!*message)
		*message = "berth-hostd refused";
	json_int_t st = json_integer_value(json_object_get(e, "status"));
	return st >= 400 && st <= 599 ? (int)st : 500;
}
