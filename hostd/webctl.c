#include "hostd/webctl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "hostd/hostd.h"
#include "hostd/preview.h"
#include "hostd/secrets.h"
#include "common/banned.h"

/* A request line, its descriptors. */
#define LINE_MAX_BYTES 16384
#define FDS_MAX 2

/* One op: its name, whether it takes a descriptor with the request
 * (required then; an op that takes none gets none), and its handler,
 * which answers on CFD (webctl_send, webctl_send_err), may talk on, and
 * closes FD (-1 when none) when it is done with it. */
struct webctl_op {
	const char *name;
	bool takes_fd;
	void (*fn)(struct webctl *w, int cfd, json_t *req, int fd);
};

static const struct webctl_op ops[] = {
	{ "broker", true, secrets_broker_call },
	{ "preview", false, preview_op_connect },
	{ "preview_login", false, preview_op_login },
	{ "preview_watch", false, preview_op_watch },
};

struct webctl {
	struct hostd *h;
	int fd;
	int stop_pipe[2];
	pthread_t thread;
	char path[108];
	atomic_int inflight;      /* connections being served */
	atomic_bool stopping;
};

struct hostd *webctl_hostd(const struct webctl *w)
{
	return w->h;
}

bool webctl_stopping(const struct webctl *w)
{
	return atomic_load(&w->stopping);
}

int webctl_send(int fd, json_t *j, const int *fds, size_t nfds)
{
	char *s = json_dumps(j, JSON_COMPACT);
	struct iovec iov[2];
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
	union {
		char buf[CMSG_SPACE(FDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} u;
	int rc = 0;

	if (!s)
		return -1;
	iov[0] = (struct iovec){ s, strlen(s) };
	iov[1] = (struct iovec){ (char *)"\n", 1 };
	if (nfds > 0 && nfds <= FDS_MAX) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	if (sendmsg(fd, &mh, MSG_NOSIGNAL) != (ssize_t)(iov[0].iov_len + 1)) {
		log_warn("webctl: answer to berth-web: %s", strerror(errno));
		rc = -1;
	}
	free(s);
	return rc;
}

void webctl_send_err(int fd, const struct err *e)
{
	json_t *j = json_pack("{s:{s:i, s:s, s:s}}", "error", "status", e->status ? e->status : 500,
			      "code", e->code[0] ? e->code : "internal", "message", e->msg);

	if (j)
		webctl_send(fd, j, NULL, 0);
	json_decref(j);
}

int webctl_read(int fd, int timeout_ms, json_t **out)
{
	char line[LINE_MAX_BYTES + 1];
	size_t len = 0;
	int64_t deadline = mono_ms() + timeout_ms;

	*out = NULL;
	/* Up to the newline, nothing after it: what is there is peeked at
	 * first. */
	while (len < LINE_MAX_BYTES) {
		int64_t left = deadline - mono_ms();
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (left <= 0 || poll(&p, 1, left > 60000 ? 60000 : (int)left) < 0) {
			if (left > 0 && errno == EINTR)
				continue;
			return -1;
		}
		if (!p.revents)
			continue;
		ssize_t n = recv(fd, line + len, LINE_MAX_BYTES - len, MSG_PEEK);
		if (n <= 0)
			return 1;
		char *nl = memchr(line + len, '\n', (size_t)n);
		n = read(fd, line + len, nl ? (size_t)(nl - (line + len)) + 1 : (size_t)n);
		if (n <= 0)
			return 1;
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
		return 1;
	}
	return 0;
}

/* The request line and the descriptors passed with it (FDS[0..*NFDS), the
 * rest closed), within 10 s. */
static json_t *read_request(int fd, int *fds, size_t *nfds, struct err *e)
{
	char line[LINE_MAX_BYTES + 1];
	size_t len = 0;
	json_t *j;

	*nfds = 0;
	while (len < LINE_MAX_BYTES && !memchr(line, '\n', len)) {
		union {
			char c[CMSG_SPACE(4 * sizeof(int))];
			struct cmsghdr align;
		} u;
		struct iovec iov = { line + len, LINE_MAX_BYTES - len };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.c,
				     .msg_controllen = sizeof(u.c) };
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 10000) <= 0) {
			err_set(e, 408, "timeout", "no request line within 10 s");
			return NULL;
		}
		ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		if (n <= 0)
			return NULL;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < k; i++) {
				int f;
				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (*nfds < FDS_MAX)
					fds[(*nfds)++] = f;
				else
					close(f);
			}
		}
		len += (size_t)n;
	}
	line[len] = '\0';
	j = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);
	if (!j || !json_is_object(j)) {
		json_decref(j);
		err_set(e, 400, "invalid_json", "a request is one JSON object with \"op\"");
		return NULL;
	}
	return j;
}

struct job {
	struct webctl *w;
	int fd;
};

static void *serve(void *arg)
{
	struct job *jb = arg;
	struct err e = { 0 };
	int fds[FDS_MAX], fd = jb->fd;
	size_t nfds = 0, i;
	json_t *req = read_request(fd, fds, &nfds, &e);
	const char *op = json_string_value(json_object_get(req, "op"));
	const struct webctl_op *o = NULL;

	for (i = 0; op && i < sizeof(ops) / sizeof(ops[0]); i++)
		if (!strcmp(ops[i].name, op))
			o = &ops[i];
	if (!req) {
		if (!err_isset(&e))
			goto out;
	} else if (!o) {
		err_set(&e, 400, "invalid_op", "unknown op '%.40s'", op ? op : "(none)");
	} else if (o->takes_fd != (nfds == 1)) {
		err_set(&e, 400, "invalid_fds", "op %s takes %s", o->name,
			o->takes_fd ? "one descriptor" : "no descriptor");
	} else {
		o->fn(jb->w, fd, req, o->takes_fd ? fds[0] : -1);
		nfds = 0;
	}
out:
	if (err_isset(&e))
		webctl_send_err(fd, &e);
	for (i = 0; i < nfds; i++)
		close(fds[i]);
	json_decref(req);
	close(fd);
	atomic_fetch_sub(&jb->w->inflight, 1);
	free(jb);
	return NULL;
}

/* Whether the peer of FD may use the socket: root and web_user. */
static bool peer_allowed(const struct hostd *h, int fd)
{
	struct ucred cr;
	socklen_t crl = sizeof(cr);

	return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) == 0 &&
	       (cr.uid == 0 || (h->has_web && cr.uid == h->web_uid));
}

static void *accept_loop(void *arg)
{
	struct webctl *w = arg;
	pthread_attr_t attr;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	for (;;) {
		struct pollfd p[2] = { { .fd = w->fd, .events = POLLIN },
				       { .fd = w->stop_pipe[0], .events = POLLIN } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		int fd = accept4(w->fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE) {
				log_warn("webctl socket: accept: %s", strerror(errno));
				usleep(100 * 1000);
			}
			continue;
		}
		struct err e = { 0 };
		/* Refused before a thread is made: another user gets nothing of
		 * hostd's but this line. */
		if (!peer_allowed(w->h, fd))
			err_set(&e, 403, "forbidden", "only root and berth-web's user (web_user) "
				"may use the webctl socket");
		else if (atomic_load(&w->inflight) >= WEBCTL_MAX_CONNS)
			err_set(&e, 503, "too_many_connections", "%d webctl connections are open",
				WEBCTL_MAX_CONNS);
		if (err_isset(&e)) {
			int fl = fcntl(fd, F_GETFL);
			if (fl >= 0)
				fcntl(fd, F_SETFL, fl | O_NONBLOCK);
			webctl_send_err(fd, &e);
			close(fd);
			continue;
		}
		struct job *jb = malloc(sizeof(*jb));
		pthread_t t;
		if (!jb) {
			close(fd);
			continue;
		}
		jb->w = w;
		jb->fd = fd;
		atomic_fetch_add(&w->inflight, 1);
		if (pthread_create(&t, &attr, serve, jb) != 0) {
			atomic_fetch_sub(&w->inflight, 1);
			close(fd);
			free(jb);
		}
	}
	pthread_attr_destroy(&attr);
	return NULL;
}

struct webctl *webctl_start(struct hostd *h, const char *path, struct err *e)
{
	struct webctl *w = calloc(1, sizeof(*w));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (!w) {
		err_set(e, 500, "internal", "out of memory");
		return NULL;
	}
	w->h = h;
	w->fd = -1;
	w->stop_pipe[0] = w->stop_pipe[1] = -1;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		err_set(e, 500, "internal", "webctl socket path too long: %s", path);
		goto fail;
	}
	snprintf(w->path, sizeof(w->path), "%s", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	unlink(path);
	w->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (w->fd < 0 || bind(w->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    chmod(path, 0666) < 0 || listen(w->fd, 128) < 0 ||
	    pipe2(w->stop_pipe, O_CLOEXEC) < 0) {
		err_errno(e, errno, "listen on %s", path);
		goto fail;
	}
	if (pthread_create(&w->thread, NULL, accept_loop, w) != 0) {
		err_set(e, 500, "internal", "cannot start the webctl socket's thread");
		goto fail;
	}
	log_info("webctl socket %s, answered for %s%s and root", path, h->cfg.web_user,
		 h->has_web ? "" : " (no such user)");
	return w;
fail:
	if (w->fd >= 0) {
		close(w->fd);
		unlink(path);
	}
	if (w->stop_pipe[0] >= 0) {
		close(w->stop_pipe[0]);
		close(w->stop_pipe[1]);
	}
	free(w);
	return NULL;
}

void webctl_stop(struct webctl *w)
{
	if (!w)
		return;
	atomic_store(&w->stopping, true);
	if (write(w->stop_pipe[1], "x", 1) < 0)
		log_warn("webctl: cannot stop the accept thread: %s", strerror(errno));
	pthread_join(w->thread, NULL);
	close(w->fd);
	unlink(w->path);
	close(w->stop_pipe[0]);
	close(w->stop_pipe[1]);
	/* Ops that wait (a broker call's end) see webctl_stopping within a
	 * second and end; one that does not is left W (the process ends). */
	for (int i = 0; i < 100 && atomic_load(&w->inflight) > 0; i++)
		usleep(50 * 1000);
	if (atomic_load(&w->inflight) > 0) {
		log_warn("webctl: %d connections still served at stop", atomic_load(&w->inflight));
		return;
	}
	free(w);
}
