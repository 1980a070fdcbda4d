/* berth-web's own answers (not hostd's, which web/proxy.c passes on). */
#ifndef BERTH_WEB_REPLY_H
#define BERTH_WEB_REPLY_H

#include <microhttpd.h>

/* Queue STATUS with the JSON body {"error": {"code": CODE, "message":
 * MSG}}, as hostd's errors read, never cached.  What MHD_queue_response
 * returns (MHD_NO: the connection is closed). */
enum MHD_Result web_error(struct MHD_Connection *c, unsigned status, const char *code,
			  const char *msg);

#endif
