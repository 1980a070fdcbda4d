/* hostd's JSON API over HTTP/1.1 on a UNIX socket (libmicrohttpd, one
 * thread per connection).  Routes and bodies are documented in
 * docs/api.md. */
#ifndef BERTH_API_H
#define BERTH_API_H

#include <jansson.h>
#include <microhttpd.h>

#include "common/buf.h"
#include "hostd/hostd.h"

struct api;

/* Listen on the UNIX socket PATH (refusing when another hostd answers
 * there).  NULL with E set. */
struct api *api_start(struct hostd *h, const char *path, struct err *e);
void api_stop(struct api *a);

/* The HTTP listener's side of the API (hostd/http.c owns the daemon): an
 * api whose callers are identified by their bearer token instead of their
 * UNIX credentials, never with root's privileges, without the gateway
 * routes.  api_handler and api_completed are its libmicrohttpd access
 * handler and completion callback (cls: the api). */
struct api *api_http_new(struct hostd *h);
void api_http_free(struct api *a);
enum MHD_Result api_handler(void *cls, struct MHD_Connection *c, const char *url,
			    const char *method, const char *version,
			    const char *upload_data, size_t *upload_data_size,
			    void **con_cls);
void api_completed(void *cls, struct MHD_Connection *c, void **con_cls,
		   enum MHD_RequestTerminationCode toe);

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
