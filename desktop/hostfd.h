/* berth-desktop's client of hostd's desktop socket (STATE/desktop.sock,
 * hostd/desktop.h): one JSON request line, one JSON answer line, and maybe
 * descriptors passed with it (SCM_RIGHTS). */
#ifndef BERTH_DESKTOP_HOSTFD_H
#define BERTH_DESKTOP_HOSTFD_H

#include <jansson.h>
#include <stddef.h>

/* Send REQ (not consumed) to the socket SOCK.  Returns 0 with *RESP (a new
 * reference: the answer, possibly {"error":{...}}) and FDS[0..NFDS-1] the
 * descriptors passed with it, in order (-1 for those not passed; more than
 * NFDS are closed; FDS may be NULL with NFDS 0), or -1 with ERR (ERRLEN
 * bytes) when hostd could not be asked. */
int hostfd_call(const char *sock, json_t *req, json_t **resp, int *fds, size_t nfds,
		char *err, size_t errlen);

/* The message of an error answer ("" when RESP is not one), and its code. */
const char *hostfd_error(json_t *resp, const char **code);

#endif
