/* The host side of the SPICE agent protocol (spice-protocol's vd_agent.h),
 * for the clipboard only, on a machine's com.redhat.spice.0 virtio port:
 * berth-desktop is what a SPICE client plus spice-server are to the guest's
 * agent (spice-vdagent, or the tiny image's clipagent).
 *
 * A pure state machine: bytes read from the guest go in, bytes for the
 * guest and the guest's clipboard text come out.  No I/O, no locks: the
 * caller serialises the calls on one struct vdagent (one per connection).
 * The guest is not trusted: every length is checked, a message over
 * VDAGENT_MSG_MAX is skipped unkept (in step: the next one counts).  A
 * stream out of step (a bad port, a chunk of 0 or over 16 MiB, a protocol
 * other than 1, a chunk longer than its message: what a message cut short
 * looks like when the host's end of the port was closed and opened again
 * between a guest's writes) is picked up again at the next thing that
 * looks like a message, and the agent is asked to announce itself again;
 * the 21st time on one connection it is an error (the caller drops the
 * connection).  Never a crash.
 *
 * Wire format, little-endian: chunks {u32 port, u32 size} + SIZE bytes of
 * a message stream; a message is {u32 protocol = 1, u32 type, u64 opaque,
 * u32 size} + SIZE bytes.  What goes to the guest is cut into chunks of at
 * most 2048 bytes (spice-vdagentd refuses longer ones); what comes from it
 * may be one chunk per message.  Capabilities announced: CLIPBOARD_BY_DEMAND
 * only (so no selection prefix: the CLIPBOARD selection only).
 *
 * Clipboard flow.  Host to guest: vdagent_offer stores the text and sends
 * GRAB(UTF8_TEXT) at once, or when the guest has announced
 * CLIPBOARD_BY_DEMAND; the guest's REQUEST gets CLIPBOARD with the text
 * while the host's text is the clipboard (an empty answer after the guest
 * grabbed).  Guest to host: the guest's GRAB with UTF8_TEXT is answered
 * with REQUEST at once, its CLIPBOARD is handed to the caller. */
#ifndef BERTH_DESKTOP_VDAGENT_H
#define BERTH_DESKTOP_VDAGENT_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

/* The longest clipboard text either way, in bytes of UTF-8. */
#define VDAGENT_TEXT_MAX (1u << 20)
/* The longest message taken from the guest (its data). */
#define VDAGENT_MSG_MAX (VDAGENT_TEXT_MAX + 64)

struct vdagent;

/* A connection's state; NULL when out of memory.  Free with vdagent_free. */
struct vdagent *vdagent_new(void);
void vdagent_free(struct vdagent *a);

/* What the host says first on a new connection: its capabilities, asking
 * for the guest's, appended to OUT. */
void vdagent_hello(struct vdagent *a, struct buf *out);

/* Take LEN bytes DATA read from the guest.  Answers for the guest are
 * appended to OUT.  When a clipboard text from the guest completed, *TEXT
 * is set to it (malloc'd UTF-8 as the guest sent it, NUL-terminated, the
 * caller frees it) and *TEXTLEN to its length; a newer one in the same
 * DATA replaces it.  Returns 0, or -1 with ERR (ERRLEN bytes) when the
 * stream was out of step too often: the connection is no use any more
 * (*TEXT may still be set, and must be freed). */
int vdagent_feed(struct vdagent *a, const void *data, size_t len, struct buf *out,
		 char **text, size_t *textlen, char *err, size_t errlen);

/* The host's clipboard is now TEXT (LEN bytes of UTF-8, copied): a GRAB for
 * the guest is appended to OUT when the guest can take it (else it is sent
 * when the guest announces it can).  -1 when LEN is over VDAGENT_TEXT_MAX
 * (nothing changes), else 0. */
int vdagent_offer(struct vdagent *a, const char *text, size_t len, struct buf *out);

/* The host's text while it is the clipboard (the guest has not grabbed
 * since), with its length in *LEN; NULL otherwise.  A's own: valid until
 * the next call on A.  For carrying it over to the next connection. */
const char *vdagent_host_text(const struct vdagent *a, size_t *len);

/* Whether the guest's agent announced itself (and clipboard by demand). */
bool vdagent_ready(const struct vdagent *a);

/* LEN bytes of ISO 8859-1 as UTF-8: malloc'd, NUL-terminated, its length
 * in *OUTLEN; NULL when out of memory. */
char *vdagent_latin1_to_utf8(const char *s, size_t len, size_t *outlen);
/* LEN bytes of UTF-8 as ISO 8859-1, what does not fit (or is not UTF-8)
 * as '?': malloc'd, NUL-terminated, its length in *OUTLEN; NULL when out
 * of memory. */
char *vdagent_utf8_to_latin1(const char *s, size_t len, size_t *outlen);

#endif
