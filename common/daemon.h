/* What the unprivileged gateways (berth-sshgw, berth-desktop) do alike at
 * start: bind their port as root, then become their own user for good. */
#ifndef BERTH_DAEMON_H
#define BERTH_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* SPEC, ADDR:PORT with a numeric address ("0.0.0.0:22", "[::1]:8080") and a
 * port from 1 to 65535, into *SS.  0, or -1 when it is not one. */
int daemon_parse_listen(const char *spec, struct sockaddr_storage *ss, socklen_t *sslen);
/* Whether SS is a loopback address (127/8, ::1). */
bool daemon_addr_loopback(const struct sockaddr_storage *ss);

/* A listening TCP socket on SPEC, ADDR:PORT with a numeric address
 * ("0.0.0.0:22", "[::]:22", "127.0.0.1:6080"); -1 (logged) on error. */
int daemon_listen(const char *spec);

/* Become USER for good: no groups, its gid and uid, no way back to root,
 * no new privileges, not dumpable.  WHAT names the program in errors.
 * -1 (logged) on any failure. */
int daemon_drop_to(const char *user, const char *what);

/* The three steps in order: listen on SPEC as root, write PIDFILE (may
 * be NULL: none), then, when root, become USER.  The listening socket, or
 * -1 (logged). */
int daemon_start(const char *spec, const char *pidfile, const char *user, const char *what);

/* Option OPT's value TEXT as a number from LO to HI into *OUT; -1 (logged,
 * naming OPT and the range) when it is not one. */
int daemon_arg_int(const char *opt, const char *text, int lo, int hi, int *out);

/* Where a file the program ships lives: REL in the source tree bin/ is in
 * (BIN/../REL, or BIN/../../../REL for build/asan/bin), else INSTALLED
 * under an installed PREFIX (BIN/../INSTALLED: share/berth/...), else
 * BIN/../REL (for the message that says it is missing); into OUT. */
void daemon_beside_exe(const char *rel, const char *installed, char *out, size_t outlen);

/* --log-level TEXT into the log's threshold; -1 (logged) when unknown. */
int daemon_arg_log_level(const char *text);

#endif
