/* The algorithms berth-sshgw offers its clients: one list, in algos.c,
 * with the reasons beside it (docs/security.md, "The SSH gateway's
 * algorithms"). */
#ifndef BERTH_SSHGW_ALGOS_H
#define BERTH_SSHGW_ALGOS_H

#include <libssh/libssh.h>
#include <libssh/server.h>

/* Set on BIND what every connection accepted on it negotiates: key
 * exchange, ciphers, MACs, host key algorithms and the algorithms of
 * users' key signatures; libssh's server configuration files
 * (/etc/libssh) are not read, so these lists are all there is.  Call
 * before the first ssh_bind_accept_fd.  Returns 0, or -1 with libssh's
 * reason logged. */
int algos_bind(ssh_bind bind);

/* Set on SESSION, just accepted on such a bind (ssh_bind_accept_fd) and
 * before its key exchange, what libssh 0.10 sets only per session: no
 * compression.  Returns 0, or -1 with libssh's reason logged. */
int algos_session(ssh_session session);

#endif
