/* One SSH connection through the gateway: the client's session (libssh
 * server) and, once the caller's machine is known and awake, one session to
 * the machine's sshd (libssh client, hostd's gateway key), with every
 * channel of the first mirrored on the second.  See docs/architecture.md,
 * "SSH gateway". */
#ifndef BERTH_SSHGW_PROXY_H
#define BERTH_SSHGW_PROXY_H

#include <libssh/server.h>
#include <stdbool.h>
#include <stdint.h>

/* What every connection shares, filled by the caller (main.c) and read,
 * never changed, by proxy_serve's threads. */
struct gw {
	const char *hostd_sock;	/* STATE/hostd.sock */
	ssh_bind bind;		/* host keys and algorithms for every connection */
	int login_grace_s;	/* from accept to authenticated */
	int kex_timeout_s;	/* from accept to the end of the key exchange */
	int max_auth_tries;	/* refused keys per connection */
	/* Required.  A key from ADDR was refused: it counts towards the
	 * address's limit.  Called from any connection's thread. */
	void (*auth_failed)(const char *addr, void *data);
	/* Required.  How many times hostd has been seen to restart (its
	 * sessions are then gone, and live connections open theirs again).
	 * Called on every turn of every connection's loop: it must be cheap. */
	int (*hostd_generation)(void *data);
	/* Optional.  The connection from ADDR authenticated (once per
	 * connection): it no longer counts as unauthenticated. */
	void (*authenticated)(const char *addr, void *data);
	void *data;		/* passed to the callbacks */
};

/* Serve the accepted connection FD from ADDR:PORT until it ends; FD is
 * consumed.  Logs one line when a session ends: who, which machine, from
 * where, how long, bytes each way.  Returns whether it authenticated. */
bool proxy_serve(struct gw *g, int fd, const char *addr, int port);

#endif
