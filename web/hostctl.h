/* berth-web's client of hostd's STATE/webctl.sock (hostd/webctl.h): a
 * JSON line out, with a descriptor passed beside it (SCM_RIGHTS), a JSON
 * line back, with the descriptors hostd passes; the connection stays open
 * for an op that goes on (the broker's call ends on it). */
#ifndef BERTH_WEB_HOSTCTL_H
#define BERTH_WEB_HOSTCTL_H

#include <jansson.h>
#include <stddef.h>

/* Connect to SOCK, send REQ (not consumed) with descriptor FD (-1: none),
 * and read hostd's answer into *ANSWER (a new reference; an error answer
 * is {"error": {"status", "code", "message"}}), with the descriptors
 * passed with it in FDS[0..NFDS) (-1 for those not passed; FDS may be
 * NULL with NFDS 0), within TIMEOUT_MS.  Returns the connection (the
 * caller's to close), or -1 with ERR (ERRLEN bytes) when hostd could not
 * be asked. */
int hostctl_open(const char *sock, json_t *req, int fd, json_t **answer, int *fds,
		 size_t nfds, int timeout_ms, char *err, size_t errlen);
/* hostctl_open for an op that may hold a client's request (the preview
 * op while hostd wakes a machine), without a descriptor sent: hostd's
 * lines {"waiting": true} before its answer are taken, and from the first
 * of them on, WATCH (the client's socket; -1: none) closing its side
 * (POLLRDHUP, POLLHUP, POLLERR) ends the wait: -2 with ERR ("the client
 * went"), nothing kept.  A client that only shut down its sending side
 * looks the same, and is taken as gone too: nothing can be written to it
 * to tell, before its answer.  What hostctl_open returns otherwise. */
int hostctl_open_held(const char *sock, json_t *req, json_t **answer, int *fds, size_t nfds,
		      int timeout_ms, int watch, char *err, size_t errlen);
/* LINE (not consumed) on connection S, then hostd's answer into *ANSWER,
 * within TIMEOUT_MS.  0, or -1 with ERR. */
int hostctl_say(int s, json_t *line, json_t **answer, int timeout_ms, char *err,
		size_t errlen);
/* The status, code and message of an error answer: 0 when ANSWER is not
 * one. */
int hostctl_error(json_t *answer, const char **code, const char **message);

#endif
