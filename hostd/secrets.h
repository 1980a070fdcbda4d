/* The credential broker's privileged half: secrets, which machines may use
 * them, what they called, and the broker's variables inside machines.
 *
 * A secret is an owner's: a name (a DNS label starting with a letter), an
 * https URL, and header lines ("x-api-key: ...") that the broker attaches
 * to a call.  hostd keeps it in its database (root's, 0600) and never
 * answers its header values to anyone but berth-web, for one call of a
 * machine allowed it (`berth set MACHINE --secret NAME`).
 *
 * The broker itself runs in berth-web (web/broker.h), unprivileged, on the
 * guests' gateway address at broker_port, which the boundary opens to
 * guests (hostd/net_rules.c).  For each call berth-web passes hostd the
 * guest's connected socket over STATE/webctl.sock (op "broker",
 * hostd/webctl.h); hostd reads the peer's address itself, so berth-web
 * cannot choose which machine it asks for, maps it to the machine (the
 * anti-spoofing rule binds an address to its tap and MAC), and answers the
 * upstream URL and the header lines when that machine may use that secret,
 * else 403.  When the call ends berth-web reports its status and bytes on
 * the same connection, and hostd writes the log row (`berth secret log`).
 *
 * Inside a machine the broker is NAME_BASE_URL=http://GATEWAY:PORT/NAME
 * (NAME upper-cased, '-' as '_'), in /etc/berth/broker.env,
 * /etc/profile.d/berth-broker.sh and /etc/environment, written by hostd
 * over SSH as root whenever the machine runs and its variables are not
 * what its grants say (a grant, a fork, a restore), with the image's hook
 * /usr/lib/berth/broker-env run after (the agents image: Codex's and
 * Claude Code's settings).  Never the secret. */
#ifndef BERTH_SECRETS_H
#define BERTH_SECRETS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "common/err.h"

struct hostd;
struct machine;
struct webctl;

/* Limits: an owner's secrets, a secret's header lines, a machine's grants
 * (its variables must fit secret_env's 4 KiB), a log's rows per owner. */
#define SECRETS_MAX_PER_USER 64
#define SECRETS_MAX_HEADERS 8
#define SECRETS_MAX_PER_MACHINE 16
#define SECRETS_LOG_KEEP 10000

/* ---- the pure part (hostd/secrets_rules.c) ---- */

/* A secret's name: a DNS label starting with a letter (it becomes a
 * variable's name), not "log" (GET /v1/secrets/log). */
bool secrets_name_valid(const char *s);
/* URL as a secret's upstream: https://HOST[:PORT][/PATH], HOST a DNS name,
 * an IPv4 address or [IPv6], no user, query or fragment, printable ASCII,
 * at most 500 bytes; into CANON without a trailing '/'.  400 "invalid_url"
 * naming what is wrong. */
int secrets_url_check(const char *url, char *canon, size_t canonlen, struct err *e);
/* LINE, "Name: value", into NAME (a token of RFC 9110, 1 to 64 bytes) and
 * VALUE (trimmed; 1 to 4096 bytes of printable ASCII, spaces and tabs: no
 * CR, LF or other control byte).  A name that frames or routes HTTP (Host,
 * Content-Length, Transfer-Encoding, Connection and the other hop-by-hop
 * headers) is refused.  400 "invalid_header" naming what is wrong, never
 * quoting the value. */
int secrets_header_parse(const char *line, char *name, size_t namelen, char *value,
			 size_t valuelen, struct err *e);
/* NAME's variable: upper-cased, '-' as '_', and "_BASE_URL". */
void secrets_env_var(const char *name, char *out, size_t outlen);
/* The broker's variables for secrets NAMES[0..N) at BASE
 * ("http://GATEWAY:PORT"): "VAR=BASE/NAME\n" each, appended to OUT. */
void secrets_env_text(const char *base, char (*names)[64], size_t n, struct buf *out);
/* The sh script (POSIX, busybox's too) that makes ENV (secrets_env_text's,
 * "" for none) a machine's, run as root: /etc/berth/broker.env, then the
 * image's hook /usr/lib/berth/broker-env (its stdout's VAR=VALUE lines
 * join the variables), then /etc/profile.d/berth-broker.sh and a block of
 * /etc/environment.  Appended to OUT. */
void secrets_env_script(const char *env, struct buf *out);
/* A guest's call: METHOD a token of 1 to 15 bytes, not CONNECT, TRACE or
 * TRACK (IIS's TRACE); PATH what follows the secret's name, "/..." with an
 * optional query, of printable ASCII, at most 4000 bytes, with no "." or
 * ".." segment (nor one spelled with %2e): a call stays under its secret's
 * URL.  LOG_PATH gets PATH without its query (what the log keeps).  400
 * "invalid_request". */
int secrets_request_check(const char *method, const char *path, char *log_path,
			  size_t log_pathlen, struct err *e);
/* URL (secrets_url_check's) followed by PATH, into OUT.  400
 * "invalid_request" when it does not fit. */
int secrets_url_join(const char *url, const char *path, char *out, size_t outlen,
		     struct err *e);

/* ---- the routes' work (api.c's handlers call these) ---- */

/* POST /v1/secrets: REQ {"name", "url", "headers": ["Name: value", ...]}
 * for OWNER.  The secret's JSON (secrets_list's element: never a value),
 * or NULL with E: 400 invalid_name, invalid_url, invalid_header; 409
 * secret_exists; 403 quota_exceeded past SECRETS_MAX_PER_USER. */
json_t *secrets_add(struct hostd *h, const char *owner, json_t *req, struct err *e);
/* GET /v1/secrets: {"secrets": [{"name", "url", "headers": [NAME, ...],
 * "machines": [NAME, ...], "variable", "created"}, ...]}. */
json_t *secrets_list(struct hostd *h, const char *owner, struct err *e);
/* DELETE /v1/secrets/NAME: gone with its grants (the machines' variables
 * follow).  404 no_secret. */
int secrets_remove(struct hostd *h, const char *owner, const char *name, struct err *e);
/* Machine M may use its owner's secret NAME (ALLOW), or no more: the grant
 * changes at once for the broker, the machine's variables when it runs
 * (within seconds; now when it is running and answers).  404 no_secret;
 * 403 quota_exceeded past SECRETS_MAX_PER_MACHINE; 409
 * broker_needs_routed with network = user. */
int secrets_allow(struct hostd *h, const struct machine *m, const char *name, bool allow,
		  struct err *e);
/* The checks secrets_allow makes before it changes anything: 0, or -1
 * with its error. */
int secrets_allow_check(struct hostd *h, const struct machine *m, const char *name,
			bool allow, struct err *e);
/* The names of the secrets machine M may use (a new JSON array). */
json_t *secrets_of_machine(struct hostd *h, const struct machine *m);
/* GET /v1/secrets/log: OWNER's last LIMIT calls (of SECRET, MACHINE when
 * not NULL): {"calls": [{"time", "ms", "machine", "secret", "method",
 * "path", "status", "bytes_in", "bytes_out", "error"?}, ...]}. */
json_t *secrets_log(struct hostd *h, const char *owner, const char *secret,
		    const char *machine, int limit, struct err *e);
/* What berth-web needs to serve the broker ({"listen": "GATEWAY:PORT",
 * "ca_file", "timeout_s", "max_body"}), or JSON null when it is off
 * (broker_port 0, network = user). */
json_t *secrets_broker_settings(struct hostd *h);

/* ---- the broker's calls (webctl op "broker", hostd/webctl.h) ---- */

/* Serve one call on webctl connection CFD: REQ {"secret", "method",
 * "path"}, GUEST_FD the guest's connection berth-web accepted (closed
 * here).  Answers {"url", "headers": [[NAME, VALUE], ...], "machine",
 * "owner"} or an error (403 forbidden for a machine not allowed the
 * secret, or no such secret: the same answer; 400 for a socket that is not
 * a guest's connection to the broker), then waits for the call's end,
 * {"status", "bytes_in", "bytes_out", "error"?}, and logs it (a
 * connection that ends first is logged with status 0). */
void secrets_broker_call(struct webctl *w, int cfd, json_t *req, int guest_fd);

/* ---- the broker's variables in machines ---- */

/* Start (and stop) the thread that writes them: every few seconds, and at
 * once when a grant changes, into each running machine whose variables
 * are not what its grants say. */
int secrets_start(struct hostd *h, struct err *e);
void secrets_stop(struct hostd *h);
/* Machine TO_ID was forked from FROM_ID (AS_IS: from it as it is, its
 * disk has FROM_ID's variables; else from a checkpoint: unknown); machine
 * ID was restored to a checkpoint (what its disk has is unknown).  Its
 * variables are written again when it runs (none: a fork's grants are
 * its own). */
void secrets_machine_forked(struct hostd *h, const char *from_id, const char *to_id,
			    bool as_is);
void secrets_machine_restored(struct hostd *h, const char *id);

#endif
