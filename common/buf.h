/* A growable, always NUL-terminated byte buffer. */
#ifndef BERTH_BUF_H
#define BERTH_BUF_H

#include <stddef.h>

struct buf {
	char *data;   /* NULL until the first append; then NUL-terminated */
	size_t len;
	size_t cap;
};

#define BUF_INIT { NULL, 0, 0 }

/* Append; abort() on allocation failure (a daemon that cannot allocate a
 * few bytes cannot report anything either). */
void buf_add(struct buf *b, const void *data, size_t len);
/* Make room for EXTRA more bytes at once (a large reply's one allocation). */
void buf_reserve(struct buf *b, size_t extra);
void buf_adds(struct buf *b, const char *s);
void buf_printf(struct buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Append S with XML's five special characters escaped. */
void buf_add_xml(struct buf *b, const char *s);
/* Append S as a JSON string (quoted, escaped); bytes that are not UTF-8
 * become U+FFFD, so the result is always valid JSON. */
void buf_add_json_str(struct buf *b, const char *s);
/* Append S quoted for a POSIX shell (for logs and dry-run records only:
 * berth never runs a shell on it). */
void buf_add_shquoted(struct buf *b, const char *s);
/* Append LEN bytes of DATA as base64 (RFC 4648, padded, no line breaks). */
void buf_add_base64(struct buf *b, const void *data, size_t len);
/* Append the bytes that the base64 text S (LEN characters; padded or not,
 * no whitespace) stands for.  0, or -1 (nothing appended) when S is not
 * base64. */
int buf_add_unbase64(struct buf *b, const char *s, size_t len);
/* Return the contents ("" when empty); the buffer keeps ownership. */
const char *buf_str(const struct buf *b);
/* Hand the contents to the caller (free() it); the buffer is emptied. */
char *buf_detach(struct buf *b);
void buf_reset(struct buf *b);
void buf_free(struct buf *b);

#endif
