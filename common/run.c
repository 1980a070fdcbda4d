#include "common/run.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "common/banned.h"

extern char **environ;

static struct buf *dry_log;
static int (*dry_fn)(const char *cmdline, struct buf *out, void *data);
static void *dry_data;

void run_set_dry_responder(int (*fn)(const char *cmdline, struct buf *out, void *data),
			   void *data)
{
	dry_fn = fn;
	dry_data = data;
}

void run_set_dry(struct buf *log)
{
	dry_log = log;
}

static void cmdline(struct buf *b, char *const argv[])
{
	for (size_t i = 0; argv[i]; i++) {
		if (i)
			buf_adds(b, " ");
		buf_add_shquoted(b, argv[i]);
	}
}

/* In the child: exec ARGV with fds set up; never returns. */
static void child_exec(char *const argv[], const struct run_opts *o,
		       int out_fd, int err_fd)
{
	int nul = open("/dev/null", O_RDWR);
	sigset_t none;

	if (nul < 0)
		_exit(127);
	/* Its own process group, so a timeout kills the tool's children
	 * too; dies with its parent; signals unblocked (hostd blocks the ones
	 * it waits for, and a blocked mask is inherited). */
	if (!o || !o->terminal)
		setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (o && o->stdin_path) {
		int in = open(o->stdin_path, O_RDONLY | O_CLOEXEC);
		if (in < 0) {
			dprintf(err_fd, "cannot open %s: %s", o->stdin_path, strerror(errno));
			_exit(127);
		}
		dup2(in, 0);
	} else {
		dup2(nul, 0);
	}
	dup2(out_fd >= 0 ? out_fd : nul, 1);
	dup2(err_fd, 2);
	/* No descriptor of the parent's leaks into tools (lvm warns, QEMU
	 * helpers would keep sockets open). */
	for (int fd = 3; fd < 1024; fd++)
		close(fd);
	signal(SIGPIPE, SIG_DFL);
	if (o && o->drop && (setgroups(0, NULL) < 0 || setgid(o->gid) < 0 || setuid(o->uid) < 0)) {
		dprintf(2, "cannot become uid %u: %s", (unsigned)o->uid, strerror(errno));
		_exit(127);
	}
	if (o && o->env_add)
		for (size_t i = 0; o->env_add[i]; i++)
			putenv(o->env_add[i]);
	execvp(argv[0], argv);
	dprintf(2, "cannot run %s: %s", argv[0], strerror(errno));
	_exit(127);
}

/* The last non-empty lines of S, at most MAX bytes, newlines as "; ". */
static void tail_lines(const char *s, size_t max, struct buf *out)
{
	size_t n = strlen(s);

	while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' '))
		n--;
	size_t start = n > max ? n - max : 0;
	for (size_t i = start; i < n; i++) {
		if (s[i] == '\n')
			buf_adds(out, "; ");
		else
			buf_add(out, &s[i], 1);
	}
}

int run_argv(char *const argv[], const struct run_opts *o, struct err *e)
{
	int outp[2] = { -1, -1 }, errp[2] = { -1, -1 };
	int file_fd = -1, status = 0, rc = -1;
	struct buf errbuf = BUF_INIT, line = BUF_INIT;
	pid_t pid;
	int64_t deadline = 0, t0;
	bool timed_out = false;

	cmdline(&line, argv);
	if (dry_log) {
		buf_printf(dry_log, "%s\n", buf_str(&line));
		if (dry_fn) {
			struct buf out = BUF_INIT;
			int st = dry_fn(buf_str(&line), &out, dry_data);
			if (st != 0)
				err_set(e, 500, "tool_failed", "%s exited with status %d: %s", argv[0],
					st, buf_str(&out));
			else if (o && o->out)
				buf_add(o->out, out.data ? out.data : "", out.len);
			buf_free(&out);
			buf_free(&line);
			return st ? -1 : 0;
		}
		buf_free(&line);
		return 0;
	}
	log_debug("run: %s", buf_str(&line));
	if (o && o->stdout_path) {
		file_fd = open(o->stdout_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (file_fd < 0) {
			err_errno(e, errno, "%s: create %s", argv[0], o->stdout_path);
			goto out;
		}
	} else if (o && o->out && pipe2(outp, O_CLOEXEC) < 0) {
		err_errno(e, errno, "%s: pipe", argv[0]);
		goto out;
	}
	if (pipe2(errp, O_CLOEXEC) < 0) {
		err_errno(e, errno, "%s: pipe", argv[0]);
		goto out;
	}
	t0 = mono_us();
	pid = fork();
	if (pid < 0) {
		err_errno(e, errno, "%s: fork", argv[0]);
		goto out;
	}
	if (pid == 0)
		child_exec(argv, o, file_fd >= 0 ? file_fd : outp[1], errp[1]);
	close(errp[1]);
	errp[1] = -1;
	if (outp[1] >= 0) {
		close(outp[1]);
		outp[1] = -1;
	}
	if (o && o->timeout_s > 0)
		deadline = mono_ms() + (int64_t)o->timeout_s * 1000;

	/* Drain both pipes until they close. */
	for (;;) {
		struct pollfd p[2];
		int np = 0, timeout = -1;
		if (errp[0] >= 0)
			p[np++] = (struct pollfd){ .fd = errp[0], .events = POLLIN };
		if (outp[0] >= 0)
			p[np++] = (struct pollfd){ .fd = outp[0], .events = POLLIN };
		if (np == 0)
			break;
		if (deadline) {
			int64_t left = deadline - mono_ms();
			if (left <= 0) {
				kill(-pid, SIGKILL);
				kill(pid, SIGKILL);
				err_set(e, 500, "tool_failed", "%s: timed out after %d s",
					argv[0], o->timeout_s);
				timed_out = true;
				deadline = 0;
			} else {
				timeout = (int)left;
			}
		}
		int r = poll(p, (nfds_t)np, timeout);
		if (r < 0 && errno != EINTR)
			break;
		for (int i = 0; i < np && r > 0; i++) {
			if (!p[i].revents)
				continue;
			char data[8192];
			ssize_t n = read(p[i].fd, data, sizeof(data));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				close(p[i].fd);
				if (p[i].fd == errp[0])
					errp[0] = -1;
				else
					outp[0] = -1;
				continue;
			}
			if (p[i].fd == errp[0])
				buf_add(&errbuf, data, (size_t)n);
			else
				buf_add(o->out, data, (size_t)n);
		}
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	ext_time_add(mono_us() - t0);
	if (timed_out)
		goto out;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		rc = 0;
		goto out;
	}
	{
		struct buf msg = BUF_INIT;
		if (WIFEXITED(status))
			buf_printf(&msg, "%s exited with status %d", argv[0],
				   WEXITSTATUS(status));
		else
			buf_printf(&msg, "%s killed by signal %d", argv[0],
				   WTERMSIG(status));
		if (errbuf.len) {
			buf_adds(&msg, ": ");
			tail_lines(buf_str(&errbuf), 400, &msg);
		}
		err_set(e, 500, "tool_failed", "%s", buf_str(&msg));
		log_debug("failed: %s: %s", buf_str(&line), buf_str(&msg));
		buf_free(&msg);
	}
out:
	if (file_fd >= 0)
		close(file_fd);
	for (int i = 0; i < 2; i++) {
		if (outp[i] >= 0)
			close(outp[i]);
		if (errp[i] >= 0)
			close(errp[i]);
	}
	buf_free(&errbuf);
	buf_free(&line);
	return rc;
}
