/* Commands run in machines on behalf of API callers (POST
 * /v1/machines/NAME/exec): every user, not only root, and over HTTP with a
 * token.  hostd runs each command over SSH itself, with the gateway key and
 * the machine's pinned host key (common/sshexec.c), on a thread of its
 * own, and the caller reads its output as NDJSON while it runs.  A running
 * command is kept in memory (an id per hostd run): more stdin can be sent
 * to it, a signal, and it is listed.  It ends when it exits, when the
 * client reading its output goes (it is killed), at its timeout (killed),
 * when its machine is deleted, or when hostd stops.
 *
 * A command started with "detach": true outlives its client instead: a
 * thread of hostd's (the pump) reads its stream and hands it to whoever is
 * attached (the POST's own stream first, then any GET .../exec/ID/output:
 * live output from then on, no replay).  The pump keeps at most 256 KiB
 * that an attached reader has not read (beyond, the command waits for the
 * slowest; with no reader attached its output is dropped).  The rule that
 * bounds it: a detached command without a "timeout" gets a day's (it is
 * killed then); it counts against max_execs while it runs; it ends with its
 * machine or hostd as any.  Once it ended it is listed no more, but stays
 * attachable for 60 s (a late reader gets its last line), then is freed as
 * soon as no reader is left. */
#ifndef BERTH_EXEC_H
#define BERTH_EXEC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"

struct hostd;
struct execs;
struct exec;

struct sshexec_target;
struct ssh_session_struct;

/* An SSH session to machine MACHINE_ID as T says, for hostd's own use
 * (the files routes' SFTP): one kept from an earlier command (*KEPT: it
 * may have died meanwhile; try a new one when it fails before anything
 * happened) or a new one within T's connect timeout.  NULL with ERR.  Give
 * it back with exec_session_put: KEEP when it is fine for the next use. */
struct ssh_session_struct *exec_session_get(struct execs *xs, const char *machine_id,
					    const struct sshexec_target *t, bool *kept,
					    char *err, size_t errlen);
void exec_session_put(struct execs *xs, const char *machine_id, const struct sshexec_target *t,
		      struct ssh_session_struct *s, bool keep);

/* The fields of exec_start's REQ (for api_parse_body). */
extern const char *const exec_fields[];

struct execs *execs_new(void);
/* Ends every command (killed) and refuses new ones: before the API's
 * connections are stopped, whose streams then end. */
void execs_stop(struct execs *xs);
/* Frees XS, after the API's connections (and so every stream) ended. */
void execs_free(struct execs *xs);
/* Ends the commands on machine MACHINE_ID (it is being deleted), and
 * closes the SSH sessions kept to it. */
void execs_machine_gone(struct execs *xs, const char *machine_id);
/* Closes the SSH sessions kept to MACHINE_ID (it is being restored). */
void execs_machine_reset(struct execs *xs, const char *machine_id);

/* Start the command REQ describes (the route's JSON body, its fields
 * exec_fields: "argv" or "cmd", "env", "cwd", "user", "stdin",
 * "stdin_open", "timeout", "wake", "connect_timeout", "pty"; docs/api.md) in OWNER's machine NAME, waking it unless "wake" is
 * false.  Returns the running command, whose output exec_read gives, or
 * NULL with E set (400 for a bad request, 404, 409 not_running, 429
 * too_many_execs...): nothing runs then. */
struct exec *exec_start(struct hostd *h, const char *owner, const char *name, json_t *req,
			struct err *e);
/* The next bytes of X's NDJSON stream into BUF (MAX bytes at most),
 * waiting for them: first {"id": N} (with "woke_ms" when its machine was
 * woken for it), then {"stdout": BASE64} and
 * {"stderr": BASE64} as the command writes ({"keepalive": true} after a
 * quiet while, so that the API's api_send_timeout does not drop the
 * stream of a quiet command), and last {"exit": N} (with
 * "signal": "TERM" when a signal ended it, "timed_out": true at its
 * timeout) or {"error": {"code", "message"}} when SSH failed.  While
 * waiting, it watches PEER_FD (the client's connection, -1: none) and
 * gives up when the client has gone.  Returns the number of bytes (> 0),
 * 0 at the end of the stream, -1 when the client went. */
ssize_t exec_read(struct exec *x, int peer_fd, char *buf, size_t max);
/* The stream's reader is done with X: a command still running is killed,
 * its thread joined, X freed. */
void exec_release(struct exec *x);

/* A reader of a detached command's stream. */
struct exec_attach;
/* Whether X was started with "detach": its stream is read through
 * exec_first_reader, and exec_release is not for it. */
bool exec_is_detached(const struct exec *x);
/* The reader exec_start made for the POST's own stream of detached X
 * (from its start: {"id": N} first).  The caller owns it (exec_detach);
 * X itself is the pump's from then on. */
struct exec_attach *exec_first_reader(struct exec *x);
/* A new reader of OWNER's detached command ID in machine NAME, from now
 * on: its stream gives {"id": N, "attached": true}, then the command's
 * lines as they come (keepalives included), then its last line; for one
 * that ended within the last minute, {"id"} and its last line.  NULL with
 * E (404 none, or not detached; 429 too many readers). */
struct exec_attach *exec_attach(struct execs *xs, const char *owner, const char *name,
				int64_t id, struct err *e);
/* The next bytes of A's stream into BUF, as exec_read: > 0, 0 at the end,
 * -1 when PEER_FD (-1: none) went. */
ssize_t exec_attach_read(struct exec_attach *a, int peer_fd, char *buf, size_t max);
/* A's reader is done (NULL is fine): the command runs on. */
void exec_detach(struct exec_attach *a);

/* Append LEN bytes of DATA to the stdin of command ID in OWNER's machine
 * NAME, waiting up to a few seconds for room; then close it when EOF.
 * Returns the bytes taken (LEN, or fewer when the command did not read in
 * time), or -1 with E set (404 no such command, 409 stdin closed). */
ssize_t exec_stdin(struct execs *xs, const char *owner, const char *name, int64_t id,
		   const void *data, size_t len, bool eof, struct err *e);
/* The terminal of command ID (started with "pty") is now COLS x ROWS.  0
 * or -1 with E set (409 "no_pty" without one). */
int exec_resize(struct execs *xs, const char *owner, const char *name, int64_t id, int cols,
		int rows, struct err *e);
/* Send signal SIG (a number) to command ID.  0 or -1 with E set. */
int exec_signal(struct execs *xs, const char *owner, const char *name, int64_t id, int sig,
		struct err *e);
/* OWNER's running commands in machine NAME (MACHINE_ID), as {"execs": [...]}. */
json_t *exec_list_json(struct execs *xs, const char *owner, const char *machine_id);

#endif
