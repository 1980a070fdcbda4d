/* The checks of a client's request head that berth-web makes before any of
 * it goes on: to hostd (/v1, web/proxy.c), to a preview's guest
 * (web/preview.c) and to the broker's upstream (web/broker.c).  Each of
 * them makes its head anew from libmicrohttpd's parsed headers and frames
 * the body itself, so what libmicrohttpd takes but another server would
 * read otherwise must not pass:
 *
 *   - libmicrohttpd 0.9.75 reads a body whose Transfer-Encoding is anything
 *     but "chunked" (gzip, say) until the connection closes, and ignores a
 *     Content-Length beside it: berth-web then told the next server
 *     "Content-Length: N" (or nothing) and sent it every byte, a second
 *     request of the client's own included, past berth-web's rewriting;
 *   - it keeps whitespace before a header's colon as part of the name
 *     ("X-Forwarded-For : 1.2.3.4" is not "X-Forwarded-For" to a lookup,
 *     so no drop list caught it, but a server that trims it reads it as
 *     that header), and a bare CR inside a name.
 *
 * So: 400 for a Transfer-Encoding other than exactly "chunked" (any case),
 * for both Transfer-Encoding and Content-Length, for either twice, for a
 * Content-Length that is not a number, for a method or a header name that
 * is not an RFC 9110 token, for a header value with CR, LF or NUL.  The
 * callers also pass no more body than the length checked here. */
#ifndef BERTH_WEB_REQUEST_H
#define BERTH_WEB_REQUEST_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How the request's body is framed, once checked. */
struct web_framing {
	bool has_body;      /* a body follows: chunked, or a Content-Length above 0 */
	bool chunked;       /* Transfer-Encoding: chunked (libmicrohttpd decodes it) */
	uint64_t length;    /* the Content-Length (0 when chunked or none) */
};

/* True when the LEN bytes of S are an RFC 9110 token (1 or more tchar). */
bool web_token_ok(const char *s, size_t len);
/* True when the LEN bytes of V hold no CR, LF or NUL. */
bool web_value_ok(const char *v, size_t len);
/* The framing of a request whose Transfer-Encoding is TE and whose
 * Content-Length is CL (each NULL when absent), into *F: 0, or 400 with
 * WHY (F cleared). */
int web_framing_parse(const char *te, const char *cl, struct web_framing *f, char *why,
		      size_t whylen);

/* The checks above on C's request (METHOD, every header, the framing),
 * into *F: 0, or 400 with WHY (what is wrong, for the client; F
 * cleared).  Call it at the head, before anything goes on: a refusal
 * queued then makes libmicrohttpd close the connection rather than read
 * the body as a next request. */
int web_request_check(struct MHD_Connection *c, const char *method, struct web_framing *f,
		      char *why, size_t whylen);

/* Writes LEN bytes of DATA on (CTX: the caller's request): 0, or -1. */
typedef int web_write_fn(void *ctx, const void *data, size_t len);
/* LEN bytes of a request's body as libmicrohttpd gives them (decoded)
 * passed on by WRITE: a chunk of their own when CHUNKED, else no further
 * than the *LEFT bytes the next server was told (the framing checked).
 * 0, or -1 when a write failed. */
int web_body_pass(bool chunked, uint64_t *left, const char *data, size_t len,
		  web_write_fn *write, void *ctx);
/* The end of a body passed on: the last chunk when CHUNKED.  0, or -1. */
int web_body_end(bool chunked, web_write_fn *write, void *ctx);

#endif
