/* Closing an upgraded connection (a WebSocket: exec/ws's sessions, a
 * preview's splices) without racing libmicrohttpd 0.9.75's cleanup.
 *
 * MHD_upgrade_action(CLOSE) there marks the connection closed
 * (urh->was_closed) and only then takes the daemon's lock to ask for its
 * cleanup (MHD_resume_connection), writing into the connection.  In that
 * gap the daemon's thread, woken by any other connection's resume, may
 * already find it closed, join its thread and free it: the write lands in
 * freed memory.  Seen as "corrupted size vs. prev_size" and SIGSEGV in
 * malloc when a few hundred exec/ws sessions ended at once (t460);
 * libmicrohttpd 1.0.0 sets the mark under the lock (its commit 3eb2fb6d,
 * "Fixed very rare data races when closing upgraded connection").
 *
 * So every close goes through web_upgrade_close, under a lock of ours,
 * and the daemon's notice that a connection is about to be freed
 * (MHD_OPTION_NOTIFY_CONNECTION, MHD_CONNECTION_NOTIFY_CLOSED, called on
 * its thread between the join and the free, without its own lock held)
 * waits for that lock: no connection is freed while a close is inside
 * libmicrohttpd. */
#ifndef BERTH_WEB_UPGRADE_H
#define BERTH_WEB_UPGRADE_H

#include <microhttpd.h>

/* MHD_upgrade_action(URH, MHD_UPGRADE_ACTION_CLOSE), under the lock.  What
 * it returns. */
enum MHD_Result web_upgrade_close(struct MHD_UpgradeResponseHandle *urh);
/* Returns once no web_upgrade_close is running: call it from the
 * NOTIFY_CONNECTION callback when a connection is closed (CLOSED). */
void web_upgrade_wait_closes(void);

#endif
