#include "desktop/hostfd.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/banned.h"

/* hostd may wake a machine before it answers an attach. */
#define ANSWER_TIMEOUT_MS (5 * 60 * 1000)

#define FDS_MAX 4

int hostfd_call(const char *sock, json_t *req, json_t **resp, int *fds, size_t nfds,
		char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char buf[8192];
	size_t len = 0;
	int s = -1, got[FDS_MAX], rc = -1;
	size_t ngot = 0;
	char *line = NULL;

	*resp = NULL;
	for (size_t i = 0; i < nfds; i++)
		fds[i] = -1;
	if (strlen(sock) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path too long: %s", sock);
		return -1;
	}
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	line = json_dumps(req, JSON_COMPACT);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (!line || s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		snprintf(err, errlen, "cannot reach hostd at %s: %s", sock, strerror(errno));
		goto out;
	}
	size_t n = strlen(line);
	if (send(s, line, n, MSG_NOSIGNAL) != (ssize_t)n || send(s, "\n", 1, MSG_NOSIGNAL) != 1) {
		snprintf(err, errlen, "write to hostd: %s", strerror(errno));
		goto out;
	}
	while (len < sizeof(buf) - 1 && !memchr(buf, '\n', len)) {
		union {
			char c[CMSG_SPACE(FDS_MAX * sizeof(int))];
			struct cmsghdr align;
		} u;
		struct iovec iov = { buf + len, sizeof(buf) - 1 - len };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.c,
				     .msg_controllen = sizeof(u.c) };
		struct pollfd p = { .fd = s, .events = POLLIN };
		if (poll(&p, 1, ANSWER_TIMEOUT_MS) <= 0) {
			snprintf(err, errlen, "hostd did not answer");
			goto out;
		}
		ssize_t r = recvmsg(s, &mh, MSG_CMSG_CLOEXEC);
		if (r <= 0) {
			snprintf(err, errlen, "hostd closed the desktop socket without an answer");
			goto out;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
			    c->cmsg_len < CMSG_LEN(0))
				continue;
			size_t nf = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < nf; i++) {
				int f;
				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (ngot < FDS_MAX)
					got[ngot++] = f;
				else
					close(f);
			}
		}
		len += (size_t)r;
	}
	buf[len] = '\0';
	*resp = json_loads(buf, JSON_DISABLE_EOF_CHECK, NULL);
	if (!*resp) {
		snprintf(err, errlen, "hostd's answer is not JSON");
		goto out;
	}
	rc = 0;
	for (size_t i = 0; i < nfds && i < ngot; i++) {
		fds[i] = got[i];
		got[i] = -1;
	}
out:
	for (size_t i = 0; i < ngot; i++)
		if (got[i] >= 0)
			close(got[i]);
	if (s >= 0)
		close(s);
	free(line);
	return rc;
}

const char *hostfd_error(json_t *resp, const char **code)
{
	json_t *e = json_object_get(resp, "error");
	const char *m = json_string_value(json_object_get(e, "message"));

	if (code)
		*code = json_string_value(json_object_get(e, "code"));
	return e ? (m ? m : "error") : "";
}
