/* hostd's state in SQLite (WAL, synchronous=FULL): machines, images, the
 * usage ledger, users' SSH public keys and a few meta values.  All
 * functions are thread-safe (one connection behind a mutex); multi-row
 * changes are one transaction.
 *
 * The machines table doubles as the journal of multi-resource operations:
 * a row is inserted in state "creating" before any volume or domain exists
 * and moves on only when they all do; "deleting" is set before any is
 * removed.  hostd's start-up reconciliation finishes or undoes both. */
#ifndef BERTH_DB_H
#define BERTH_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"
#include "hostd/billing.h"

struct db;

/* A machine's state: an enum in memory, its name (mstate_name) only in
 * SQLite and in JSON.  "creating" and "deleting" are the journal of a
 * create and a delete (above); the others are what libvirt reports. */
enum mstate {
	MS_CREATING,
	MS_STOPPED,
	MS_RUNNING,
	MS_PAUSED,
	MS_SUSPENDED,
	MS_DELETING,
};
#define MS_COUNT (MS_DELETING + 1)

/* "creating", "stopped", ...: the name SQLite and the API use. */
const char *mstate_name(enum mstate s);
/* The state named S; -1 when S names none. */
int mstate_parse(const char *s, enum mstate *out);
/* Running or paused: the vCPUs and memory are held, and billed. */
bool mstate_holds_cpu(enum mstate s);

/* How far a machine's SSH host key is pinned (the gateways, `berth exec`
 * and hostd refuse any other key): HK_NONE, a machine made before berth
 * pinned keys; HK_SEED, hostd made the key and gave it in the seed, and has
 * not yet seen the machine answer; HK_CONFIRMED, it answered with it;
 * HK_TOFU, it answered with another (its image ignores the seed's key),
 * which was pinned then (trust on first use). */
enum host_key_state { HK_NONE, HK_SEED, HK_CONFIRMED, HK_TOFU };
#define HK_COUNT (HK_TOFU + 1)
const char *host_key_state_name(enum host_key_state s);

#define HOST_KEY_MAX 768      /* a public key line, with the NUL: RSA 4096 fits */

struct machine {
	char id[37];          /* UUID: also the libvirt domain's UUID */
	char owner[64];
	char name[64];
	char image[64];
	int vcpus;
	uint64_t memory;      /* bytes */
	uint64_t disk;        /* bytes (virtual) */
	enum mstate state;
	char volume[80];      /* storage volume of the root disk */
	char mac[18];
	int ssh_port;         /* network=user: loopback port forwarded to :22 */
	int64_t created;      /* seconds since the epoch */
	int64_t state_since;
	int64_t idle_timeout; /* seconds quiet before the idle policy suspends it:
				 0 = the config's idle_timeout, -1 = never */
	char host_key[HOST_KEY_MAX];  /* pinned SSH host key, "TYPE BASE64"; "" */
	enum host_key_state host_key_state;
	/* A live fork whose running guest could not take its own key yet:
	 * its seed's key, pinned (HK_SEED) at its next cold boot. */
	char host_key_next[128];
	int net_index;        /* network = routed: its address and tap (hostd/net.h);
				 0: none */
	/* A live fork until its first cold boot: the address and MAC its
	 * guest still uses, its source's ("IP MAC"); "" otherwise. */
	char net_alias[40];
	/* Its own egress policy as far as 255 bytes go ("" = egress_default);
	 * EGRESS_LONG when there is more (db_machine_egress reads it all). */
	char egress[256];
	bool egress_long;
	int qemu_index;       /* its QEMU runs as uid qemu_uid_base + this (set by
				 db_machine_insert, never reused) */
};

struct image {
	char name[64];
	char volume[80];
	char format[16];      /* of the base volume as libvirt sees it */
	char boot[16];        /* "direct" (kernel + initrd) or "firmware" (BIOS) */
	char kernel[4096];    /* absolute paths, for direct boot */
	char initrd[4096];
	char cmdline[1024];
	char user[64];        /* default login user */
	uint64_t virtual_size;
	char sha256[65];      /* of the imported root file */
	int64_t created;
	char source[16];      /* what was imported: raw, qcow2, raw.zst, qcow2.zst */
	uint64_t source_size; /* its size in bytes (the download) */
	/* Who made it: "" for root's (built, imported), else the user whose
	 * machine it was made from.  Another user neither lists it nor
	 * creates from it unless it is public (root publishes). */
	char owner[64];
	bool public_;
};

/* Whether USER may see and use IMG: root, its owner, or anyone when it
 * is public. */
bool image_visible(const struct image *img, const char *user);

/* Open (creating) the database at PATH and bring its schema to
 * db_schema_version(): the migrations it lacks, each in a transaction of
 * its own with its version (PRAGMA user_version).  NULL with E set on
 * failure, also for a database at a version newer than this binary knows
 * (the message names both). */
struct db *db_open(const char *path, struct err *e);

/* The schema version this binary makes: the number of its migrations. */
int db_schema_version(void);
void db_close(struct db *db);

/* Meta values (e.g. "instance").  get returns 0 and fills OUT, 1 when
 * absent, -1 on error. */
int db_meta_get(struct db *db, const char *key, char *out, size_t outlen, struct err *e);
int db_meta_set(struct db *db, const char *key, const char *value, struct err *e);

/* Insert M (state forced to "creating", M->qemu_index the next number)
 * with its own egress policy EGRESS (NULL or "": egress_default) and open
 * its ledger row.  409 "exists" when OWNER already has a machine of that
 * name. */
int db_machine_insert(struct db *db, struct machine *m, const char *egress, struct err *e);
/* 404 "not_found" ("no machine NAME") when absent. */
int db_machine_get(struct db *db, const char *owner, const char *name,
		   struct machine *m, struct err *e);
int db_machine_get_id(struct db *db, const char *id, struct machine *m, struct err *e);
/* All machines of OWNER (all owners when NULL), sorted by owner, name.
 * *OUT is malloc'd (free it), *N its length. */
int db_machine_list(struct db *db, const char *owner, struct machine **out,
		    size_t *n, struct err *e);
/* Move machine ID to STATE: closes the open ledger row at now and opens
 * one for STATE, in one transaction.  No-op when already in STATE. */
int db_machine_set_state(struct db *db, const char *id, enum mstate state,
			 struct err *e);
/* The same, as of time T (seconds since the epoch): at start-up, a change
 * that happened while hostd was down (the host lost power). */
int db_machine_set_state_at(struct db *db, const char *id, enum mstate state, int64_t t,
			    struct err *e);
/* Set machine ID's idle_timeout (see struct machine). */
int db_machine_set_idle(struct db *db, const char *id, int64_t idle_timeout, struct err *e);
int db_machine_set_port(struct db *db, const char *id, int port, struct err *e);
/* Pin machine ID's host key KEY in STATE, and NEXT ("" none) for its next
 * cold boot. */
int db_machine_set_host_key(struct db *db, const char *id, const char *key,
			    enum host_key_state state, const char *next, struct err *e);
/* Remove the row and its checkpoint rows, and close its ledger row (ledger
 * rows are kept). */
int db_machine_delete(struct db *db, const char *id, struct err *e);
/* Whether any machine's SSH forward uses PORT (for picking a new one). */
bool db_port_used(struct db *db, int port);
/* Whether a machine has network index INDEX. */
bool db_net_index_used(struct db *db, int index);
/* Machine ID's network index and guest-side alias ("" none). */
int db_machine_set_net(struct db *db, const char *id, int index, const char *alias,
		       struct err *e);
/* Machine ID's own egress policy text into OUT ("" when it has none: the
 * config's egress_default applies), and setting it. */
int db_machine_egress(struct db *db, const char *id, struct buf *out, struct err *e);
int db_machine_set_egress(struct db *db, const char *id, const char *policy, struct err *e);

int db_image_insert(struct db *db, const struct image *img, struct err *e);
int db_image_get(struct db *db, const char *name, struct image *img, struct err *e);
int db_image_list(struct db *db, struct image **out, size_t *n, struct err *e);
int db_image_set_public(struct db *db, const char *name, bool public_, struct err *e);
int db_image_delete(struct db *db, const char *name, struct err *e);
/* Number of machines using image NAME, or -1. */
int db_image_users(struct db *db, const char *name, struct err *e);

struct checkpoint {
	char machine_id[37];
	char name[64];
	char volume[80];      /* the frozen volume holding the checkpoint's disk */
	int64_t created;
	char memory[4096];    /* its saved memory image, "" for a disk-only one */
};

/* The machine's current (writable) volume. */
int db_machine_set_volume(struct db *db, const char *id, const char *volume,
			  struct err *e);
/* Record checkpoint C and move its machine onto NEW_TOP, in one
 * transaction.  409 "exists" when the machine has a checkpoint of that name. */
int db_ckpt_insert(struct db *db, const struct checkpoint *c, const char *new_top,
		   struct err *e);
/* 404 "not_found" ("no checkpoint NAME") when absent. */
int db_ckpt_get(struct db *db, const char *machine_id, const char *name,
		struct checkpoint *c, struct err *e);
/* The machine's checkpoints, oldest first; *OUT malloc'd. */
int db_ckpt_list(struct db *db, const char *machine_id, struct checkpoint **out,
		 size_t *n, struct err *e);
int db_ckpt_delete(struct db *db, const char *machine_id, const char *name,
		   struct err *e);
/* How many rows (machines, checkpoints, images) name VOLUME, or -1. */
int db_volume_named(struct db *db, const char *volume, struct err *e);

/* A user's SSH public key (what `ssh NAME@host` accepts): one row of the
 * keys table.  A key (type and blob) belongs to one user only. */
#define USERKEY_BLOB_MAX 4096      /* base64, with the NUL: RSA up to 16384 bits */
#define USERKEY_COMMENT_CHARS 200  /* characters (UTF-8), not bytes */

struct userkey {
	int64_t id;
	char owner[64];
	char type[48];        /* "ssh-ed25519", "ecdsa-sha2-nistp256", ... */
	char blob[USERKEY_BLOB_MAX];  /* canonical base64 of the public key blob */
	char comment[USERKEY_COMMENT_CHARS * 4 + 1];
	char fingerprint[64]; /* "SHA256:" + unpadded base64, as ssh-keygen -l */
	int64_t created;      /* seconds since the epoch */
};

/* Insert K for K->owner, setting K->id and K->created.  409 "key_exists"
 * when the key is registered already, by anyone (the message names no
 * user). */
int db_key_insert(struct db *db, struct userkey *k, struct err *e);
/* Record the first authenticated use of key ID: *FIRST is true when this
 * was it. */
int db_key_used(struct db *db, int64_t id, bool *first, struct err *e);
/* OWNER's keys, oldest first; *OUT malloc'd (free it), *N its length. */
int db_key_list(struct db *db, const char *owner, struct userkey **out, size_t *n,
		struct err *e);
/* The key with this TYPE and canonical base64 BLOB.  404 "unknown_key"
 * (no details) when nobody registered it. */
int db_key_find(struct db *db, const char *type, const char *blob, struct userkey *k,
		struct err *e);
/* Remove OWNER's key ID.  404 "not_found" ("no key ID") when it is missing
 * or another user's. */
int db_key_delete(struct db *db, const char *owner, int64_t id, struct err *e);

/* An API token (hostd/tokens.c), what berth-web's callers send: the
 * secret itself is never stored, only its sha256. */
struct token {
	int64_t id;
	char owner[64];
	char name[64];
	int64_t created;      /* seconds since the epoch */
	int64_t last_used;    /* 0: never */
};

/* Insert T (owner, name) with HASH (hex sha256 of the secret), setting
 * T->id and T->created.  409 "too_many_tokens" when T->owner has MAX. */
int db_token_insert(struct db *db, struct token *t, const char *hash, int max,
		    struct err *e);
/* OWNER's tokens, oldest first; *OUT malloc'd (free it), *N its length. */
int db_token_list(struct db *db, const char *owner, struct token **out, size_t *n,
		  struct err *e);
/* The token whose secret hashes to HASH.  401 "invalid_token" when none. */
int db_token_find(struct db *db, const char *hash, struct token *t, struct err *e);
/* Token ID was used at T. */
int db_token_touch(struct db *db, int64_t id, int64_t t, struct err *e);
/* Remove OWNER's token ID.  404 "not_found" when missing or another's. */
int db_token_delete(struct db *db, const char *owner, int64_t id, struct err *e);

/* Ledger rows of machine ID (all when NULL) as a JSON-ready callback walk:
 * FN(state, start, end (0 = open), data). */
int db_ledger_walk(struct db *db, const char *id,
		   void (*fn)(const char *machine_id, const char *owner,
			      const char *name, enum mstate state, int64_t start,
			      int64_t end, void *data),
		   void *data, struct err *e);

/* ---- usage: prices, storage samples, the ledger with its quantities ---- */

struct db_price {
	struct price p;
	char currency[16];
};

/* The price history, oldest first; *OUT malloc'd. */
int db_prices(struct db *db, struct db_price **out, size_t *n, struct err *e);
int db_price_insert(struct db *db, const struct db_price *p, struct err *e);
/* Machine ID allocates BYTES from T on; a row only when it changed. */
int db_sample_add(struct db *db, const char *id, int64_t t, uint64_t bytes, struct err *e);
/* Every machine's latest storage sample, sorted by machine id (for
 * bsearch with db_sample_find).  *OUT is malloc'd. */
struct db_latest_sample {
	char machine_id[37];
	int64_t t;
	uint64_t bytes;
};
int db_samples_latest(struct db *db, struct db_latest_sample **out, size_t *n,
		      struct err *e);
const struct db_latest_sample *db_sample_find(const struct db_latest_sample *s, size_t n,
					      const char *machine_id);
/* Machine ID's samples, by time; *OUT malloc'd. */
int db_samples(struct db *db, const char *id, struct bill_sample **out, size_t *n,
	       struct err *e);

struct db_usage_row {
	char machine_id[37], owner[64], name[64];
	enum mstate state;
	int vcpus;
	uint64_t memory;
	int64_t start, end;    /* end 0: still open */
};
/* One storage sample of a machine (db_samples_all). */
struct db_sample_row {
	char machine_id[37];
	struct bill_sample s;
};
/* The samples of every machine that has ledger rows of OWNER (NULL: every
 * machine), by machine id then time: one query for GET /v1/usage instead
 * of one per machine.  *OUT malloc'd. */
int db_samples_all(struct db *db, const char *owner, struct db_sample_row **out, size_t *n,
		   struct err *e);
/* The ids of OWNER's existing machines (NULL: everyone's), sorted as
 * strcmp sorts them; *OUT malloc'd, 37 bytes each. */
int db_machine_ids(struct db *db, const char *owner, char (**out)[37], size_t *n,
		   struct err *e);

/* Ledger rows of OWNER (NULL: everyone), of MACHINE_ID only when not
 * NULL, that end after SINCE, by machine then time; *OUT malloc'd. */
int db_usage_rows(struct db *db, const char *owner, const char *machine_id, int64_t since,
		  struct db_usage_row **out, size_t *n, struct err *e);

/* ---- the credential broker's secrets (hostd/secrets.h) ---------------- */

/* A secret of OWNER's: the upstream URL and the header lines the broker
 * attaches (HEADERS: a JSON array of [name, value] pairs, as text; no
 * route ever answers it). */
struct db_secret {
	int64_t id;
	char owner[64];
	char name[64];
	char url[512];
	char headers[8192];
	int64_t created;      /* seconds since the epoch */
};
/* Insert S (owner, name, url, headers), setting S->id and S->created.
 * 409 "secret_exists" when OWNER has one of that name. */
int db_secret_insert(struct db *db, struct db_secret *s, struct err *e);
/* OWNER's secret NAME.  404 "no_secret" ("no secret NAME") when none. */
int db_secret_get(struct db *db, const char *owner, const char *name, struct db_secret *s,
		  struct err *e);
/* OWNER's secrets by name; *OUT malloc'd (free it). */
int db_secret_list(struct db *db, const char *owner, struct db_secret **out, size_t *n,
		   struct err *e);
/* Remove OWNER's secret NAME and its grants.  404 "no_secret". */
int db_secret_delete(struct db *db, const char *owner, const char *name, struct err *e);
/* ALLOW: machine MACHINE_ID may use secret SECRET_ID from now on; else no
 * more.  *CHANGED: whether that was not so already. */
int db_secret_grant(struct db *db, int64_t secret_id, const char *machine_id, bool allow,
		    bool *changed, struct err *e);
/* The names of the machines allowed secret SECRET_ID, sorted; the names of
 * the secrets MACHINE_ID is allowed, sorted; the ids of the machines
 * allowed SECRET_ID.  *OUT malloc'd, 64 bytes each. */
int db_secret_machines(struct db *db, int64_t secret_id, char (**out)[64], size_t *n,
		       struct err *e);
int db_machine_secrets(struct db *db, const char *machine_id, char (**out)[64], size_t *n,
		       struct err *e);
int db_secret_grantees(struct db *db, int64_t secret_id, char (**out)[64], size_t *n,
		       struct err *e);
/* The broker's question, in one read: the machine at network index
 * NET_INDEX (404 "not_found" when none), and its owner's secret SECRET in
 * *S (S->id 0 when there is none) with *ALLOWED, whether the machine may
 * use it. */
int db_broker_lookup(struct db *db, int net_index, const char *secret, struct machine *m,
		     struct db_secret *s, bool *allowed, struct err *e);

/* One call through the broker, as its log keeps it. */
struct db_broker_call {
	int64_t id;
	int64_t t;            /* its start, seconds since the epoch */
	int64_t ms;           /* how long it took */
	char owner[64], machine[64], secret[64];
	char method[16];
	char path[512];       /* without the query */
	int status;           /* the HTTP status the guest got (0: none, cut short) */
	int64_t bytes_in;     /* the request body's bytes, from the guest */
	int64_t bytes_out;    /* the answer body's bytes, to the guest */
	char error[200];      /* why it failed, "" */
};
/* Append C (its id ignored), keeping OWNER's last KEEP rows. */
int db_broker_log_add(struct db *db, const struct db_broker_call *c, int keep, struct err *e);
/* OWNER's last LIMIT calls, of secret SECRET and machine MACHINE when not
 * NULL, oldest first; *OUT malloc'd. */
int db_broker_log_list(struct db *db, const char *owner, const char *secret,
		       const char *machine, int limit, struct db_broker_call **out, size_t *n,
		       struct err *e);

/* The broker's variables in a machine: what they should be and what
 * hostd last wrote there ("?": unknown). */
struct db_secret_env {
	char machine_id[37];
	char want[4096];
	char written[4096];
};
/* MACHINE_ID's variables should be WANT (a row made when missing, with
 * nothing written). */
int db_secret_env_want(struct db *db, const char *machine_id, const char *want, struct err *e);
/* WRITTEN was written into MACHINE_ID (a machine without a row: nothing). */
int db_secret_env_written(struct db *db, const char *machine_id, const char *written,
			  struct err *e);
/* TO_ID, a fork of FROM_ID, has on its disk what FROM_ID had, and wants
 * nothing (its grants are its own, none yet). */
int db_secret_env_forked(struct db *db, const char *from_id, const char *to_id,
			 struct err *e);
/* MACHINE_ID's disk went back to a checkpoint: what is on it is unknown. */
int db_secret_env_unknown(struct db *db, const char *machine_id, struct err *e);
/* The rows (STALE_RUNNING: only those of running machines whose want is
 * not what was written); *OUT malloc'd. */
int db_secret_env_list(struct db *db, bool stale_running, struct db_secret_env **out,
		       size_t *n, struct err *e);

/* ---- previews (hostd/preview.h) ---------------------------------------- */

/* Port PORT of machine MACHINE_ID (OWNER's NAME), served by berth-web at
 * LABEL.DOMAIN, to anyone (PUBLIC_) or to the browsers its keys let in. */
struct db_preview {
	int64_t id;
	char machine_id[37];
	char owner[64];
	char machine[64];     /* the machine's name */
	int port;
	char label[64];       /* "PORT-NAME-OWNER" */
	bool public_;
	int64_t created;      /* seconds since the epoch */
};
/* Make the preview of MACHINE_ID's PORT, named LABEL, or set PUBLIC_ on
 * the one there is; *CREATED: whether it was made.  409 "label_taken"
 * when another preview has LABEL (another user's machine and name whose
 * dashes spell the same host name). */
int db_preview_put(struct db *db, const char *machine_id, int port, const char *label,
		   bool public_, bool *created, struct err *e);
/* The preview of MACHINE_ID's PORT, or the one named LABEL.  404
 * "no_preview" when there is none. */
int db_preview_get(struct db *db, const char *machine_id, int port, struct db_preview *p,
		   struct err *e);
int db_preview_find(struct db *db, const char *label, struct db_preview *p, struct err *e);
/* OWNER's previews (NULL: everyone's), by owner, machine and port; *OUT
 * malloc'd. */
int db_preview_list(struct db *db, const char *owner, struct db_preview **out, size_t *n,
		    struct err *e);
/* Remove preview ID and its keys.  404 "no_preview" when there is none. */
int db_preview_delete(struct db *db, int64_t id, struct err *e);
/* A key of preview PREVIEW_ID: KIND "link" or "cookie", HASH the sha256
 * (hex) of its secret, valid until EXPIRES (seconds since the epoch);
 * *ID its id.  Keys that expired go at the same time. */
int db_preview_key_add(struct db *db, int64_t preview_id, const char *kind, const char *hash,
		       int64_t expires, int64_t *id, struct err *e);
/* The key of KIND with HASH of preview PREVIEW_ID valid at NOW: *ID, 0
 * when there is none. */
int db_preview_key_find(struct db *db, int64_t preview_id, const char *kind, const char *hash,
			int64_t now, int64_t *id, struct err *e);
/* Spend the link with HASH of preview PREVIEW_ID, valid at NOW (it is
 * removed).  404 "invalid_link" when there is no such link (never made,
 * used, expired, or another preview's). */
int db_preview_link_take(struct db *db, int64_t preview_id, const char *hash, int64_t now,
			 struct err *e);
/* Whether what let a connection in still stands at NOW: preview
 * PREVIEW_ID exists, its machine runs (a connection to a machine that
 * went to sleep is cut: its next request wakes it through hostd) and,
 * with KEY_ID 0, the preview is public, else its key KEY_ID is valid.
 * *OK. */
int db_preview_grant_ok(struct db *db, int64_t preview_id, int64_t key_id, int64_t now,
			bool *ok, struct err *e);

/* A lifecycle event (hostd/events.h). */
struct db_event {
	int64_t id;
	int64_t t;            /* milliseconds since the epoch */
	char owner[64], machine[64];
	char kind[24];
	char cause[200];
};
/* Append EV (its id ignored; *ID the new one when ID), keeping OWNER's
 * last KEEP rows. */
int db_event_add(struct db *db, const struct db_event *ev, int keep, int64_t *id,
		 struct err *e);
/* Events with an id above AFTER, of OWNER (NULL: everyone's) and of
 * machine MACHINE when not NULL: the first LIMIT of them when FORWARD (a
 * follower's next page), else the last LIMIT; oldest first either way;
 * *OUT malloc'd. */
int db_event_list(struct db *db, const char *owner, const char *machine, int64_t after,
		  bool forward, int limit, struct db_event **out, size_t *n, struct err *e);

/* A machine's attributes beyond its row (hostd/attrs.h). */
struct db_attrs {
	int64_t expires;      /* its deadline, seconds since the epoch; 0: none */
	char action[16];      /* what its deadline does: "suspend" or "delete" */
	char *metadata;       /* a JSON object of strings (malloc'd; "{}") */
	char *env;            /* the same, its commands' environment */
};
/* Machine ID's attributes into *OUT (free with db_attrs_free); a machine
 * without any has none: expires 0, action "delete", metadata and env NULL. */
int db_attrs_get(struct db *db, const char *id, struct db_attrs *out, struct err *e);
void db_attrs_free(struct db_attrs *a);
/* Write machine ID's attributes A (NULL metadata or env: "{}"). */
int db_attrs_set(struct db *db, const char *id, const struct db_attrs *a, struct err *e);
/* The ids of the machines whose deadline is at or before NOW (not 0),
 * earliest first; *OUT malloc'd. */
int db_attrs_expired(struct db *db, int64_t now, char (**out)[37], size_t *n, struct err *e);

#endif
