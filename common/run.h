/* Run external tools from argv, never through a shell (STYLE.md #3).
 *
 * The child gets /dev/null as stdin, its stdout captured (or discarded),
 * its stderr captured into the error message, and no inherited descriptors
 * beyond 0-2.  A dry-run mode records each command line instead of running
 * it, so unit tests can assert the exact argv of every tool berth runs. */
#ifndef BERTH_RUN_H
#define BERTH_RUN_H

#include <stdbool.h>
#include <sys/types.h>

#include "common/buf.h"
#include "common/err.h"

struct run_opts {
	struct buf *out;          /* stdout is appended here; NULL discards it */
	char *const *env_add;     /* extra "K=V" entries, NULL-terminated, or NULL */
	int timeout_s;            /* kill the child after this long; 0 = none */
	const char *stdout_path;  /* write stdout to this file instead (created 0600) */
	const char *stdin_path;   /* stdin from this file instead of /dev/null */
	bool drop;                /* run as uid/gid (no supplementary groups) */
	bool terminal;            /* stay in the caller's process group, so the
				     tool may ask on the terminal (a passphrase) */
	uid_t uid;
	gid_t gid;
};

/* Run ARGV (argv[0] is looked up in PATH).  Returns 0 when the tool exited
 * 0; otherwise -1 with E naming the tool, its exit status or signal, and the
 * last lines of its stderr.  OPTS may be NULL. */
int run_argv(char *const argv[], const struct run_opts *opts, struct err *e);

/* Dry run: while LOG is non-NULL, run_argv appends each command line (shell
 * quoted, one per line) to LOG and returns 0 without running anything.
 * Tests only; not thread-safe.  Pass NULL to run for real again. */
void run_set_dry(struct buf *log);
/* In dry-run mode, FN (when non-NULL) answers for the tool: it gets the
 * recorded command line and the stdout buffer (NULL when the caller does
 * not capture), and returns the tool's exit status (non-zero fails the
 * run with FN's text in OUT as its stderr).  Tests use it to feed real
 * captured output (lvs JSON) to the code under test. */
void run_set_dry_responder(int (*fn)(const char *cmdline, struct buf *out, void *data),
			   void *data);

#endif
