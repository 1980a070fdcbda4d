/*
 * Fuzz harness: the SPICE agent stream berth-desktop reads from a guest's
 * com.redhat.spice.0 port (desktop/vdagent.c vdagent_feed), the guest
 * being untrusted.  The input's first byte sets how the rest is cut into
 * reads (1 to 256 bytes each, as a socket may return them); the host
 * offers its clipboard before and halfway, as a viewer would.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/buf.h"
#include "common/log.h"
#include "desktop/vdagent.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The bridge logs each stream out of step at info: a million lines a
 * second here.  Errors only (what is below is then not formatted). */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	log_threshold = LOG_ERROR;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vdagent *a;
	struct buf out = BUF_INIT;
	char err[256];
	size_t step, i = 1, len;

	if (size < 1)
		return 0;
	a = vdagent_new();
	if (!a)
		return 0;
	step = (size_t)data[0] + 1;
	vdagent_hello(a, &out);
	vdagent_offer(a, "host text", 9, &out);
	while (i < size) {
		size_t n = size - i < step ? size - i : step;
		char *text = NULL;
		size_t textlen = 0;
		int rc = vdagent_feed(a, data + i, n, &out, &text, &textlen, err, sizeof(err));
		free(text);
		if (rc < 0)
			break;
		if (i < size / 2 && i + n >= size / 2)
			vdagent_offer(a, "\xc3\xa9t\xc3\xa9", 6, &out);
		i += n;
		/* The bridge writes OUT to the guest and empties it. */
		buf_free(&out);
	}
	vdagent_host_text(a, &len);
	vdagent_ready(a);
	buf_free(&out);
	vdagent_free(a);
	return 0;
}
