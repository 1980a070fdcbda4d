/* Machines: create, start, stop, suspend, resume, restart, delete, and the
 * reconciliation of the database with libvirt and storage at start-up. */
#ifndef BERTH_MACHINE_H
#define BERTH_MACHINE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "hostd/hostd.h"

struct create_req {
	const char *owner;
	const char *name;
	const char *image;
	int vcpus;
	uint64_t memory;   /* bytes */
	uint64_t disk;     /* bytes; 0 = the image's size */
	int64_t idle_timeout; /* as struct machine's: 0 = the config's, -1 = never */
};

enum machine_action { ACT_START, ACT_STOP, ACT_SUSPEND, ACT_RESUME, ACT_RESTART };

struct act_opts {
	int timeout_s;     /* stop: ACPI grace period; 0 = config's */
	bool wait;         /* start/resume/restart: wait until SSH answers */
};

/* Parse "start", "stop", ...; -1 when unknown. */
int machine_action_parse(const char *s, enum machine_action *out);

/* Create a stopped machine.  Validates everything first (400/404/409 with
 * the reason); on any later failure removes what it made.  Fills OUT. */
int machine_create(struct hostd *h, const struct create_req *req,
		   struct machine *out, struct err *e);
/* Do ACTION on OWNER's machine NAME; fills OUT with the result.  When
 * waiting, *READY_MS gets the time from the action to SSH answering. */
int machine_act(struct hostd *h, const char *owner, const char *name,
		enum machine_action action, const struct act_opts *o,
		struct machine *out, int64_t *ready_ms, struct err *e);
int machine_delete(struct hostd *h, const char *owner, const char *name,
		   struct err *e);
/* The machine's SSH endpoint.  1 when it has none yet (nat, no lease). */
int machine_endpoint(struct hostd *h, const struct machine *m, char *host,
		     size_t hostlen, int *port, struct err *e);
/* JSON for the API (a new reference), with its live sessions, what the
 * idle policy knows of it and an operation in progress. */
json_t *machine_json(struct hostd *h, const struct machine *m);
/* Machine M's JSON object as text, appended to OUT: what machine_json
 * returns, for a list of many without a JSON tree each.  USER is its
 * image's login user, ALLOCATED its storage in bytes (-1: unknown). */
void machine_write_json(struct hostd *h, const struct machine *m, const char *user,
			int64_t allocated, struct buf *out);

/* The same, with the new disk layered on volume BASE (a checkpoint's) instead
 * of the image's base volume.  BASE NULL: the image's. */
int machine_create_from(struct hostd *h, const struct create_req *req, const char *base,
			struct machine *out, struct err *e);

/* Start an operation OP on OWNER's machine NAME: look it up, mark it busy,
 * read it again under the mark and read libvirt's state into *VS.  409
 * "busy" while it is being created or deleted.  On success the caller
 * ends with machine_end, which records libvirt's state and drops the mark. */
int machine_begin(struct hostd *h, const char *owner, const char *name, const char *op,
		  struct machine *m, enum vstate *vs, struct err *e);
void machine_end(struct hostd *h, struct machine *m);

/* For checkpoint.c: the steps machine_act is made of.  The caller holds the
 * machine's busy mark.  VS is the domain's state as libvirt reports it. */
int machine_define(struct hostd *h, const struct machine *m, struct err *e);
/* The UNIX socket QEMU serves machine ID's screen on (VNC). */
void machine_vnc_path(struct hostd *h, const char *id, char *out, size_t outlen);
/* The UNIX socket QEMU binds machine ID's SPICE agent port to (the
 * clipboard, berth-desktop's). */
void machine_agent_path(struct hostd *h, const char *id, char *out, size_t outlen);
/* M's domain XML (as machine_define would define it) into XML. */
int machine_xml(struct hostd *h, const struct machine *m, struct buf *xml, struct err *e);
/* The same, for restoring the save image PATH: without the agent's channel
 * when the image has none (saved before berth had one; libvirt refuses a
 * restore whose devices differ). */
int machine_xml_for_image(struct hostd *h, const struct machine *m, const char *path,
			  struct buf *xml, struct err *e);
int machine_do_start(struct hostd *h, struct machine *m, enum vstate vs, struct err *e);
int machine_do_stop(struct hostd *h, struct machine *m, enum vstate vs, int timeout_s,
		    struct err *e);
int machine_wait_ready(struct hostd *h, const struct machine *m, int timeout_s,
		       struct err *e);
/* A loopback port for an SSH forward that nothing listens on and no
 * machine has recorded, or -1. */
int machine_pick_port(struct hostd *h);
/* Remove volume VOL if no row names it and no volume depends on it, then its
 * parent the same way, up the chain. */
void volume_gc(struct hostd *h, const char *vol);

/* Bring the database in line with libvirt and storage: finish or undo
 * journaled operations, correct states, remove orphans.  Logs each fix. */
void machine_reconcile(struct hostd *h);
/* libvirt lifecycle event (from virt's event thread). */
void machine_on_event(const char *uuid, enum vstate now, void *data);

#endif
