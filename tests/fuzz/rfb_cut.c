/*
 * Fuzz harness: what berth-desktop does with the clipboard text a viewer
 * sends (RFB ClientCutText; libvncserver decodes the message and calls
 * desktop/screen.c's v_cut with ISO 8859-1, or v_cut_utf8 with the
 * extended clipboard's UTF-8): vdagent_latin1_to_utf8, then vdagent_offer
 * to an agent that announced itself, whose REQUEST then gets the text cut
 * into chunks; and the way back (a guest's UTF-8 to a viewer's Latin-1,
 * agent_to_viewers): vdagent_utf8_to_latin1.  The input's first byte
 * chooses Latin-1 (even) or UTF-8 (odd); the rest is the text.  Only this
 * is berth's: the RFB framing itself is libvncserver's, a system library.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

/* A guest message in one chunk on port 1 (as spice-vdagentd sends it). */
static void guest_msg(unsigned char *m, uint32_t type, uint32_t v0, uint32_t v1, int words)
{
	memset(m, 0, 36);
	put32(m, 1);
	put32(m + 4, 20 + 4 * (uint32_t)words);
	put32(m + 8, 1);
	put32(m + 12, type);
	put32(m + 24, 4 * (uint32_t)words);
	put32(m + 28, v0);
	put32(m + 32, v1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vdagent *a;
	struct buf out = BUF_INIT;
	unsigned char msg[36];
	char err[256], *text = NULL, *u, *l;
	size_t ulen, llen, textlen;

	if (size < 1)
		return 0;
	const char *s = (const char *)data + 1;
	size_t len = size - 1;
	if (data[0] & 1) {
		u = malloc(len + 1);
		if (!u)
			return 0;
		memcpy(u, s, len);
		u[len] = '\0';
		ulen = len;
	} else {
		u = vdagent_latin1_to_utf8(s, len, &ulen);
		if (!u)
			return 0;
	}
	a = vdagent_new();
	if (!a)
		goto out;
	/* The guest announces CLIPBOARD_BY_DEMAND, the viewer's text is
	 * offered, the guest asks for it (UTF8_TEXT). */
	guest_msg(msg, 6, 1, 1u << 5, 2);
	vdagent_feed(a, msg, 36, &out, &text, &textlen, err, sizeof(err));
	free(text);
	text = NULL;
	vdagent_offer(a, u, ulen, &out);
	guest_msg(msg, 8, 1, 0, 1);
	vdagent_feed(a, msg, 32, &out, &text, &textlen, err, sizeof(err));
	free(text);
	buf_free(&out);
	vdagent_free(a);
	l = vdagent_utf8_to_latin1(u, ulen, &llen);
	free(l);
out:
	free(u);
	return 0;
}
