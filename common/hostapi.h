/* A client of berth-hostd's JSON API over its UNIX socket (libcurl), for the
 * CLI and the gateways: JSON in, JSON out, one HTTP request per call.  (The
 * gateways never open libvirt: this is how they ask hostd.) */
#ifndef BERTH_HOSTAPI_H
#define BERTH_HOSTAPI_H

#include <jansson.h>
#include <stddef.h>

/* METHOD PATH with BODY (NULL: none; not consumed) to the hostd listening on
 * SOCK.  Sets *STATUS to the HTTP status and *RESP to the JSON body (NULL
 * when there is none; the caller decrefs).  Returns 0, or -1 when hostd
 * could not be reached, with ERR (ERRLEN bytes) saying why. */
int hostapi_call(const char *sock, const char *method, const char *path, json_t *body,
		 long *status, json_t **resp, char *err, size_t errlen);

/* The "message" of an error answer RESP, or FALLBACK. */
const char *hostapi_message(json_t *resp, const char *fallback);

#endif
