/* A client of berth-hostd's JSON API over its UNIX socket (libcurl), for the
 * CLI and the gateways: JSON in, JSON out, one HTTP request per call.  (The
 * gateways never open libvirt: this is how they ask hostd.)
 *
 * SOCK is hostd's socket, or, where it begins with http:// or https://,
 * berth-web's base URL ("https://host:8080"): the same routes over HTTP,
 * where a call acts as the user of the bearer token the *_as functions
 * send (TLS verified against the system's CAs). */
#ifndef BERTH_HOSTAPI_H
#define BERTH_HOSTAPI_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether AT is a URL (berth-web's) rather than a socket's path. */
bool hostapi_is_url(const char *at);

/* METHOD PATH with BODY (NULL: none; not consumed) to the hostd listening on
 * SOCK.  Sets *STATUS to the HTTP status and *RESP to the JSON body (NULL
 * when there is none; the caller decrefs).  Returns 0, or -1 when hostd
 * could not be reached, with ERR (ERRLEN bytes) saying why. */
int hostapi_call(const char *sock, const char *method, const char *path, json_t *body,
		 long *status, json_t **resp, char *err, size_t errlen);

/* hostapi_call with a bearer TOKEN (NULL: none), as hostapi_send_as. */
int hostapi_call_as(const char *sock, const char *token, const char *method, const char *path,
		    json_t *body, long *status, json_t **resp, char *err, size_t errlen);

/* METHOD PATH with the LEN bytes of DATA as the body, of Content-Type TYPE
 * (NULL: no body).  Otherwise as hostapi_call. */
int hostapi_send(const char *sock, const char *method, const char *path, const void *data,
		 size_t len, const char *type, long *status, json_t **resp, char *err,
		 size_t errlen);
/* hostapi_send, with "Authorization: Bearer TOKEN" when TOKEN is not
 * NULL: on berth-web's socket (STATE/web.sock) hostd acts as the token's
 * user (berth-web's own requests for a user). */
int hostapi_send_as(const char *sock, const char *token, const char *method, const char *path,
		    const void *data, size_t len, const char *type, long *status, json_t **resp,
		    char *err, size_t errlen);
/* Called with each piece of a 2xx body as it arrives: 0, or -1 to end the
 * transfer. */
typedef int (*hostapi_sink_fn)(const char *p, size_t len, void *data);
/* METHOD PATH with BODY (JSON; NULL: none); a 2xx body goes to SINK (with
 * DATA) as it arrives, any other is parsed into *RESP.  Returns -1 with
 * ERR also when the transfer breaks off or SINK ended it. */
int hostapi_stream(const char *sock, const char *method, const char *path, json_t *body,
		   hostapi_sink_fn sink, void *data, long *status, json_t **resp, char *err,
		   size_t errlen);
/* hostapi_stream with a bearer TOKEN (NULL: none), as hostapi_send_as. */
int hostapi_stream_as(const char *sock, const char *token, const char *method,
		      const char *path, json_t *body, hostapi_sink_fn sink, void *data,
		      long *status, json_t **resp, char *err, size_t errlen);
/* Asked about once a second while a transfer runs (more often while
 * bytes move): true ends it. */
typedef bool (*hostapi_until_fn)(void *data);
/* hostapi_stream_as, ended early (-1, ERR "... was ended") as soon as
 * UNTIL(UNTIL_DATA) is true (UNTIL NULL: never): a long command whose
 * client went does not hold the caller for as long as it runs. */
int hostapi_stream_until_as(const char *sock, const char *token, const char *method,
			    const char *path, json_t *body, hostapi_sink_fn sink, void *data,
			    hostapi_until_fn until, void *until_data, long *status,
			    json_t **resp, char *err, size_t errlen);
/* Called as bytes move: DONE so far of TOTAL (0 when unknown). */
typedef void (*hostapi_progress_fn)(uint64_t done, uint64_t total, void *data);

/* METHOD PATH with the SIZE bytes read from FD as the body, streamed.
 * Otherwise as hostapi_call. */
int hostapi_upload(const char *sock, const char *method, const char *path, int fd,
		   uint64_t size, hostapi_progress_fn fn, void *data, long *status,
		   json_t **resp, char *err, size_t errlen);
int hostapi_upload_as(const char *sock, const char *token, const char *method,
		      const char *path, int fd, uint64_t size, hostapi_progress_fn fn, void *data,
		      long *status, json_t **resp, char *err, size_t errlen);

/* GET PATH; a 2xx body is written to FD as it arrives, any other body is
 * parsed into *RESP.  Returns -1 with ERR also when the transfer breaks
 * off (hostd ends a failed stream early). */
int hostapi_download(const char *sock, const char *path, int fd, hostapi_progress_fn fn,
		     void *data, long *status, json_t **resp, char *err, size_t errlen);
int hostapi_download_as(const char *sock, const char *token, const char *path, int fd,
			hostapi_progress_fn fn, void *data, long *status, json_t **resp,
			char *err, size_t errlen);

/* S escaped for a URL's query (malloc'd). */
char *hostapi_escape(const char *s);

/* The "message" of an error answer RESP, or FALLBACK. */
const char *hostapi_message(json_t *resp, const char *fallback);

#endif
