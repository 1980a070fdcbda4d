/*
 * Fuzz harness: a machine's egress policy as a user writes it (PATCH
 * /v1/machines/NAME {"egress"}, `berth set --egress`, berth.conf's
 * egress_default): hostd/egress.c egress_parse, egress_format, and
 * egress_name_allowed for a few names.  The canonical text must parse
 * back to itself: a policy hostd stores and reads again is the one it
 * checked (abort() otherwise, which the fuzzer reports).  The input is the
 * spec (a NUL ends it).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "hostd/egress.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct egress p, q;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *spec = malloc(size + 1);
	struct buf a = BUF_INIT, b = BUF_INIT;
	struct err e = { 0 };
	uint16_t lo, hi;

	if (!spec)
		return 0;
	memcpy(spec, data, size);
	spec[size] = '\0';
	if (egress_parse(spec, &p, &e) == 0) {
		egress_format(&p, &a);
		if (egress_parse(buf_str(&a), &q, &e) < 0) {
			fprintf(stderr, "canonical text '%s' does not parse: %s\n", buf_str(&a),
				e.msg);
			abort();
		}
		egress_format(&q, &b);
		if (strcmp(buf_str(&a), buf_str(&b)) != 0) {
			fprintf(stderr, "canonical text '%s' parses back as '%s'\n", buf_str(&a),
				buf_str(&b));
			abort();
		}
		egress_name_allowed(&p, "github.com", &lo, &hi);
		egress_name_allowed(&p, "api.github.com", &lo, &hi);
		egress_name_allowed(&p, spec, &lo, &hi);
	}
	buf_free(&a);
	buf_free(&b);
	free(spec);
	return 0;
}
