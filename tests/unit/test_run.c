/* The argv runner (common/run.h): exit statuses and stderr in the error,
 * stdout capture, the timeout (which must kill the tool's children too and
 * return at once), the dry-run record. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/run.h"
#include "common/util.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

int main(void)
{
	struct err e = { 0 };
	struct buf out = BUF_INIT, log = BUF_INIT;
	int rc;

	signal(SIGPIPE, SIG_IGN);
	{
		char *const argv[] = { "sh", "-c", "echo hello; echo oops >&2", NULL };
		struct run_opts o = { .out = &out };
		rc = run_argv(argv, &o, &e);
		check(rc == 0 && !err_isset(&e), "exit 0 is success");
		check_str(buf_str(&out), "hello\n", "stdout is captured");
	}
	{
		char *const argv[] = { "sh", "-c", "echo first >&2; echo 'the cause' >&2; exit 3", NULL };
		err_clear(&e);
		rc = run_argv(argv, NULL, &e);
		check(rc == -1 && e.status == 500 && !strcmp(e.code, "tool_failed"),
		      "exit 3 fails with tool_failed");
		check_has(e.msg, "sh exited with status 3", "the error names the tool and status");
		check_has(e.msg, "the cause", "and carries the end of its stderr");
	}
	{
		char *const argv[] = { "no-such-tool-berth", NULL };
		err_clear(&e);
		rc = run_argv(argv, NULL, &e);
		check(rc == -1, "a missing tool fails");
		check_has(e.msg, "cannot run no-such-tool-berth", "and says it cannot be run");
	}
	{
		/* A grandchild holding the pipes open must not keep us waiting. */
		char *const argv[] = { "bash", "-c", "sleep 30 & sleep 30; true", NULL };
		struct run_opts o = { .timeout_s = 1 };
		int64_t t0 = mono_ms();
		err_clear(&e);
		rc = run_argv(argv, &o, &e);
		int64_t took = mono_ms() - t0;
		check(rc == -1, "a tool past its timeout fails");
		check_has(e.msg, "timed out after 1 s", "and says it timed out");
		if (!check(took < 3000, "the timeout kills the tool's children and returns at once"))
			diag("took %lld ms", (long long)took);
	}
	{
		char *const argv[] = { "sh", "-c", "kill -TERM $$", NULL };
		err_clear(&e);
		rc = run_argv(argv, NULL, &e);
		check(rc == -1, "a tool killed by a signal fails");
		check_has(e.msg, "killed by signal 15", "and names the signal");
	}
	{
		char *const argv[] = { "sh", "-c", "exec 3>&-; ls /proc/self/fd", NULL };
		struct run_opts o = { .out = &out };
		buf_reset(&out);
		err_clear(&e);
		rc = run_argv(argv, &o, &e);
		check(rc == 0 && !strcmp(buf_str(&out), "0\n1\n2\n3\n"),
		      "the tool inherits only stdin, stdout and stderr");
		if (rc == 0 && strcmp(buf_str(&out), "0\n1\n2\n3\n"))
			diag("fds: %s", buf_str(&out));
	}
	{
		char *const argv[] = { "qemu-img", "create", "-f", "qcow2", "/x y/it's", "1G", NULL };
		run_set_dry(&log);
		err_clear(&e);
		rc = run_argv(argv, NULL, &e);
		run_set_dry(NULL);
		check(rc == 0, "dry run succeeds without running");
		check_str(buf_str(&log), "qemu-img create -f qcow2 '/x y/it'\\''s' 1G\n",
			  "dry run records the command line, quoted");
	}
	buf_free(&out);
	buf_free(&log);
	return tap_done("test_run");
}
