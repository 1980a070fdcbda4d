/*
 * sshexec: run one command in a VM over SSH (libssh) -- see sshexec.h.
 *
 * Shape of a run: our own nonblocking TCP connect (so a refusal or a timeout
 * is reported as such), the socket handed to libssh, handshake and public-key
 * authentication under one deadline, then one "exec" channel driven by a
 * libssh event loop:
 *  - the session socket is in the event; channel callbacks receive stdout and
 *    stderr data as libssh decodes each packet and write it straight to
 *    fd_out/fd_err, so nothing accumulates in libssh's channel buffers and
 *    libssh re-opens our receive window as the data is consumed;
 *  - fd_in is in the event only while the remote window is open, and one
 *    read takes at most what the window allows, so ssh_channel_write() never
 *    waits for the window and stdin is never read ahead of the remote;
 *  - the loop ends when the server closes the channel.  Servers send the
 *    data, EOF, exit-status (or exit-signal) and then CLOSE, so by then all
 *    output has been written and the status is known.
 * The session stays in libssh's blocking mode: ssh_channel_write() returns
 * once its packets are on the wire (processing incoming packets meanwhile),
 * and after the channel is started the session timeout is lifted so that a
 * slow stream is never cut short.
 */
#include "common/sshexec.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libssh/callbacks.h>
#include <libssh/libssh.h>

#include "common/banned.h"

#define SSHEXEC_DEFAULT_TIMEOUT_MS 10000
#define SSHEXEC_BUF_SIZE (64 * 1024)

/* ---- small helpers ---------------------------------------------------- */

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long long sshexec_now_ms(void)
{
	return now_ms();
}

/* Error message "HOST:PORT: <fmt...>" into err; a message that does not fit
 * is cut short, which is all a caller can do with it anyway. */
static void set_err(char *err, size_t errlen, const char *host, int port,
		    const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static void set_err(char *err, size_t errlen, const char *host, int port,
		    const char *fmt, ...)
{
	va_list ap;
	int n;

	if (err == NULL || errlen == 0)
		return;
	n = snprintf(err, errlen, "%s:%d: ", host ? host : "?", port);
	if (n < 0) {
		err[0] = '\0';
		return;
	}
	if ((size_t)n >= errlen)
		return;
	va_start(ap, fmt);
	if (vsnprintf(err + n, errlen - (size_t)n, fmt, ap) < 0)
		err[n] = '\0';
	va_end(ap);
}

/* The cause of a failed connect, worded like the rest of our messages. */
static const char *connect_error_text(int e)
{
	switch (e) {
	case ECONNREFUSED:
		return "connection refused";
	case ETIMEDOUT:
		return "connection timed out";
	case EHOSTUNREACH:
		return "host unreachable";
	case ENETUNREACH:
		return "network unreachable";
	default:
		return strerror(e);
	}
}

/* Write all of buf to fd, across EINTR, short writes and (for a nonblocking
 * fd) EAGAIN.  fd -1 discards.  Returns 0, or -1 with errno set. */
static int write_all(int fd, const char *buf, size_t len)
{
	struct pollfd pfd;
	ssize_t n;

	if (fd < 0)
		return 0;
	while (len > 0) {
		n = write(fd, buf, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				return -1;
			pfd.fd = fd;
			pfd.events = POLLOUT;
			if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
				return -1;
			continue;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Connect a nonblocking socket, waiting until deadline (now_ms() time).
 * Returns 0 or the errno that explains the failure (ETIMEDOUT when the
 * deadline passed). */
static int connect_wait(int fd, const struct sockaddr *sa, socklen_t salen,
			long long deadline)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	socklen_t elen = sizeof(int);
	long long left;
	int e = 0;
	int rc;

	if (connect(fd, sa, salen) == 0)
		return 0;
	/* After EINTR the connect goes on in the background, as after
	 * EINPROGRESS: wait for it the same way. */
	if (errno != EINPROGRESS && errno != EINTR)
		return errno;
	for (;;) {
		left = deadline - now_ms();
		if (left <= 0)
			return ETIMEDOUT;
		rc = poll(&pfd, 1, left > INT32_MAX ? INT32_MAX : (int)left);
		if (rc > 0)
			break;
		if (rc < 0 && errno != EINTR)
			return errno;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) < 0)
		return errno;
	return e;
}

/* Open a nonblocking, close-on-exec TCP connection to host:port before
 * deadline.  Returns the fd, or -1 with the cause written into why. */
static int tcp_connect(const char *host, int port, long long deadline,
		       char *why, size_t whylen)
{
	struct addrinfo hints, *res = NULL, *ai;
	char portstr[16];
	int fd = -1;
	int e = ETIMEDOUT;
	int rc;

	if (port <= 0 || port > 65535) {
		snprintf(why, whylen, "invalid port");
		return -1;
	}
	snprintf(portstr, sizeof(portstr), "%d", port);
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	rc = getaddrinfo(host, portstr, &hints, &res);
	if (rc != 0) {
		snprintf(why, whylen, "cannot resolve host: %s",
			 gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family,
			    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			    ai->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		e = connect_wait(fd, ai->ai_addr, ai->ai_addrlen, deadline);
		if (e == 0)
			break;
		close(fd);
		fd = -1;
		if (e == ETIMEDOUT)
			break;	/* the time is used up for every address */
	}
	freeaddrinfo(res);
	if (fd < 0)
		snprintf(why, whylen, "%s", connect_error_text(e));
	else	/* A keystroke goes at once, not after the ACK of a window
		 * adjust (the guest delays its ACKs: 40 ms a keystroke). */
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
	return fd;
}

/* ---- signal names ----------------------------------------------------- */

/* Names as they travel in an SSH "exit-signal" request (RFC 4254 6.10,
 * without "SIG").  The numbers are this host's; the VMs run Linux, as the
 * host does, so they match the guest's. */
static const struct sshexec_signal {
	const char *name;
	int num;
} sshexec_signals[] = {
	{ "ABRT", SIGABRT },	{ "ALRM", SIGALRM },	{ "BUS", SIGBUS },
	{ "CHLD", SIGCHLD },	{ "CONT", SIGCONT },	{ "FPE", SIGFPE },
	{ "HUP", SIGHUP },	{ "ILL", SIGILL },	{ "INT", SIGINT },
	{ "IO", SIGIO },	{ "KILL", SIGKILL },	{ "PIPE", SIGPIPE },
	{ "PROF", SIGPROF },	{ "PWR", SIGPWR },	{ "QUIT", SIGQUIT },
	{ "SEGV", SIGSEGV },	{ "STOP", SIGSTOP },	{ "SYS", SIGSYS },
	{ "TERM", SIGTERM },	{ "TRAP", SIGTRAP },	{ "TSTP", SIGTSTP },
	{ "TTIN", SIGTTIN },	{ "TTOU", SIGTTOU },	{ "URG", SIGURG },
	{ "USR1", SIGUSR1 },	{ "USR2", SIGUSR2 },	{ "VTALRM", SIGVTALRM },
	{ "WINCH", SIGWINCH },	{ "XCPU", SIGXCPU },	{ "XFSZ", SIGXFSZ },
};

#define NSIGNALS (sizeof(sshexec_signals) / sizeof(sshexec_signals[0]))

int sshexec_signal_number(const char *name)
{
	size_t i;

	if (name == NULL)
		return 0;
	if (strncmp(name, "SIG", 3) == 0)
		name += 3;
	for (i = 0; i < NSIGNALS; i++) {
		if (strcmp(name, sshexec_signals[i].name) == 0)
			return sshexec_signals[i].num;
	}
	return 0;
}

const char *sshexec_signal_name(int num)
{
	size_t i;

	for (i = 0; i < NSIGNALS; i++) {
		if (sshexec_signals[i].num == num)
			return sshexec_signals[i].name;
	}
	return NULL;
}

/* The shell-style status of death by the named signal: 128+N, or 255 for a
 * name we do not know. */
static int signal_status(const char *name)
{
	int n = sshexec_signal_number(name);

	return n ? 128 + n : 255;
}

/* ---- quoting ---------------------------------------------------------- */

char *sshexec_quote(char *const argv[])
{
	const char *p;
	size_t len = 1;	/* the NUL */
	size_t i;
	char *out, *o;

	for (i = 0; argv != NULL && argv[i] != NULL; i++) {
		len += 3;	/* two quotes and a separating space */
		for (p = argv[i]; *p != '\0'; p++)
			len += *p == '\'' ? 4 : 1;
	}
	out = malloc(len);
	if (out == NULL)
		return NULL;
	o = out;
	for (i = 0; argv != NULL && argv[i] != NULL; i++) {
		if (i > 0)
			*o++ = ' ';
		*o++ = '\'';
		for (p = argv[i]; *p != '\0'; p++) {
			if (*p == '\'') {
				/* close the quote, an escaped quote, reopen */
				memcpy(o, "'\\''", 4);
				o += 4;
			} else {
				*o++ = *p;
			}
		}
		*o++ = '\'';
	}
	*o = '\0';
	return out;
}

/* ---- running a command ------------------------------------------------ */

/* State of one run, shared with the libssh callbacks. */
struct sshexec_run {
	ssh_channel channel;
	int fd_in;
	int fd_out;
	int fd_err;
	int fd_ctl;		/* signals to send (sshexec_run_io), or -1 */
	bool in_open;		/* still copying fd_in to the channel */
	bool in_polled;		/* fd_in is in the event */
	bool ctl_polled;	/* fd_ctl is in the event */
	bool ended;		/* SSHEXEC_CTL_END arrived, or fd_ctl's writer went */
	long long started;	/* now_ms() when the server took the command */
	unsigned char held[16];	/* signals held until SSHEXEC_SIGNAL_HOLD_MS after it */
	int nheld;
	unsigned char ctl[64];	/* what fd_ctl gave that is not a whole message yet */
	size_t nctl;
	bool pty;		/* the command runs on a terminal */
	bool closed;		/* the server closed the channel */
	bool have_status;
	int status;		/* exit status, or 128+N after signal N */
	char signal[16];	/* the signal's name after death by one */
	int write_errno;	/* first failed write to fd_out/fd_err */
	const char *write_what;	/* "stdout" or "stderr" */
	int read_errno;		/* failed read of fd_in */
	char *buf;		/* SSHEXEC_BUF_SIZE bytes for stdin */
};

static int on_data(ssh_session session, ssh_channel channel, void *data,
		   uint32_t len, int is_stderr, void *userdata)
{
	struct sshexec_run *r = userdata;

	(void)session;
	(void)channel;
	if (r->write_errno == 0 &&
	    write_all(is_stderr ? r->fd_err : r->fd_out, data, len) < 0) {
		r->write_errno = errno;
		r->write_what = is_stderr ? "stderr" : "stdout";
	}
	/* Consumed either way: after a failed write the rest is dropped and
	 * the loop in sshexec_run stops. */
	return (int)len;
}

static void on_close(ssh_session session, ssh_channel channel, void *userdata)
{
	struct sshexec_run *r = userdata;

	(void)session;
	(void)channel;
	r->closed = true;
}

static void on_exit_status(ssh_session session, ssh_channel channel,
			   int exit_status, void *userdata)
{
	struct sshexec_run *r = userdata;

	(void)session;
	(void)channel;
	r->status = exit_status;
	r->have_status = true;
}

static void on_exit_signal(ssh_session session, ssh_channel channel,
			   const char *signal, int core, const char *errmsg,
			   const char *lang, void *userdata)
{
	struct sshexec_run *r = userdata;

	(void)session;
	(void)channel;
	(void)core;
	(void)errmsg;
	(void)lang;
	r->status = signal_status(signal);
	r->have_status = true;
	if (signal != NULL)
		snprintf(r->signal, sizeof(r->signal), "%s",
			 strncmp(signal, "SIG", 3) == 0 ? signal + 3 : signal);
}

/* A signal sent the moment the server took the command reaches the
 * process the server forked before that process started the command (the
 * server's own handlers then catch it, and it is lost): signals are held
 * until this long after the command was taken. */
#define SSHEXEC_SIGNAL_HOLD_MS 500

static void send_signals(struct sshexec_run *r)
{
	const char *name;

	for (int i = 0; i < r->nheld; i++) {
		name = sshexec_signal_name(r->held[i]);
		if (name != NULL)
			ssh_channel_request_send_signal(r->channel, name);
	}
	r->nheld = 0;
}

/* fd_ctl is readable: each byte a signal to send, SSHEXEC_CTL_END (or the
 * writer gone) the end of the run. */
static int on_ctl(socket_t fd, int revents, void *userdata)
{
	struct sshexec_run *r = userdata;
	ssize_t n;
	size_t i = 0;

	(void)revents;
	n = read(fd, r->ctl + r->nctl, sizeof(r->ctl) - r->nctl);
	if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (n <= 0) {
		r->ended = true;
		return 0;
	}
	r->nctl += (size_t)n;
	while (i < r->nctl) {
		unsigned char b = r->ctl[i];
		if (b == SSHEXEC_CTL_END) {
			send_signals(r);
			r->ended = true;
			return 0;
		}
		if (b == SSHEXEC_CTL_RESIZE) {
			if (r->nctl - i < 5)
				break;	/* the rest of it comes with the next read */
			int cols = r->ctl[i + 1] << 8 | r->ctl[i + 2];
			int rows = r->ctl[i + 3] << 8 | r->ctl[i + 4];
			if (r->pty)
				ssh_channel_change_pty_size(r->channel, cols, rows);
			i += 5;
			continue;
		}
		if (r->nheld < (int)sizeof(r->held))
			r->held[r->nheld++] = b;
		i++;
	}
	memmove(r->ctl, r->ctl + i, r->nctl - i);
	r->nctl -= i;
	if (now_ms() - r->started >= SSHEXEC_SIGNAL_HOLD_MS)
		send_signals(r);
	return 0;
}

/* fd_in is readable (or at EOF, or failed): move at most one window's worth
 * to the channel.  Always returns 0 (the handle stays; the main loop removes
 * it when stdin is done or the window is shut). */
static int on_stdin(socket_t fd, int revents, void *userdata)
{
	struct sshexec_run *r = userdata;
	uint32_t win;
	size_t want;
	ssize_t n;

	(void)revents;
	if (!r->in_open)
		return 0;
	win = ssh_channel_window_size(r->channel);
	want = win < SSHEXEC_BUF_SIZE ? win : SSHEXEC_BUF_SIZE;
	if (want == 0)
		return 0;
	n = read(fd, r->buf, want);
	if (n < 0) {
		if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		r->read_errno = errno;
		r->in_open = false;
		return 0;
	}
	if (n == 0) {
		r->in_open = false;
		ssh_channel_send_eof(r->channel);
		return 0;
	}
	if (ssh_channel_write(r->channel, r->buf, (uint32_t)n) != n) {
		/* The channel was closed or the session failed; the main loop
		 * finds out which.  Nothing more goes in either way. */
		r->in_open = false;
		ssh_channel_send_eof(r->channel);
	}
	return 0;
}

/* Session timeout for libssh's blocking calls: ms > 0, or 0 for none. */
static void set_timeout(ssh_session session, long long ms)
{
	long sec = 0;
	long usec = 0;

	if (ms > 0) {
		sec = (long)(ms / 1000);
		usec = (long)(ms % 1000) * 1000;
	}
	ssh_options_set(session, SSH_OPTIONS_TIMEOUT, &sec);
	ssh_options_set(session, SSH_OPTIONS_TIMEOUT_USEC, &usec);
}

/* Milliseconds left before deadline, or 0 when it has passed. */
static long long time_left(long long deadline)
{
	long long left = deadline - now_ms();

	return left > 0 ? left : 0;
}

/* The event loop of a started command: returns when the channel is closed,
 * a local read or write failed, or the connection is gone.  Returns 0, or
 * -1 when the event itself could not be set up (message in err). */
static int pump(ssh_session session, struct sshexec_run *r,
		const struct sshexec_target *t, char *err, size_t errlen)
{
	ssh_event ev = NULL;
	bool in_event = false;
	bool want_in;
	int ret = -1;

	ev = ssh_event_new();
	if (ev == NULL || ssh_event_add_session(ev, session) != SSH_OK) {
		set_err(err, errlen, t->host, t->port,
			"cannot set up the event loop");
		goto out;
	}
	in_event = true;
	if (r->fd_ctl >= 0) {
		if (ssh_event_add_fd(ev, r->fd_ctl, POLLIN, on_ctl, r) != SSH_OK) {
			set_err(err, errlen, t->host, t->port, "cannot poll the control pipe");
			goto out;
		}
		r->ctl_polled = true;
	}
	while (!r->closed && !r->ended && r->write_errno == 0 && r->read_errno == 0) {
		want_in = r->in_open && ssh_channel_window_size(r->channel) > 0;
		if (want_in && !r->in_polled) {
			if (ssh_event_add_fd(ev, r->fd_in, POLLIN, on_stdin,
					     r) != SSH_OK) {
				set_err(err, errlen, t->host, t->port,
					"cannot poll stdin");
				goto out;
			}
			r->in_polled = true;
		} else if (!want_in && r->in_polled) {
			ssh_event_remove_fd(ev, r->fd_in);
			r->in_polled = false;
		}
		/* Waits for the socket (and stdin); runs the callbacks.
		 * libssh retries poll() on EINTR itself. */
		int wait = -1;
		if (r->nheld) {
			long long left = r->started + SSHEXEC_SIGNAL_HOLD_MS - now_ms();
			wait = left > 0 ? (int)left : 0;
		}
		if (ssh_event_dopoll(ev, wait) == SSH_ERROR)
			break;
		if (r->nheld && now_ms() - r->started >= SSHEXEC_SIGNAL_HOLD_MS)
			send_signals(r);
		if (!ssh_is_connected(session) ||
		    (ssh_get_status(session) & (SSH_CLOSED | SSH_CLOSED_ERROR)))
			break;
	}
	ret = 0;
out:
	if (ev != NULL) {
		if (r->in_polled)
			ssh_event_remove_fd(ev, r->fd_in);
		r->in_polled = false;
		if (r->ctl_polled)
			ssh_event_remove_fd(ev, r->fd_ctl);
		r->ctl_polled = false;
		if (in_event)
			ssh_event_remove_session(ev, session);
		ssh_event_free(ev);
	}
	return ret;
}

/* The key type of the public key line LINE ("ssh-ed25519 AAAA...") into
 * OUT; false when it has none. */
static bool key_type_of(const char *line, char *out, size_t outlen)
{
	size_t n = strcspn(line, " \t");

	if (n == 0 || n >= outlen || line[n] == '\0')
		return false;
	memcpy(out, line, n);
	out[n] = '\0';
	return true;
}

/* LINE ("TYPE BASE64 [COMMENT]") as a libssh key, or NULL. */
static ssh_key key_of_line(const char *line)
{
	char type[64], b64[4096];
	ssh_key key = NULL;
	size_t n;
	const char *p;

	if (!line || !key_type_of(line, type, sizeof(type)))
		return NULL;
	p = line + strlen(type);
	p += strspn(p, " \t");
	n = strcspn(p, " \t\r\n");
	if (n == 0 || n >= sizeof(b64))
		return NULL;
	memcpy(b64, p, n);
	b64[n] = '\0';
	if (ssh_pki_import_pubkey_base64(b64, ssh_key_type_from_name(type), &key) != SSH_OK)
		return NULL;
	return key;
}

bool sshexec_key_equal(const char *a, const char *b)
{
	ssh_key ka = key_of_line(a), kb = key_of_line(b);
	bool eq = ka && kb && ssh_key_cmp(ka, kb, SSH_KEY_CMP_PUBLIC) == 0;

	ssh_key_free(ka);
	ssh_key_free(kb);
	return eq;
}

/* KEY's SHA256 fingerprint as ssh-keygen -l prints it, into OUT. */
static void fingerprint(ssh_key key, char *out, size_t outlen)
{
	unsigned char *hash = NULL;
	size_t hlen = 0;
	char *fp;

	snprintf(out, outlen, "?");
	if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hlen) != 0)
		return;
	fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hlen);
	if (fp)
		snprintf(out, outlen, "%s", fp);
	ssh_string_free_char(fp);
	ssh_clean_pubkey_hash(&hash);
}

/* TCP connect to HOST:PORT and the SSH key exchange, before DEADLINE,
 * offering only host keys of type PREFER when it is not NULL: a session
 * that has not authenticated, or NULL with ERR set. */
static ssh_session handshake(const char *host, int port, const char *prefer,
			     long long deadline, char *err, size_t errlen)
{
	ssh_session session = NULL;
	long long left;
	char why[160];
	int fd = -1;
	int rc;
	bool no = false;

	fd = tcp_connect(host, port, deadline, why, sizeof(why));
	if (fd < 0) {
		set_err(err, errlen, host, port, "%s", why);
		goto fail;
	}

	session = ssh_new();
	if (session == NULL) {
		set_err(err, errlen, host, port, "out of memory");
		goto fail;
	}
	/* Only the key we were given counts: no ssh_config, and an ssh
	 * directory and known_hosts files that hold nothing, so libssh never
	 * reads the invoking user's ~/.ssh (and ssh_options_apply() in
	 * ssh_connect() has no path of ours to expand, so it cannot fail
	 * before it takes the socket, see below). */
	if (ssh_options_set(session, SSH_OPTIONS_HOST, host) < 0 ||
	    ssh_options_set(session, SSH_OPTIONS_PORT, &port) < 0 ||
	    ssh_options_set(session, SSH_OPTIONS_PROCESS_CONFIG, &no) < 0 ||
	    ssh_options_set(session, SSH_OPTIONS_SSH_DIR, "/dev/null") < 0 ||
	    ssh_options_set(session, SSH_OPTIONS_KNOWNHOSTS, "/dev/null") < 0 ||
	    ssh_options_set(session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS,
			    "/dev/null") < 0 ||
	    (prefer && ssh_options_set(session, SSH_OPTIONS_HOSTKEYS, prefer) < 0) ||
	    ssh_options_set(session, SSH_OPTIONS_FD, &fd) < 0) {
		set_err(err, errlen, host, port,
			"cannot set SSH options: %s", ssh_get_error(session));
		goto fail;
	}

	left = time_left(deadline);
	if (left == 0) {
		set_err(err, errlen, host, port, "SSH handshake timed out");
		goto fail;
	}
	set_timeout(session, left);
	rc = ssh_connect(session);
	/* From here libssh owns the socket: it closes it itself when the
	 * handshake fails and in ssh_free(), while ssh_disconnect() leaves a
	 * socket given with SSH_OPTIONS_FD open (libssh 0.10).
	 * sshexec_disconnect() closes what libssh still holds. */
	fd = -1;
	if (rc != SSH_OK) {
		if (time_left(deadline) == 0)
			set_err(err, errlen, host, port, "SSH handshake timed out");
		else
			set_err(err, errlen, host, port, "SSH handshake failed: %s",
				ssh_get_error(session));
		goto fail;
	}
	return session;
fail:
	sshexec_disconnect(session);
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* Whether SESSION's server presented the host key PINNED; ERR says what it
 * presented instead. */
static bool host_key_ok(ssh_session session, const char *pinned, const char *host, int port,
			char *err, size_t errlen)
{
	ssh_key got = NULL, want = key_of_line(pinned);
	char fgot[128], fwant[128];
	bool ok = false;

	if (!want) {
		set_err(err, errlen, host, port, "the pinned host key does not parse");
		return false;
	}
	if (ssh_get_server_publickey(session, &got) != SSH_OK) {
		set_err(err, errlen, host, port, "the server presented no host key");
		goto out;
	}
	ok = ssh_key_cmp(got, want, SSH_KEY_CMP_PUBLIC) == 0;
	if (!ok) {
		fingerprint(got, fgot, sizeof(fgot));
		fingerprint(want, fwant, sizeof(fwant));
		set_err(err, errlen, host, port, "host key mismatch: the machine presented %s "
			"%s, berth pinned %s %s", ssh_key_type_to_char(ssh_key_type(got)), fgot,
			ssh_key_type_to_char(ssh_key_type(want)), fwant);
	}
out:
	ssh_key_free(got);
	ssh_key_free(want);
	return ok;
}

ssh_session sshexec_connect(const struct sshexec_target *t, long long deadline,
			   char *err, size_t errlen)
{
	ssh_session session = NULL;
	ssh_key key = NULL;
	long long left;
	char type[64];
	bool pinned = t && t->host_key && t->host_key[0];
	int rc;

	if (t == NULL || t->host == NULL || t->user == NULL || t->key_b64 == NULL ||
	    (pinned && !key_type_of(t->host_key, type, sizeof(type)))) {
		set_err(err, errlen, t ? t->host : NULL, t ? t->port : 0,
			"invalid arguments");
		return NULL;
	}
	if (ssh_pki_import_privkey_base64(t->key_b64, NULL, NULL, NULL,
					  &key) != SSH_OK) {
		set_err(err, errlen, t->host, t->port,
			"cannot read the private key");
		return NULL;
	}
	/* Only the pinned key's type is offered, so the server shows that
	 * key (an RSA key signs with SHA-2 these days). */
	session = handshake(t->host, t->port,
			    !pinned ? NULL : strcmp(type, "ssh-rsa") == 0
				    ? "rsa-sha2-512,rsa-sha2-256,ssh-rsa" : type,
			    deadline, err, errlen);
	if (!session)
		goto fail;
	/* The machine must be the one hostd made: its pinned host key,
	 * checked before anything of the user's (the key, a forwarded
	 * agent) goes to it. */
	if (pinned && !host_key_ok(session, t->host_key, t->host, t->port, err, errlen))
		goto fail;
	if (ssh_options_set(session, SSH_OPTIONS_USER, t->user) < 0) {
		set_err(err, errlen, t->host, t->port, "cannot set the SSH user: %s",
			ssh_get_error(session));
		goto fail;
	}

	left = time_left(deadline);
	if (left == 0) {
		set_err(err, errlen, t->host, t->port,
			"authentication timed out");
		goto fail;
	}
	set_timeout(session, left);
	rc = ssh_userauth_publickey(session, NULL, key);
	if (rc != SSH_AUTH_SUCCESS) {
		if (rc == SSH_AUTH_DENIED || rc == SSH_AUTH_PARTIAL)
			set_err(err, errlen, t->host, t->port,
				"authentication failed");
		else if (rc == SSH_AUTH_AGAIN || time_left(deadline) == 0)
			set_err(err, errlen, t->host, t->port,
				"authentication timed out");
		else
			set_err(err, errlen, t->host, t->port,
				"authentication failed: %s",
				ssh_get_error(session));
		goto fail;
	}
	ssh_key_free(key);
	set_timeout(session, time_left(deadline) ? time_left(deadline) : 1);
	return session;
fail:
	sshexec_disconnect(session);
	ssh_key_free(key);
	return NULL;
}

int sshexec_host_key(const char *host, int port, const char *prefer, int timeout_ms,
		     char *out, size_t outlen, char *err, size_t errlen)
{
	ssh_session session;
	ssh_key key = NULL;
	char *b64 = NULL;
	int rc = -1;

	session = handshake(host, port, prefer,
			    now_ms() + (timeout_ms > 0 ? timeout_ms : SSHEXEC_DEFAULT_TIMEOUT_MS),
			    err, errlen);
	if (!session)
		return -1;
	if (ssh_get_server_publickey(session, &key) != SSH_OK ||
	    ssh_pki_export_pubkey_base64(key, &b64) != SSH_OK) {
		set_err(err, errlen, host, port, "the server presented no host key");
		goto out;
	}
	if ((size_t)snprintf(out, outlen, "%s %s", ssh_key_type_to_char(ssh_key_type(key)), b64) >=
	    outlen) {
		set_err(err, errlen, host, port, "the server's host key is too long");
		goto out;
	}
	rc = 0;
out:
	ssh_string_free_char(b64);
	ssh_key_free(key);
	sshexec_disconnect(session);
	return rc;
}

bool sshexec_session_quiet(ssh_session session)
{
	struct pollfd p = { .fd = ssh_get_fd(session), .events = POLLIN };

	return p.fd >= 0 && ssh_is_connected(session) && poll(&p, 1, 0) == 0;
}

void sshexec_disconnect(ssh_session session)
{
	int sock;

	if (session == NULL)
		return;
	sock = ssh_get_fd(session);	/* -1 if libssh closed it */
	ssh_disconnect(session);
	ssh_free(session);
	if (sock >= 0)
		close(sock);
}

int sshexec_run(const struct sshexec_target *t, const char *cmd,
		int fd_in, int fd_out, int fd_err, int *status,
		char *err, size_t errlen)
{
	struct sshexec_io io = { .in = fd_in, .out = fd_out, .err = fd_err, .ctl = -1 };

	if (status == NULL) {
		set_err(err, errlen, t ? t->host : NULL, t ? t->port : 0, "invalid arguments");
		return -1;
	}
	if (sshexec_run_io(t, cmd, &io, err, errlen) < 0)
		return -1;
	*status = io.status;
	return 0;
}

int sshexec_run_io(const struct sshexec_target *t, const char *cmd, struct sshexec_io *io,
		   char *err, size_t errlen)
{
	ssh_session session;
	long long deadline;
	int timeout_ms, ret;

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (t == NULL || t->host == NULL || t->user == NULL ||
	    t->key_b64 == NULL || cmd == NULL || io == NULL) {
		set_err(err, errlen, t ? t->host : NULL, t ? t->port : 0,
			"invalid arguments");
		return -1;
	}
	timeout_ms = t->connect_timeout_ms > 0 ? t->connect_timeout_ms
					       : SSHEXEC_DEFAULT_TIMEOUT_MS;
	deadline = now_ms() + timeout_ms;
	session = sshexec_connect(t, deadline, err, errlen);
	if (session == NULL)
		return -1;
	ret = sshexec_run_session(session, t, cmd, io, deadline, err, errlen);
	set_timeout(session, timeout_ms);	/* bound the goodbye packets' flushing */
	sshexec_disconnect(session);
	return ret;
}

int sshexec_run_session(struct ssh_session_struct *session, const struct sshexec_target *t,
			const char *cmd, struct sshexec_io *io, long long deadline,
			char *err, size_t errlen)
{
	struct ssh_channel_callbacks_struct cb;
	struct sshexec_run r;
	ssh_channel channel = NULL;
	long long left;
	int rc;
	int ret = -1;

	memset(&r, 0, sizeof(r));
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	r.fd_in = io->in;
	r.fd_out = io->out;
	r.fd_err = io->err;
	r.fd_ctl = io->ctl;
	io->status = 0;
	io->signal[0] = '\0';
	io->started = false;

	r.buf = malloc(SSHEXEC_BUF_SIZE);
	if (r.buf == NULL) {
		set_err(err, errlen, t->host, t->port, "out of memory");
		goto out;
	}
	channel = ssh_channel_new(session);
	if (channel == NULL) {
		set_err(err, errlen, t->host, t->port,
			"cannot create a channel: %s", ssh_get_error(session));
		goto out;
	}
	r.channel = channel;
	memset(&cb, 0, sizeof(cb));
	cb.userdata = &r;
	cb.channel_data_function = on_data;
	cb.channel_close_function = on_close;
	cb.channel_exit_status_function = on_exit_status;
	cb.channel_exit_signal_function = on_exit_signal;
	ssh_callbacks_init(&cb);
	if (ssh_set_channel_callbacks(channel, &cb) != SSH_OK) {
		set_err(err, errlen, t->host, t->port,
			"cannot set channel callbacks");
		goto out;
	}

	left = time_left(deadline);
	if (left == 0) {
		set_err(err, errlen, t->host, t->port,
			"timed out opening the channel");
		goto out;
	}
	set_timeout(session, left);
	rc = ssh_channel_open_session(channel);
	if (rc != SSH_OK) {
		if (rc == SSH_AGAIN || time_left(deadline) == 0)
			set_err(err, errlen, t->host, t->port,
				"timed out opening the channel");
		else
			set_err(err, errlen, t->host, t->port,
				"cannot open the channel: %s",
				ssh_get_error(session));
		goto out;
	}
	if (io->pty_cols > 0 && io->pty_rows > 0) {
		rc = ssh_channel_request_pty_size(channel, io->term[0] ? io->term : "xterm-256color",
						  io->pty_cols, io->pty_rows);
		if (rc != SSH_OK) {
			set_err(err, errlen, t->host, t->port, "the server refused a terminal: %s",
				ssh_get_error(session));
			goto out;
		}
		r.pty = true;
	}
	rc = ssh_channel_request_exec(channel, cmd);
	if (rc != SSH_OK) {
		if (rc == SSH_AGAIN || time_left(deadline) == 0)
			set_err(err, errlen, t->host, t->port,
				"timed out starting the command");
		else
			set_err(err, errlen, t->host, t->port,
				"cannot start the command: %s",
				ssh_get_error(session));
		goto out;
	}

	/* The command runs: no time limit on it or on its streams. */
	io->started = true;
	r.started = now_ms();
	set_timeout(session, 0);
	r.in_open = r.fd_in >= 0;
	if (!r.in_open)
		ssh_channel_send_eof(channel);
	if (pump(session, &r, t, err, errlen) < 0)
		goto out;

	if (r.write_errno == EPIPE) {
		/* Nobody reads our output any more: close the channel and
		 * report what a local pipeline would, unless the command had
		 * already ended. */
		ssh_channel_close(channel);
		io->status = r.have_status ? r.status : 128 + SIGPIPE;
		if (!r.have_status)
			snprintf(io->signal, sizeof(io->signal), "PIPE");
		else
			snprintf(io->signal, sizeof(io->signal), "%s", r.signal);
		ret = 0;
		goto out;
	}
	if (r.ended && !r.closed) {
		set_err(err, errlen, t->host, t->port, "ended before the command did");
		goto out;
	}
	if (r.write_errno != 0) {
		set_err(err, errlen, t->host, t->port, "writing %s: %s",
			r.write_what, strerror(r.write_errno));
		goto out;
	}
	if (r.read_errno != 0) {
		set_err(err, errlen, t->host, t->port, "reading stdin: %s",
			strerror(r.read_errno));
		goto out;
	}
	if (!r.closed) {
		set_err(err, errlen, t->host, t->port, "connection lost: %s",
			ssh_get_error(session));
		goto out;
	}
	if (!r.have_status) {
		set_err(err, errlen, t->host, t->port,
			"the command ended without an exit status");
		goto out;
	}
	io->status = r.status;
	snprintf(io->signal, sizeof(io->signal), "%s", r.signal);
	ret = 0;
out:
	if (channel != NULL) {
		/* Bound the close of a channel still open. */
		set_timeout(session, SSHEXEC_DEFAULT_TIMEOUT_MS);
		ssh_channel_free(channel);	/* closes it if still open */
	}
	free(r.buf);
	return ret;
}

/* ---- banner probe ----------------------------------------------------- */

bool sshexec_banner_ready(const char *host, int port, int timeout_ms)
{
	struct pollfd pfd;
	long long deadline;
	long long left;
	char why[160];
	char got[4];
	size_t have = 0;
	ssize_t n;
	int fd;
	int rc;
	bool ok = false;

	if (host == NULL || timeout_ms <= 0)
		return false;
	deadline = now_ms() + timeout_ms;
	fd = tcp_connect(host, port, deadline, why, sizeof(why));
	if (fd < 0)
		return false;
	pfd.fd = fd;
	pfd.events = POLLIN;
	while (have < sizeof(got)) {
		left = deadline - now_ms();
		if (left <= 0)
			goto out;
		rc = poll(&pfd, 1, left > INT32_MAX ? INT32_MAX : (int)left);
		if (rc < 0 && errno != EINTR)
			goto out;
		if (rc <= 0)
			continue;
		n = read(fd, got + have, sizeof(got) - have);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN ||
			    errno == EWOULDBLOCK)
				continue;
			goto out;
		}
		if (n == 0)
			goto out;	/* closed before a full banner */
		have += (size_t)n;
	}
	ok = memcmp(got, "SSH-", sizeof(got)) == 0;
out:
	close(fd);
	return ok;
}
