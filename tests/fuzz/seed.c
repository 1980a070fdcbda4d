/*
 * Fuzz harness: the values hostd puts into a machine's cloud-init seed
 * (hostd/seed.c seed_render): the hostname (the machine's name), instance
 * id, the image's default user, the users' public keys and the host key,
 * each of which comes from outside (a request, an image's recipe, a
 * user's key).  The input is those fields separated by NUL bytes:
 * hostname, instance id, user, host key private, host key public, then
 * the keys; an empty host key private field means none.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "hostd/seed.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FIELDS 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	const char *f[FIELDS + 1] = { 0 };
	size_t n = 0;
	struct buf meta = BUF_INIT, user = BUF_INIT;
	struct err e = { 0 };

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	/* Fields 0..FIELDS-1 at each NUL; the rest stays in the last. */
	for (char *p = s; n < FIELDS;) {
		f[n++] = p;
		size_t l = strlen(p);
		if (p + l >= s + size)
			break;
		p += l + 1;
	}
	struct seed sd = {
		.hostname = f[0] ? f[0] : "",
		.instance_id = f[1] ? f[1] : "",
		.user = f[2] ? f[2] : "",
		.host_key_private = f[3] && *f[3] ? f[3] : NULL,
		.host_key_public = f[4],
		.keys = n > 5 ? f + 5 : NULL,
	};
	seed_render(&sd, &meta, &user, &e);
	buf_free(&meta);
	buf_free(&user);
	free(s);
	return 0;
}
