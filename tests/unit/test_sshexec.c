/*
 * Unit tests for common/sshexec: command-line quoting (checked against the
 * real /bin/sh), the SSH banner probe against tiny loopback listeners, and
 * the failure paths of sshexec_run that need no SSH server (refused port,
 * silent listener, unreadable key).  Running commands against a real sshd
 * belongs to the integration tests (t3xx-ssh).
 *
 * Built by the Makefile as build/default/tests/test_sshexec; alone:
 *   cc -std=c11 -D_GNU_SOURCE -I. tests/unit/test_sshexec.c common/sshexec.c
 *      $(pkg-config --cflags --libs libssh)
 * Prints "ok N - ..." / "not ok N - ..." lines and a closing count; exits 1
 * when a test failed.
 */
#include "common/sshexec.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libssh/libssh.h>

#include "common/banned.h"

static int tests_run;
static int tests_failed;

static void check(bool ok, const char *what)
{
	tests_run++;
	if (!ok)
		tests_failed++;
	printf("%sok %d - %s\n", ok ? "" : "not ", tests_run, what);
	fflush(stdout);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- quoting ---------------------------------------------------------- */

static void check_quote(char *const argv[], const char *want, const char *what)
{
	char *got = sshexec_quote(argv);

	check(got != NULL && strcmp(got, want) == 0, what);
	if (got != NULL && strcmp(got, want) != 0)
		printf("# got  [%s]\n# want [%s]\n", got, want);
	free(got);
}

/* Run "printf '<%s>' QUOTED" through /bin/sh and compare its output with
 * each argument in angle brackets: the shell must see exactly ARGV. */
static void check_quote_shell(char *const argv[], const char *what)
{
	char script[4096], want[4096], got[4096];
	char *q = sshexec_quote(argv);
	size_t wl = 0, gl = 0;
	ssize_t n;
	int pfd[2] = { -1, -1 };
	int st = 0;
	bool ok = false;
	pid_t pid;
	int i, rc;

	if (q == NULL)
		goto out;
	rc = snprintf(script, sizeof(script), "printf '<%%s>' %s", q);
	if (rc < 0 || (size_t)rc >= sizeof(script))
		goto out;
	for (i = 0; argv[i] != NULL; i++) {
		rc = snprintf(want + wl, sizeof(want) - wl, "<%s>", argv[i]);
		if (rc < 0 || (size_t)rc >= sizeof(want) - wl)
			goto out;
		wl += (size_t)rc;
	}
	if (pipe(pfd) < 0)
		goto out;
	pid = fork();
	if (pid < 0)
		goto out;
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		close(pfd[1]);
		execl("/bin/sh", "sh", "-c", script, (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	pfd[1] = -1;
	while (gl < sizeof(got) &&
	       (n = read(pfd[0], got + gl, sizeof(got) - gl)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		gl += (size_t)n;
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && gl == wl &&
	     memcmp(got, want, wl) == 0;
	if (!ok)
		printf("# shell printed [%.*s]\n# want [%s]\n", (int)gl, got,
		       want);
out:
	if (pfd[0] >= 0)
		close(pfd[0]);
	if (pfd[1] >= 0)
		close(pfd[1]);
	free(q);
	check(ok, what);
}

static void test_quote(void)
{
	char *plain[] = { "echo", "hello", NULL };
	char *spaces[] = { "echo", "a b", "  c", NULL };
	char *quote[] = { "it's", NULL };
	char *quotes[] = { "''", NULL };
	char *empty[] = { "", NULL };
	char *none[] = { NULL };
	char *subst[] = { "$(id)", "`id`", "$HOME", NULL };
	char *newline[] = { "a\nb", NULL };
	char *all[] = { "a b", "it's", "", "$(echo pwned)", "`echo pwned`",
			"x\ny", "*", "\\", "\"q\"", "; rm -rf /tmp/nothing",
			"'", "$'x'", "-n", NULL };

	check_quote(plain, "'echo' 'hello'", "quote: plain words");
	check_quote(spaces, "'echo' 'a b' '  c'", "quote: spaces kept");
	check_quote(quote, "'it'\\''s'", "quote: single quote as '\\''");
	check_quote(quotes, "''\\'''\\'''", "quote: only single quotes");
	check_quote(empty, "''", "quote: empty argument stays an argument");
	check_quote(none, "", "quote: empty argv gives empty string");
	check_quote(subst, "'$(id)' '`id`' '$HOME'",
		    "quote: $(...), backticks and $VAR not expanded");
	check_quote(newline, "'a\nb'", "quote: newline inside quotes");
	check_quote_shell(all, "quote: /bin/sh sees exactly argv");
	check_quote_shell(empty, "quote: /bin/sh sees one empty argument");
}

/* ---- banner probe ----------------------------------------------------- */

/* A listening socket on 127.0.0.1 at an ephemeral port; -1 on failure. */
static int listen_loopback(int *port)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(fd, 16) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
		close(fd);
		return -1;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

/* A port on 127.0.0.1 where nothing listens (bound, then released). */
static int closed_port(void)
{
	int port = 0;
	int fd = listen_loopback(&port);

	if (fd < 0)
		return 0;
	close(fd);
	return port;
}

/* Fork a server that accepts one connection on LFD, writes FIRST, waits
 * DELAY_MS, writes REST (may be NULL), then holds the connection HOLD_MS.
 * Returns its pid, or -1. */
static pid_t serve_once(int lfd, const char *first, int delay_ms,
			const char *rest, int hold_ms)
{
	pid_t pid = fork();
	int c;

	if (pid != 0)
		return pid;
	c = accept(lfd, NULL, NULL);
	if (c < 0)
		_exit(1);
	if (first != NULL && write(c, first, strlen(first)) < 0)
		_exit(1);
	sleep_ms(delay_ms);
	if (rest != NULL && write(c, rest, strlen(rest)) < 0)
		_exit(1);
	sleep_ms(hold_ms);
	close(c);
	_exit(0);
}

static void reap(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* Probe a fresh listener served as described; returns the probe's answer
 * and its duration in *ms. */
static bool probe_served(const char *first, int delay_ms, const char *rest,
			 int hold_ms, int timeout_ms, long long *ms)
{
	long long start;
	bool ready;
	pid_t pid;
	int port = 0;
	int lfd = listen_loopback(&port);

	if (lfd < 0)
		return false;
	pid = serve_once(lfd, first, delay_ms, rest, hold_ms);
	start = now_ms();
	ready = sshexec_banner_ready("127.0.0.1", port, timeout_ms);
	*ms = now_ms() - start;
	reap(pid);
	close(lfd);
	return ready;
}

static void test_banner(void)
{
	long long start, ms;
	bool ready;
	int port = 0;
	int lfd;

	ready = probe_served("SSH-2.0-x\r\n", 0, NULL, 2000, 2000, &ms);
	check(ready && ms < 1000, "banner: listener sending SSH-2.0-x is ready");

	ready = probe_served("SS", 100, "H-2.0-x\r\n", 2000, 2000, &ms);
	check(ready, "banner: banner split over two writes is ready");

	ready = probe_served(NULL, 0, NULL, 3000, 300, &ms);
	check(!ready && ms >= 290 && ms < 1300,
	      "banner: accepting but silent listener is not ready, "
	      "within the timeout");

	ready = probe_served("HTTP/1.0 400 Bad\r\n", 0, NULL, 2000, 2000, &ms);
	check(!ready && ms < 1000, "banner: non-SSH greeting is not ready");

	ready = probe_served("SSH", 0, NULL, 0, 2000, &ms);
	check(!ready && ms < 1000,
	      "banner: connection closed mid-banner is not ready");

	/* Like QEMU user networking before the guest listens: the connect
	 * succeeds (kernel backlog) but no one ever answers. */
	lfd = listen_loopback(&port);
	start = now_ms();
	ready = lfd >= 0 && sshexec_banner_ready("127.0.0.1", port, 300);
	ms = now_ms() - start;
	check(lfd >= 0 && !ready && ms >= 290 && ms < 1300,
	      "banner: listener that never accepts is not ready");
	if (lfd >= 0)
		close(lfd);

	port = closed_port();
	start = now_ms();
	ready = sshexec_banner_ready("127.0.0.1", port, 2000);
	ms = now_ms() - start;
	check(port > 0 && !ready && ms < 1000,
	      "banner: closed port is not ready, at once");
}

/* ---- sshexec_run failure paths ---------------------------------------- */

/* A fresh ed25519 private key as OpenSSH PEM text (malloc'd), or NULL. */
static char *make_key(void)
{
	ssh_key key = NULL;
	char *b64 = NULL;
	char *copy = NULL;

	if (ssh_pki_generate(SSH_KEYTYPE_ED25519, 0, &key) != SSH_OK)
		goto out;
	if (ssh_pki_export_privkey_base64(key, NULL, NULL, NULL, &b64) !=
	    SSH_OK)
		goto out;
	copy = strdup(b64);
out:
	ssh_string_free_char(b64);
	ssh_key_free(key);
	return copy;
}

static void test_run_failures(void)
{
	struct sshexec_target t;
	char want[128], err[256];
	char *key = make_key();
	long long start, ms;
	int status = -42;
	int port, lfd, rc;

	check(key != NULL, "run: generate a test key");
	if (key == NULL)
		return;
	memset(&t, 0, sizeof(t));
	t.host = "127.0.0.1";
	t.user = "root";
	t.key_b64 = key;
	t.connect_timeout_ms = 2000;

	t.port = closed_port();
	snprintf(want, sizeof(want), "127.0.0.1:%d: connection refused",
		 t.port);
	rc = sshexec_run(&t, "true", -1, 1, 2, &status, err, sizeof(err));
	check(rc == -1 && status == -42 && strcmp(err, want) == 0,
	      "run: closed port gives host:port: connection refused");
	if (strcmp(err, want) != 0)
		printf("# err [%s]\n", err);

	/* A listener that never speaks: the handshake must give up within
	 * connect_timeout_ms. */
	lfd = listen_loopback(&port);
	t.port = port;
	t.connect_timeout_ms = 400;
	snprintf(want, sizeof(want), "127.0.0.1:%d: SSH handshake timed out",
		 port);
	start = now_ms();
	rc = sshexec_run(&t, "true", -1, 1, 2, &status, err, sizeof(err));
	ms = now_ms() - start;
	check(lfd >= 0 && rc == -1 && strcmp(err, want) == 0 && ms >= 390 &&
	      ms < 1500, "run: silent server times out in the handshake");
	if (strcmp(err, want) != 0)
		printf("# err [%s] after %lld ms\n", err, ms);
	if (lfd >= 0)
		close(lfd);

	t.key_b64 = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot a key\n"
		    "-----END OPENSSH PRIVATE KEY-----\n";
	t.port = closed_port();
	rc = sshexec_run(&t, "true", -1, 1, 2, &status, err, sizeof(err));
	check(rc == -1 && strstr(err, "cannot read the private key") != NULL,
	      "run: unreadable key is reported before connecting");

	/* A tiny error buffer is cut short, not overrun. */
	t.key_b64 = key;
	t.port = closed_port();
	memset(err, 'X', sizeof(err));
	rc = sshexec_run(&t, "true", -1, 1, 2, &status, err, 8);
	check(rc == -1 && strlen(err) == 7 && err[8] == 'X',
	      "run: message truncated to errlen");

	rc = sshexec_run(&t, "true", -1, 1, 2, &status, NULL, 0);
	check(rc == -1, "run: no error buffer is allowed");
	free(key);
}

/* ---- pinned host keys, against a real dropbear ------------------------ */

/* Run ARGV, its stdout into OUT (OUTLEN bytes, NUL-terminated); its exit
 * status, or -1. */
static int run_capture(char *const argv[], char *out, size_t outlen)
{
	int p[2], st = -1;
	size_t got = 0;
	ssize_t n;
	pid_t pid;

	if (pipe(p) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 2);
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	while (got + 1 < outlen && (n = read(p[0], out + got, outlen - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = '\0';
	close(p[0]);
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The "ssh-ed25519 AAAA..." line of dropbearkey -y's output, into LINE. */
static bool dropbear_pub(const char *keyfile, char *line, size_t len)
{
	char out[4096], *p, *end;
	char *const argv[] = { "dropbearkey", "-y", "-f", (char *)keyfile, NULL };

	if (run_capture(argv, out, sizeof(out)) != 0 || !(p = strstr(out, "ssh-ed25519 ")))
		return false;
	/* "TYPE BASE64": the first two words. */
	end = p + strlen("ssh-ed25519 ");
	end += strcspn(end, " \n");
	snprintf(line, len, "%.*s", (int)(end - p), p);
	return true;
}

static void test_host_keys(void)
{
	char dir[] = "/tmp/berth-sshexec-XXXXXX", k1[128], k2[128], pub1[256], pub2[256];
	char got[1024], err[512], portarg[32];
	struct sshexec_target t;
	char *key = make_key();
	pid_t pid = -1;
	int port = closed_port(), status = 0, rc;

	if (access("/usr/sbin/dropbear", X_OK) != 0 || !mkdtemp(dir) || !key) {
		printf("ok %d # SKIP no dropbear (install dropbear-bin)\n", ++tests_run);
		free(key);
		return;
	}
	snprintf(k1, sizeof(k1), "%s/k1", dir);
	snprintf(k2, sizeof(k2), "%s/k2", dir);
	char *const g1[] = { "dropbearkey", "-t", "ed25519", "-f", k1, NULL };
	char *const g2[] = { "dropbearkey", "-t", "ed25519", "-f", k2, NULL };
	check(run_capture(g1, got, sizeof(got)) == 0 && run_capture(g2, got, sizeof(got)) == 0 &&
	      dropbear_pub(k1, pub1, sizeof(pub1)) && dropbear_pub(k2, pub2, sizeof(pub2)),
	      "host keys: two dropbear keys made");
	check(sshexec_key_equal(pub1, pub1) && !sshexec_key_equal(pub1, pub2),
	      "host keys: a key equals itself and not another");
	snprintf(got, sizeof(got), "%s a comment", pub1);
	check(sshexec_key_equal(pub1, got) && !sshexec_key_equal(pub1, "ssh-ed25519 AAAA") &&
	      !sshexec_key_equal("garbage", "garbage"),
	      "host keys: comments ignored, malformed lines equal nothing");

	snprintf(portarg, sizeof(portarg), "127.0.0.1:%d", port);
	pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(null, 1);
		dup2(null, 2);
		execl("/usr/sbin/dropbear", "dropbear", "-F", "-E", "-s", "-p", portarg, "-r", k1,
		      (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 100 && !sshexec_banner_ready("127.0.0.1", port, 200); i++)
		sleep_ms(50);
	rc = sshexec_host_key("127.0.0.1", port, "ssh-ed25519", 5000, got, sizeof(got), err,
			      sizeof(err));
	check(rc == 0 && sshexec_key_equal(got, pub1), "host keys: sshexec_host_key reads the "
	      "server's key");
	if (rc != 0 || !sshexec_key_equal(got, pub1))
		printf("# got [%s] want [%s] err [%s]\n", got, pub1, err);

	memset(&t, 0, sizeof(t));
	t.host = "127.0.0.1";
	t.port = port;
	t.user = "nobody-here";
	t.key_b64 = key;
	t.connect_timeout_ms = 5000;
	t.host_key = pub1;
	rc = sshexec_run(&t, "true", -1, -1, -1, &status, err, sizeof(err));
	check(rc == -1 && strstr(err, "authentication failed") != NULL,
	      "host keys: the pinned key passes (and authentication is what fails)");
	if (!strstr(err, "authentication failed"))
		printf("# err [%s]\n", err);
	t.host_key = pub2;
	rc = sshexec_run(&t, "true", -1, -1, -1, &status, err, sizeof(err));
	check(rc == -1 && strstr(err, "host key mismatch: the machine presented ssh-ed25519 "
				   "SHA256:") != NULL && strstr(err, "berth pinned ssh-ed25519 SHA256:"),
	      "host keys: another key is refused, naming both fingerprints");
	if (!strstr(err, "host key mismatch"))
		printf("# err [%s]\n", err);
	t.host_key = "ssh-ed25519 not-base64!";
	rc = sshexec_run(&t, "true", -1, -1, -1, &status, err, sizeof(err));
	check(rc == -1 && strstr(err, "pinned host key does not parse") != NULL,
	      "host keys: a pinned key that does not parse is refused");
	if (pid > 0) {
		/* dropbear ends on TERM; one that does not within 2 s is
		 * killed (a run beside other tests hung here once). */
		bool reaped = false;
		kill(pid, SIGTERM);
		for (int i = 0; i < 20 && !reaped; i++) {
			reaped = waitpid(pid, NULL, WNOHANG) == pid;
			if (!reaped)
				usleep(100 * 1000);
		}
		if (!reaped) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
		}
	}
	unlink(k1);
	unlink(k2);
	rmdir(dir);
	free(key);
}

int main(void)
{
	/* The probe and the runs write to sockets whose peer may be gone. */
	signal(SIGPIPE, SIG_IGN);
	test_quote();
	test_banner();
	test_run_failures();
	test_host_keys();
	printf("1..%d\n", tests_run);
	printf("test_sshexec: %d passed, %d failed\n",
	       tests_run - tests_failed, tests_failed);
	return tests_failed == 0 ? 0 : 1;
}
