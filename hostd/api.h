/* hostd's JSON API over HTTP/1.1 on a UNIX socket (libmicrohttpd, one
 * thread per connection).  Routes and bodies are documented in
 * docs/api.md. */
#ifndef BERTH_API_H
#define BERTH_API_H

#include "hostd/hostd.h"

struct api;

/* Listen on the UNIX socket PATH (refusing when another hostd answers
 * there).  NULL with E set. */
struct api *api_start(struct hostd *h, const char *path, struct err *e);
void api_stop(struct api *a);

#endif
