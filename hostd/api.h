/* hostd's JSON API over HTTP/1.1 on a UNIX socket (libmicrohttpd, one
 * thread per connection).  Routes and bodies are documented in
 * docs/api.md. */
#ifndef BERTH_API_H
#define BERTH_API_H

#include <jansson.h>

#include "common/buf.h"
#include "hostd/hostd.h"

struct api;

/* Listen on the UNIX socket PATH (refusing when another hostd answers
 * there).  NULL with E set. */
struct api *api_start(struct hostd *h, const char *path, struct err *e);
void api_stop(struct api *a);

/* Request bodies (exposed for the unit tests).  api_parse_body parses BODY
 * as a JSON object ({} when empty) and refuses keys not in the
 * NULL-terminated ALLOWED (400 "unknown_field"), malformed JSON (400
 * "invalid_json", with line and column) and non-objects.  Returns a new
 * reference or NULL with E set. */
json_t *api_parse_body(const struct buf *body, const char *const *allowed,
		       struct err *e);
/* Size field KEY of J: a positive JSON integer (bytes) or a string such as
 * "512M" (a bare number in a string counts in UNIT bytes).  *OUT = 0 when
 * absent; 400 "invalid_KEY" when malformed. */
int api_get_size(json_t *j, const char *key, uint64_t unit, uint64_t *out,
		 struct err *e);

#endif
