/* multipart/form-data (RFC 7578) as E2B's SDK uploads files (POST /files
 * on the envd host, web/envd.c): a pure parser of a body already in
 * memory, bounded, for bytes from the network before anything is written.
 *
 * Each part: a header block (at most MULTIPART_HEAD_MAX bytes, lines ending
 * in CRLF) of which Content-Disposition counts (form-data; name="N";
 * filename="F", quoted or token values, no control characters), then its
 * bytes up to CRLF "--" BOUNDARY.  The body ends at "--" BOUNDARY "--";
 * a preamble before the first delimiter and an epilogue after the last are
 * ignored (RFC 2046). */
#ifndef BERTH_WEB_MULTIPART_H
#define BERTH_WEB_MULTIPART_H

#include <stddef.h>

#define MULTIPART_BOUNDARY_MAX 70    /* RFC 2046 */
#define MULTIPART_HEAD_MAX 8192
#define MULTIPART_VALUE_MAX 4096     /* a name's or filename's length */

/* A part: pointers into the body, except NAME and FILENAME, copied and
 * NUL-terminated ("" when absent). */
struct multipart_part {
	char name[256];
	char filename[MULTIPART_VALUE_MAX + 1];
	const char *data;
	size_t len;
};

/* The boundary of a Content-Type header CT ("multipart/form-data;
 * boundary=X", X quoted or not, 1 to 70 characters) into OUT (71 bytes at
 * least).  0, or -1 when CT is not multipart/form-data with a boundary. */
int multipart_boundary(const char *ct, char *out, size_t outlen);

/* The parts of the LEN bytes of BODY with BOUNDARY into PARTS (MAX at
 * most).  The count, or -1 with WHY (a malformed body, more than MAX
 * parts, a header block or value too long). */
int multipart_parse(const char *body, size_t len, const char *boundary,
		    struct multipart_part *parts, int max, char *why, size_t whylen);

#endif
