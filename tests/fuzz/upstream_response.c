/*
 * Fuzz harness: a preview's guest's answer as berth-web reads it
 * (web/upstream.c, called by web/preview.c respond and body_read): heads
 * parsed as they arrive in pieces (1xx skipped, as berth-web does), then the
 * body decoded by its framing.  The input's first byte chooses the size of
 * the pieces (1 to 128 bytes, or all at once) and whether the request was
 * a HEAD; the rest is what the guest sent.  Checked beyond the sanitizers:
 * a head is found at the same place whatever the pieces, the body's bytes
 * decode the same fed in pieces and at once, none comes from outside the
 * input, and a Content-Length body yields at most its length.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "web/upstream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The body of IN[0, LEN) decoded by H's framing in pieces of STEP: its
 * bytes into OUT (at most LEN), *N of them; the last result. */
static int decode(const struct upstream_head *h, const char *in, size_t len, size_t step,
		  char *out, size_t *n)
{
	struct upstream_body b;
	size_t pos = 0;
	int rc = 0;
	char why[128];

	*n = 0;
	upstream_body_init(&b, h);
	while (pos < len && rc == 0) {
		size_t piece = len - pos < step ? len - pos : step, used, dlen;
		const char *d;
		rc = upstream_body_step(&b, in + pos, piece, &used, &d, &dlen, why, sizeof(why));
		if (rc < 0)
			break;
		if (used > piece || (dlen && (d < in + pos || d + dlen > in + pos + used)))
			abort();        /* bytes from outside what it was given */
		if (dlen)
			memcpy(out + *n, d, dlen);
		*n += dlen;
		pos += used;
		if (rc == 0 && used == 0 && !dlen)
			break;          /* no progress: must not happen */
	}
	if (rc == 0 && pos == len)
		upstream_body_eof(&b);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct upstream_head h = { 0 };
	size_t step, off = 0, len, n1 = 0, n2 = 0;
	const char *in;
	char why[160], *out1, *out2;
	bool head_req;
	ssize_t hl = 0;

	if (size < 1)
		return 0;
	step = (data[0] & 0x7f) + 1;
	head_req = data[0] & 0x80;
	in = (const char *)data + 1;
	len = size - 1;
	if (len > 4 * UPSTREAM_HEAD_MAX)
		len = 4 * UPSTREAM_HEAD_MAX;
	/* Heads, as they arrive: the parse of a prefix gives 0 until the
	 * whole head is there, then the same as all at once. */
	for (;;) {
		size_t avail = len - off, have;
		ssize_t whole = upstream_head_parse(in + off, avail, head_req, &h, why, sizeof(why));
		upstream_head_free(&h);
		for (have = step < avail ? step : avail; have < avail; have += step) {
			ssize_t part = upstream_head_parse(in + off, have, head_req, &h, why,
							   sizeof(why));
			upstream_head_free(&h);
			if (part != 0 && part != whole)
				abort();
			if (part != 0)
				break;
		}
		hl = upstream_head_parse(in + off, avail, head_req, &h, why, sizeof(why));
		if (hl <= 0)
			return 0;
		off += (size_t)hl;
		for (size_t i = 0; i < h.n; i++) {
			upstream_hop_by_hop(&h, h.name[i]);
			upstream_head_get(&h, h.name[i]);
		}
		upstream_head_has_token(&h, "Connection", "upgrade");
		if (h.status >= 200 || h.status == 101)
			break;
		upstream_head_free(&h);
	}
	out1 = malloc(len - off + 1);
	out2 = malloc(len - off + 1);
	if (!out1 || !out2)
		abort();
	int rc1 = decode(&h, in + off, len - off, step, out1, &n1);
	int rc2 = decode(&h, in + off, len - off, len - off + 1, out2, &n2);
	if (rc1 != rc2 || n1 != n2 || memcmp(out1, out2, n1) != 0)
		abort();        /* pieces must not change what is decoded */
	if (h.framing == UPSTREAM_LENGTH && n1 > h.length)
		abort();
	if (h.framing == UPSTREAM_NONE && n1)
		abort();
	free(out1);
	free(out2);
	upstream_head_free(&h);
	return 0;
}
