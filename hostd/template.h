/* Templates: an image plus a booted machine's disk and memory.
 *
 * template_create boots a machine of the image (a build machine, named
 * tpl-XXXXXXXX in its owner's list while it is built), runs the setup
 * command in it over SSH, takes a memory checkpoint of it, keeps that
 * checkpoint's frozen volume and memory image as the template and deletes
 * the build machine.  A machine made from a template is a live fork of
 * that saved state (checkpoint_live_start): running at once, with no boot,
 * then given its own identity (hostname and SSH host key by the image's
 * berth-seed --live, /etc/machine-id here, a new VM generation id, which
 * has Linux reseed its RNG, and host randomness written to
 * /dev/urandom). */
#ifndef BERTH_TEMPLATE_H
#define BERTH_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "hostd/db.h"
#include "hostd/hostd.h"

struct template_req {
	const char *owner;
	const char *name;
	const char *image;
	const char *setup;   /* a shell line run as the image's user; NULL none */
	int vcpus;
	uint64_t memory;     /* bytes */
	uint64_t disk;       /* bytes; 0 the image's */
	bool public_;        /* root only (the caller checks) */
	int timeout_s;       /* the setup's time limit, > 0 */
};

/* Build template R->name (see above).  OUTPUT gets what the setup command
 * wrote (stdout and stderr, interleaved as read).  400 invalid_name, 404
 * for an unknown image, 409 exists, 422 setup_failed (the command's exit
 * status and the end of its output in the message), 504 timeout (the
 * setup ran longer than R->timeout_s); on any failure no
 * template, machine, volume or domain is left. */
int template_create(struct hostd *h, const struct template_req *r, struct template *out,
		    struct buf *output, struct err *e);
/* Whether USER may see and use T: root, its owner, or anyone when public. */
bool template_visible(const struct template *t, const char *user);
/* Remove template NAME (OWNER's own, or root's call: OWNER "root").
 * Machines made from it keep running: the disk they are layered on stays
 * until the last goes (volume_gc); its memory image, which none needs
 * once started, goes now.  404 no_template, 403 for another's. */
int template_delete(struct hostd *h, const char *owner, const char *name, struct err *e);
/* Machine NEW_NAME of OWNER from template TNAME: running, with its own
 * identity (see above).  With WAIT until its SSH answers.  404
 * no_template (another user's private one too), as create otherwise. */
int template_instantiate(struct hostd *h, const char *owner, const char *tname,
			 const char *new_name, bool wait, struct machine *out, struct err *e);
json_t *template_json(const struct template *t);
/* {"name", "owner", "building": {"stage": "boot"|"setup"|"save", "machine",
 * "elapsed_ms"}} of template NAME while this hostd builds it for USER (or
 * root); NULL when no such build runs. */
json_t *template_building_json(const char *name, const char *user);
/* At start-up: remove memory images in STATE/templates that no template
 * names (a build a crash interrupted between saving and its row).  A
 * build machine such a crash left is its owner's tpl-XXXXXXXX machine. */
void template_reconcile(struct hostd *h);

#endif
