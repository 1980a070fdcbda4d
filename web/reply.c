#include "web/reply.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/banned.h"

enum MHD_Result web_error(struct MHD_Connection *c, unsigned status, const char *code,
			  const char *msg)
{
	json_t *j = json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	struct MHD_Response *r;
	enum MHD_Result ret;

	json_decref(j);
	if (!text)
		return MHD_NO;
	r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", "application/json");
	MHD_add_response_header(r, "Cache-Control", "no-store");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}
