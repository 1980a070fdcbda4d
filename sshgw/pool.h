/* Sessions to machines kept for reuse.  A connection that ends hands its
 * authenticated session to the machine here; the next connection of the
 * same user to the same machine, as the same machine user and at the same
 * endpoint, within POOL_TTL_MS takes it instead of a new handshake (which
 * under TCG costs the guest 100 ms and more).  A session is used by one
 * connection at a time: taking removes it. */
#ifndef BERTH_SSHGW_POOL_H
#define BERTH_SSHGW_POOL_H

#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <stdbool.h>

#define POOL_TTL_MS 60000

struct upstream {
	ssh_session s;
	/* The session's callbacks, which live as long as it does; userdata is
	 * the connection using it (NULL while pooled). */
	struct ssh_callbacks_struct *cb;
	char key[256];	/* owner/machine/user@host:port */
};

/* Take a live session for KEY into *OUT.  Sessions that saw anything
 * arrive while pooled (most likely their end) are closed instead. */
bool pool_take(const char *key, struct upstream *out);
/* Keep U (its channels all closed) for reuse, or close it when the pool is
 * full. */
void pool_put(struct upstream *u);
/* At most HANDSHAKES_PER_ENDPOINT handshakes to one endpoint ("HOST:PORT")
 * at a time; the others wait their turn.  sshd servers drop unauthenticated
 * connections beyond a few per source (dropbear: 5 per address; OpenSSH's
 * MaxStartups starts at 10), and every connection of the gateway to a
 * machine comes from one address. */
#define HANDSHAKES_PER_ENDPOINT 4
void handshake_begin(const char *endpoint);
void handshake_end(const char *endpoint);

/* Close U's session and free its callbacks. */
void upstream_close(struct upstream *u);

#endif
