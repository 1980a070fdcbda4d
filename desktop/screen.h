/* One screen per machine that has viewers: a libvncclient connection to
 * QEMU's VNC socket (a descriptor hostd passes), re-served by libvncserver
 * to every viewer of that machine.
 *
 * Threads: libvncserver's own, two per viewer (input, and output paced by
 * deferUpdateTime, so a slow viewer holds up only itself); one upstream
 * thread per screen that attaches (waking the machine for a viewer that
 * asked), reads QEMU's updates into the screen, and when QEMU goes away
 * (machine stopped, restarted, suspended) shows a "stopped" frame and
 * attaches again every second while viewers remain.  Viewers' keys,
 * pointer and clipboard go upstream under the screen's send lock.
 *
 * hostd attaches a screen only with a grant's one-use handle
 * (hostd/desktop.h): each viewer holds the grant that redeeming its token
 * made, and its resume key carries it on; an attach uses any grant the
 * screen's viewers (or their live resume keys) hold, and keeps the next
 * handle hostd answers.  screen_hold tells hostd which grants the bridge
 * still holds, and drops the viewers of those hostd says are revoked. */
#ifndef BERTH_DESKTOP_SCREEN_H
#define BERTH_DESKTOP_SCREEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct screen_cfg {
	const char *desktop_sock;  /* STATE/desktop.sock */
	const char *hostd_sock;    /* STATE/hostd.sock (sessions) */
	int max_fps;               /* updates per second per viewer, at most */
};

void screen_init(const struct screen_cfg *cfg);

/* Hand the viewer on FD (a TCP socket whose WebSocket request has not been
 * read yet) to USER's machine NAME, making its screen if need be.  WAKE:
 * the machine was not running when the token was redeemed (the screen shows
 * "waking" until it runs).  TOKEN names the viewer for screen_state; PREV
 * is the resume key it came back with (screen_resume), NULL for a viewer
 * that came with its token; FROM is its address, for hostd's session log.
 * GRANT: hostd's grant that let it in (redeem's, or the one screen_resume
 * gave), HANDLE its attach handle (redeem's; NULL for a resume: the bridge
 * holds it).  FD is the screen's afterwards (closed on failure).  Returns
 * 0 or -1. */
int screen_add_viewer(const char *user, const char *name, bool wake, int fd,
		      const char *token, const char *prev, const char *from, int64_t grant,
		      const char *handle);

/* The state of the viewer TOKEN as JSON text (malloc'd) for the page:
 * {"state": "waking"|"connected"|"stopped"|"refused"|"unknown", "machine",
 *  "message"?, "resume"?}; "resume", the viewer's key to come back with
 *  (screen_resume), is in one answer for a viewer only: the first, for a
 *  viewer that came with its token; the first whose PRESENTED (NULL: none)
 *  is the key it came back with, for one that came back.  "refused" also
 *  when PRESENTED is a resume key that was refused. */
char *screen_state(const char *token, const char *presented);

/* Remember that TOKEN (or a resume key) was refused, with MESSAGE, for
 * screen_state. */
void screen_refused(const char *token, const char *machine, const char *message);

/* A viewer of USER's machine NAME that left (its connection broke) comes
 * back with KEY (what screen_state told it as "resume"), within 2 minutes,
 * once (a viewer cut by a revocation has no key).  Returns 0 with the
 * viewer's original TOKEN (it names the viewer for screen_state) and
 * *GRANT, the grant it came in with, or -1. */
int screen_resume(const char *key, const char *user, const char *name, char *token,
		  size_t toklen, int64_t *grant);

/* Tell hostd which grants the bridge holds ({"op":"hold"}: each must be
 * held every minute or it ends), and disconnect the viewers of those it
 * says are revoked (their resume keys die with them).  Called every
 * second; hostd unreachable: nothing happens. */
void screen_hold(void);

/* Viewers being handed over or served, on all screens. */
int screen_viewer_count(void);

/* hostd restarted and forgot the live sessions: open them again. */
void screen_reopen_sessions(void);

/* Counters for the log and bench: upstream updates received, updates sent. */
void screen_stats(uint64_t *frames_in, uint64_t *rects_in);

#endif
