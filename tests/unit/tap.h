/*
 * A tiny TAP harness for the unit tests, header-only so each test program
 * stays one file: "ok N - what" / "not ok N - what" lines (a failure adds
 * "# detail" lines), "ok N # SKIP reason" for a missing prerequisite (a skip
 * is never a pass), and tap_done() printing "1..N" and
 * "test_NAME: N passed, N failed".
 *
 * Also a few helpers the tests share: run a tool from argv with a given
 * stdin and capture what it prints, look a program up in PATH, make and
 * remove a temporary directory.  They use nothing of berth's own code, so a
 * bug in common/run.c cannot hide behind them.
 *
 * Everything is static (inline for the functions) so a test that uses only
 * part of it still builds with -Werror.
 */
#ifndef BERTH_TESTS_TAP_H
#define BERTH_TESTS_TAP_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int tap_count;
static int tap_failures;
static int tap_skips;

/* Record one result; WHAT is a printf format.  Returns OK so callers can
 * add detail lines after a failure: if (!check(...)) diag(...). */
__attribute__((format(printf, 2, 3)))
static inline bool check(bool ok, const char *what, ...)
{
	va_list ap;

	tap_count++;
	if (!ok)
		tap_failures++;
	printf("%sok %d - ", ok ? "" : "not ", tap_count);
	va_start(ap, what);
	vprintf(what, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	return ok;
}

/* A "# ..." detail line (newlines in the text are turned into "\n" so each
 * detail stays one TAP comment line). */
__attribute__((format(printf, 1, 2)))
static inline void diag(const char *fmt, ...)
{
	char text[8192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	printf("# ");
	for (const char *p = text; *p; p++) {
		if (*p == '\n')
			printf("\\n");
		else
			putchar(*p);
	}
	printf("\n");
	fflush(stdout);
}

/* A prerequisite is missing: counted as skipped, never as passed. */
__attribute__((format(printf, 2, 3)))
static inline void skip(const char *what, const char *reason, ...)
{
	va_list ap;

	tap_count++;
	tap_skips++;
	printf("ok %d # SKIP ", tap_count);
	va_start(ap, reason);
	vprintf(reason, ap);
	va_end(ap);
	printf(" (%s)\n", what);
	fflush(stdout);
}

static inline bool check_str(const char *got, const char *want,
			     const char *what)
{
	bool ok = got != NULL && strcmp(got, want) == 0;

	if (!check(ok, "%s", what)) {
		diag("got  [%s]", got ? got : "(null)");
		diag("want [%s]", want);
	}
	return ok;
}

static inline bool check_has(const char *hay, const char *needle,
			     const char *what)
{
	bool ok = hay != NULL && strstr(hay, needle) != NULL;

	if (!check(ok, "%s", what)) {
		diag("in   [%s]", hay ? hay : "(null)");
		diag("want [%s]", needle);
	}
	return ok;
}

static inline bool check_lacks(const char *hay, const char *needle,
			       const char *what)
{
	bool ok = hay != NULL && strstr(hay, needle) == NULL;

	if (!check(ok, "%s", what)) {
		diag("in     [%s]", hay ? hay : "(null)");
		diag("unwanted [%s]", needle);
	}
	return ok;
}

static inline bool check_u64(unsigned long long got, unsigned long long want,
			     const char *what)
{
	bool ok = got == want;

	if (!check(ok, "%s", what))
		diag("got %llu, want %llu", got, want);
	return ok;
}

/* Print the plan and the summary line; the exit status for main. */
static inline int tap_done(const char *name)
{
	printf("1..%d\n", tap_count);
	printf("%s: %d passed, %d failed", name,
	       tap_count - tap_failures - tap_skips, tap_failures);
	if (tap_skips)
		printf(", %d skipped", tap_skips);
	printf("\n");
	return tap_failures == 0 ? 0 : 1;
}

/* The full path of PROG found in PATH into OUT; false when absent. */
static inline bool tool_find(const char *prog, char *out, size_t outlen)
{
	const char *path = getenv("PATH");
	char dirs[4096];
	char *save = NULL;

	snprintf(dirs, sizeof(dirs), "%s",
		 path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
	for (char *d = strtok_r(dirs, ":", &save); d;
	     d = strtok_r(NULL, ":", &save)) {
		int n = snprintf(out, outlen, "%s/%s", d, prog);
		if (n > 0 && (size_t)n < outlen && access(out, X_OK) == 0)
			return true;
	}
	return false;
}

/* Run ARGV (argv[0] a path) with IN (may be NULL: /dev/null) on stdin;
 * stdout and stderr together go into the malloc'd NUL-terminated *OUT (may
 * be NULL to discard).  Returns the exit status, or -1 when the tool could
 * not run or was killed.  IN must fit in a pipe buffer (64 KiB). */
static inline int tool_run(char *const argv[], const char *in, char **out)
{
	int ip[2] = { -1, -1 }, op[2] = { -1, -1 };
	size_t len = 0, cap = 4096;
	char *text = malloc(cap);
	int st = 0, rc = -1;
	pid_t pid;
	ssize_t n;

	if (out)
		*out = NULL;
	if (!text || pipe(ip) < 0 || pipe(op) < 0)
		goto out;
	if (in && strlen(in) >= 65536)
		goto out;
	pid = fork();
	if (pid < 0)
		goto out;
	if (pid == 0) {
		dup2(ip[0], 0);
		dup2(op[1], 1);
		dup2(op[1], 2);
		close(ip[0]);
		close(ip[1]);
		close(op[0]);
		close(op[1]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(ip[0]);
	ip[0] = -1;
	close(op[1]);
	op[1] = -1;
	if (in) {
		/* A tool that exits without reading must not kill us with
		 * SIGPIPE: ignore it around the write; the status tells. */
		struct sigaction ign = { .sa_handler = SIG_IGN }, old;
		sigemptyset(&ign.sa_mask);
		sigaction(SIGPIPE, &ign, &old);
		if (write(ip[1], in, strlen(in)) < 0) {
			/* EPIPE: the tool closed its stdin early. */
		}
		sigaction(SIGPIPE, &old, NULL);
	}
	close(ip[1]);
	ip[1] = -1;
	for (;;) {
		if (cap - len < 1024) {
			char *p = realloc(text, cap * 2);
			if (!p)
				break;
			text = p;
			cap *= 2;
		}
		n = read(op[0], text + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	text[len] = '\0';
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
out:
	for (int i = 0; i < 2; i++) {
		if (ip[i] >= 0)
			close(ip[i]);
		if (op[i] >= 0)
			close(op[i]);
	}
	if (out && text && rc >= 0)
		*out = text;
	else
		free(text);
	return rc;
}

static inline int tap_rm_one(const char *path, const struct stat *sb,
			     int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path) < 0 ? -1 : 0;
	return unlink(path) < 0 ? -1 : 0;
}

/* rm -rf DIR (nothing outside it: no symlinks followed).  0 or -1. */
static inline int tmpdir_remove(const char *dir)
{
	if (!dir || !*dir)
		return 0;
	return nftw(dir, tap_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh directory /tmp/berth-test-XXXXXX in OUT (at least 64 bytes);
 * false on failure. */
static inline bool tmpdir_make(char *out, size_t outlen)
{
	if (snprintf(out, outlen, "/tmp/berth-test-XXXXXX") >= (int)outlen)
		return false;
	return mkdtemp(out) != NULL;
}

/* Write TEXT (LEN bytes) to PATH; 0 or -1. */
static inline int write_file(const char *path, const void *text, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int rc = -1;

	if (fd < 0)
		return -1;
	if (write(fd, text, len) == (ssize_t)len)
		rc = 0;
	if (close(fd) < 0)
		rc = -1;
	return rc;
}

#endif
