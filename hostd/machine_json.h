/* A machine's JSON for the API, written as text: one writer for the list
 * of thousands (GET /v1/machines, no JSON tree per machine) and for one
 * machine (a jansson tree its caller adds to). */
#ifndef BERTH_MACHINE_JSON_H
#define BERTH_MACHINE_JSON_H

#include <jansson.h>
#include <stdint.h>

#include "common/buf.h"
#include "hostd/db.h"
#include "hostd/hostd.h"
#include "hostd/idle.h"

/* What a machine's JSON says beyond its row, gathered by the caller from
 * the modules that know it: the writer asks none of them. */
struct machine_facts {
	const char *user;         /* its image's login user */
	int64_t allocated;        /* its storage in bytes; -1: unknown */
	int64_t memory_bytes;     /* its saved memory on disk; -1: none */
	int sessions;             /* the gateways' live sessions on it */
	const char *egress;       /* its egress policy (the config's when its own
				     is ""), its first 255 bytes */
	bool egress_long;         /* and there is more */
	struct idle_view idle;    /* what the idle policy knows of it */
	const char *op;           /* a long operation in progress told its
				     progress (an export); NULL: none */
	uint64_t done, total;     /* that progress, in bytes */
	/* Its attributes (hostd/attrs.h) as the list read them all at once
	 * (attrs_all set; attrs NULL: it has none); else read for it alone. */
	const struct db_attrs *attrs;
	bool attrs_all;
};

/* Machine M's JSON object, with F, appended to OUT as text. */
void machine_json_write(struct hostd *h, const struct machine *m,
			const struct machine_facts *f, struct buf *out);
/* The same as a new jansson reference (never NULL). */
json_t *machine_json(struct hostd *h, const struct machine *m, const struct machine_facts *f);

#endif
