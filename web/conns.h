/* berth-web's client connections: who may hold one, and for how long
 * without asking anything.
 *
 * libmicrohttpd's own connection timeout counts idle time only, so a client
 * that sends a byte every few seconds holds a thread for ever, and its per
 * address limit is per address, which an IPv6 client has by the billion.
 * Here, at accept (conns_notify, MHD_CONNECTION_NOTIFY_STARTED), a
 * connection is counted against its address's share (an IPv4 address, an
 * IPv6 /64) and refused (shut down at once) beyond it; and a reaper thread
 * shuts down every connection that
 *   - sends no complete request head within HEAD_S of its accept (the TLS
 *     handshake included) or of the start of its request line;
 *   - sends no new request line within IDLE_S of its previous answer
 *     (keep-alive: waiting is fine, trickling a request line is not).
 * A request being answered has no deadline (a command's output streams
 * for hours), nor has an upgraded connection (a WebSocket: its own pings
 * decide).  The socket context of each connection is a struct of this
 * module's; previews keep theirs in it (conns_slot). */
#ifndef BERTH_WEB_CONNS_H
#define BERTH_WEB_CONNS_H

#include <microhttpd.h>

/* Start the reaper; MAX_PER_ADDR: connections one address (IPv6: one /64)
 * may hold at once.  HEAD_S: seconds for a request head; IDLE_S: seconds a
 * kept connection may wait for its next request.  0, or -1 (logged). */
int conns_start(int max_per_addr, int head_s, int idle_s);
/* Stop the reaper (after libmicrohttpd's stop: no connection is left). */
void conns_stop(void);

/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback. */
void conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
		  enum MHD_ConnectionNotificationCode code);
/* C's request line arrived (libmicrohttpd's URI callback): its head is
 * owed within HEAD_S. */
void conns_request_line(struct MHD_Connection *c);
/* C's request head is complete (the access handler's first call): no
 * deadline while it is answered. */
void conns_head(struct MHD_Connection *c);
/* C's request was answered (the completion callback): its next request
 * line is owed within IDLE_S, unless C was upgraded. */
void conns_done(struct MHD_Connection *c);
/* C was upgraded (a WebSocket's 101 went): the reaper leaves it alone. */
void conns_upgraded(struct MHD_Connection *c);
/* Where a module keeps its own pointer for C's life (previews': their kept
 * guest connection), or NULL for a connection this module does not know. */
void **conns_slot(struct MHD_Connection *c);

#endif
