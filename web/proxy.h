/* berth-web's /v1: each request goes to berth-hostd over STATE/web.sock,
 * where hostd acts as the user of the request's bearer token (berth-web
 * decides nothing of who calls).  One connection to hostd per request
 * (Connection: close), HTTP/1.1 both ways:
 *
 *   - the head berth-web sends is made anew, not copied: the method, the
 *     request target as the client sent it (path and query, still
 *     percent-encoded), and of the client's headers only Authorization,
 *     Content-Type, Accept and X-Berth-User (which hostd refuses over
 *     HTTP, as before); X-Forwarded-For is the client's address;
 *   - a body streams as it arrives, with the client's Content-Length or
 *     chunked (what libmicrohttpd decoded, encoded again), after hostd's
 *     "100 Continue": hostd refuses a request at its head (no token, no
 *     such route, a quota), and that answer then goes to the client before
 *     any of its body is read;
 *   - hostd's answer streams back as it comes (exec's NDJSON line by line,
 *     a file as it is read): its status, its headers but the hop-by-hop
 *     ones, its body (Content-Length kept; chunked and close-delimited
 *     bodies are decoded and libmicrohttpd frames them for the client),
 *     read by web/upstream.h, the reader of previews' guests' answers.
 *     A client that goes (found when a write to it fails: at the latest
 *     at the next line of a stream, hostd's keepalives included) closes
 *     hostd's connection, which ends what hostd was doing for it (a
 *     command is killed, an upload's temporary file removed).  One that
 *     only shut down its sending side after its request still gets the
 *     answer.
 *
 * The functions run on the client connection's thread (libmicrohttpd,
 * thread per connection) and block on hostd. */
#ifndef BERTH_WEB_PROXY_H
#define BERTH_WEB_PROXY_H

#include <microhttpd.h>
#include <stddef.h>

struct proxy_req;

/* libmicrohttpd's access handler for a /v1 request: called with its head
 * (*STATE NULL: a request is made and kept in *STATE), with each piece of
 * its body, and once more at its end (*UPLOAD_DATA_SIZE 0), as
 * libmicrohttpd calls an access handler.  SOCK: hostd's web.sock.  TARGET:
 * the request target as received (path and query).  PEER: the client's
 * address, for X-Forwarded-For. */
enum MHD_Result proxy_handle(const char *sock, struct MHD_Connection *c, const char *method,
			     const char *target, const char *peer, const char *upload_data,
			     size_t *upload_data_size, struct proxy_req **state);

/* The request is over (libmicrohttpd's completion callback): hostd's
 * connection is closed and R freed.  NULL is fine. */
void proxy_done(struct proxy_req *r);

/* berth-web stops: every request's connection to hostd is shut down, so
 * that streams end and libmicrohttpd's stop does not wait for them; new
 * ones get 503. */
void proxy_stop_all(void);

#endif
