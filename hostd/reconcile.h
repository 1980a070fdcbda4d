/* Keeping the database in line with libvirt and storage: once at start-up
 * (finish or undo journaled operations, correct states, collect orphans),
 * and from then on for libvirt's lifecycle events. */
#ifndef BERTH_RECONCILE_H
#define BERTH_RECONCILE_H

#include "hostd/hostd.h"
#include "hostd/virt.h"

/* At start-up, before any request: finish interrupted deletes, undo
 * interrupted creates, follow a domain whose disk is newer than the
 * database, finish or undo suspends and wakes cut short, resume a guest
 * left paused, record libvirt's state (a machine that stopped while hostd
 * was down is closed in the ledger when it stopped), and remove domains
 * and volumes that nothing names.  Logs each fix. */
void reconcile_at_start(struct hostd *h);
/* libvirt's lifecycle event for domain UUID, now in state NOW (from
 * virt's event thread; DATA is the hostd).  Ignored while an operation on
 * the machine is in progress: the operation records its own outcome. */
void reconcile_event(const char *uuid, enum vstate now, void *data);

#endif
