/* An HTTP/1.1 response from a server berth-web does not trust (a preview's
 * guest): its head parsed with every size bounded and its body's framing
 * decoded, or refused as malformed.  Pure: bytes in, results out, no I/O
 * (web/preview.c reads the socket), so a fuzzer drives it
 * (tests/fuzz/upstream_response.c).
 *
 * What is refused: a head over UPSTREAM_HEAD_MAX bytes, over
 * UPSTREAM_HEADERS_MAX header lines or with a line over UPSTREAM_LINE_MAX;
 * a line that does not end in CRLF; a status line that is not "HTTP/1.0"
 * or "HTTP/1.1", a three-digit status and a reason; obsolete line folding;
 * a header name that is not a token, whitespace before its colon, a
 * control character in a value; framing that is not one thing (both
 * Content-Length and Transfer-Encoding, two Transfer-Encoding lines, a
 * coding but "chunked", Content-Lengths that disagree or are not a
 * number); in a chunked body, a size line that is not hex digits (at most
 * 16) with an optional extension, data not followed by CRLF, trailers over
 * the same bounds as the head. */
#ifndef BERTH_WEB_UPSTREAM_H
#define BERTH_WEB_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define UPSTREAM_HEAD_MAX (64 << 10)
#define UPSTREAM_HEADERS_MAX 100
#define UPSTREAM_LINE_MAX (8 << 10)

/* How a body ends. */
enum upstream_framing {
	UPSTREAM_NONE,      /* no body: 1xx, 204, 304, or the answer to HEAD */
	UPSTREAM_LENGTH,    /* Content-Length bytes */
	UPSTREAM_CHUNKED,   /* chunked */
	UPSTREAM_CLOSE,     /* until the server closes */
};

/* A response head.  Names and values point into TEXT (the caller's until
 * upstream_head_free); values are trimmed of surrounding whitespace. */
struct upstream_head {
	int status;
	int minor;                      /* HTTP/1.MINOR: 0 or 1 */
	char *text;
	size_t n;
	char *name[UPSTREAM_HEADERS_MAX];
	char *value[UPSTREAM_HEADERS_MAX];
	enum upstream_framing framing;
	uint64_t length;                /* UPSTREAM_LENGTH's */
	bool keep_alive;                /* the connection may carry another request */
};

/* Parse the head at BUF[0, LEN), the answer to a HEAD request when
 * HEAD_REQUEST.  Returns the head's length (through its blank line) with
 * *H filled; 0 when it is not all there yet (read more: LEN is within
 * bounds); -1 when it is malformed or too large, with WHY (WHYLEN bytes)
 * saying what. */
ssize_t upstream_head_parse(const char *buf, size_t len, bool head_request,
			    struct upstream_head *h, char *why, size_t whylen);
/* Free what upstream_head_parse allocated; H may be zeroed or NULL. */
void upstream_head_free(struct upstream_head *h);
/* The value of header NAME (case-blind; the first of several), or NULL. */
const char *upstream_head_get(const struct upstream_head *h, const char *name);
/* Whether the comma-separated values of header NAME hold TOKEN (case-blind):
 * "Connection: keep-alive, Upgrade" holds "upgrade". */
bool upstream_head_has_token(const struct upstream_head *h, const char *name,
			     const char *token);
/* Whether the comma-separated LIST (a header's value; NULL: none) holds
 * TOKEN, case-blind. */
bool upstream_list_has(const char *list, const char *token);
/* Whether header NAME is hop-by-hop in this response: one of HTTP's
 * (Connection, Keep-Alive, Proxy-Connection, TE, Trailer,
 * Transfer-Encoding, Upgrade, Proxy-Authenticate) or one its Connection
 * header names.  H may be NULL (the fixed list only). */
bool upstream_hop_by_hop(const struct upstream_head *h, const char *name);

/* A body being decoded. */
struct upstream_body {
	enum upstream_framing framing;
	uint64_t left;         /* LENGTH: bytes to come; CHUNKED: of this chunk */
	int state;             /* CHUNKED: where in the framing (upstream.c) */
	int digits;            /* CHUNKED: the size line's hex digits so far */
	size_t line;           /* CHUNKED: bytes of the current line so far */
	size_t trailer;        /* CHUNKED: trailer bytes so far */
	int trailers;          /* CHUNKED: trailer lines so far */
	bool done;
};

/* Start decoding the body H announces. */
void upstream_body_init(struct upstream_body *b, const struct upstream_head *h);
/* Decode from IN[0, INLEN): *USED bytes are consumed, and *OUT, *OUTLEN
 * (pointing into IN; *OUTLEN 0 when none) are the body's bytes among them.
 * Returns 0 (call again with what is left, or more), 1 when the body has
 * ended (bytes after it are not consumed), -1 when it is malformed (WHY). */
int upstream_body_step(struct upstream_body *b, const char *in, size_t inlen, size_t *used,
		       const char **out, size_t *outlen, char *why, size_t whylen);
/* The server closed: 1 when that ends the body (UPSTREAM_CLOSE, or a body
 * that had ended), -1 when it was cut short. */
int upstream_body_eof(const struct upstream_body *b);

#endif
