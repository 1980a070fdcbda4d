/* What the unprivileged gateways (berth-sshgw, berth-desktop) do alike at
 * start: bind their port as root, then become their own user for good. */
#ifndef BERTH_DAEMON_H
#define BERTH_DAEMON_H

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

/* --log-level TEXT into the log's threshold; -1 (logged) when unknown. */
int daemon_arg_log_level(const char *text);

#endif
