/*
 * Fuzz harness: the multipart/form-data bodies of POST /files on an envd
 * host (web/multipart.c multipart_parse; anyone who reaches berth-web's
 * port sends them, though berth-web parses them only after the token was
 * checked).  The input's first byte sets the number of parts allowed (1 to
 * 64); the bytes up to the first newline after it are the Content-Type
 * header's boundary parameter, tried through multipart_boundary as
 * "multipart/form-data; boundary=..." and, when it fails, used as the
 * boundary itself; the rest is the body.  Each part found must lie within
 * the body, its name and filename NUL-terminated within their arrays.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "web/multipart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct multipart_part parts[64];
	char ct[200], boundary[MULTIPART_BOUNDARY_MAX + 1], why[256];
	const char *nl;
	size_t hl;
	int max, n;

	if (size < 2)
		return 0;
	max = data[0] % 64 + 1;
	data++;
	size--;
	nl = memchr(data, '\n', size < 120 ? size : 120);
	if (!nl)
		return 0;
	hl = (size_t)(nl - (const char *)data);
	snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%.*s", (int)hl, (const char *)data);
	if (memchr(data, '\0', hl))
		return 0;
	if (multipart_boundary(ct, boundary, sizeof(boundary)) < 0)
		snprintf(boundary, sizeof(boundary), "%.*s", (int)(hl < MULTIPART_BOUNDARY_MAX ? hl : MULTIPART_BOUNDARY_MAX), (const char *)data);
	const char *body = nl + 1;
	size_t len = size - hl - 1;
	/* A copy of its own: a read past the end is ASan's to see. */
	char *copy = malloc(len ? len : 1);
	if (!copy)
		abort();
	memcpy(copy, body, len);
	n = multipart_parse(copy, len, boundary, parts, max, why, sizeof(why));
	if (n > max)
		abort();
	for (int i = 0; i < n; i++) {
		if (parts[i].data < copy || parts[i].data + parts[i].len > copy + len)
			abort();
		if (!memchr(parts[i].name, '\0', sizeof(parts[i].name)) ||
		    !memchr(parts[i].filename, '\0', sizeof(parts[i].filename)))
			abort();
	}
	if (n < 0 && !why[0])
		abort();
	free(copy);
	return 0;
}
