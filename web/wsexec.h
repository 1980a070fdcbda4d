/* One command over a WebSocket: berth-web's GET /v1/machines/NAME/exec/ws
 * (docs/api.md, "Commands over a WebSocket"), for browsers (the dashboard's
 * terminal) and any client that would rather hold one connection than a
 * stream and a request per keystroke.  A session bridges the client's
 * WebSocket to hostd's exec routes on berth-web's socket (STATE/web.sock),
 * with the caller's token, as any /v1 request through berth-web: POST
 * .../exec streams the command's NDJSON, .../exec/ID/stdin, /resize and
 * /signal carry what the client sends.  berth-web decides nothing about
 * who calls: hostd checks the token on every request.
 *
 * Threads: a session has two, each with a bounded stack: the client's
 * (reads the WebSocket and makes the stdin, resize and signal requests, one
 * at a time: a command that does not read its stdin holds the client's
 * next message back, nothing is queued) and the stream's (hostd's NDJSON
 * to the client, a frame per event: a client that does not read holds the
 * stream back, and one that takes nothing for 30 s is dropped). */
#ifndef BERTH_WEB_WSEXEC_H
#define BERTH_WEB_WSEXEC_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

/* A client's message, the first one (the command) included, is at most
 * this big: stdin comes in messages of at most this many bytes. */
#define WSEXEC_MAX_MESSAGE (64 * 1024)
/* The first message (the command) must come within this. */
#define WSEXEC_FIRST_MS 10000
/* Sessions at once in this process whose token hostd accepted; the next
 * such session gets close 1013.  A session counts from hostd's answer to
 * GET .../exec with its token, before its command starts: handshakes that
 * never send a token hold no place of anyone's. */
#define WSEXEC_MAX_SESSIONS 256
/* Sessions not authenticated yet (from the handshake to hostd's answer on
 * the token), per client address (IPv6: per /64, what one host is
 * usually given); the next handshake from it gets 429. */
#define WSEXEC_MAX_PENDING_PER_ADDR 16

struct wsexec_req {
	char machine[64];          /* NAME from the path, already a valid machine name */
	char token[512];           /* from the request's Authorization: Bearer, "" when none */
	char web_sock[4096];       /* hostd's socket for berth-web (STATE/web.sock) */
	char peer[64];             /* the client's address, for logs */
	char group[64];            /* its address group, for the cap on pending sessions */
	bool pending;              /* holds a place among GROUP's pending sessions */
};

/* True when URL (libmicrohttpd's, decoded) is GET /v1/machines/NAME/exec/ws's
 * path, with NAME (not checked yet) into NAME (NAMELEN bytes). */
bool wsexec_route(const char *url, char *name, size_t namelen);

/* berth-web's answer to C, a request for exec/ws of machine NAME: the
 * checks of RFC 6455's handshake (ws_upgrade_check) and of NAME and the
 * Authorization header's token, then "101 Switching Protocols", after
 * which libmicrohttpd calls UPGRADED (with UPGRADED_CLS) with the socket,
 * which passes *SLOT to wsexec_start; or a JSON refusal as hostd's read
 * (400 invalid_upgrade, 405, 426 with Sec-WebSocket-Version: 13, 400
 * invalid_name, 400 invalid_token, 429 too_many_pending when PEER's group
 * has WSEXEC_MAX_PENDING_PER_ADDR sessions not authenticated yet), the
 * connection kept.  *SLOT (malloc'd here, NULL on a refusal) holds the
 * session's request (NAME, the token, WEB_SOCK, PEER, its place among the
 * pending) until then: the caller keeps it with the request's state
 * (libmicrohttpd's con_cls, which UPGRADED gets) and frees it with
 * wsexec_req_free when the request completes, which is after UPGRADED
 * returns.  What MHD_queue_response returns. */
enum MHD_Result wsexec_answer(struct MHD_Connection *c, const char *method, const char *name,
			      const char *web_sock, const char *peer, struct wsexec_req **slot,
			      MHD_UpgradeHandler upgraded, void *upgraded_cls);

/* Takes over SOCK (a plain socket: libmicrohttpd does TLS), EXTRA_LEN bytes that
 * libmicrohttpd read past the request head, URH (MHD_upgrade_action(urh,
 * MHD_UPGRADE_ACTION_CLOSE) when done) and R's place among the pending (R
 * stays the caller's); runs on a thread of its own.  0, or -1 when no
 * thread could be started (the caller closes). */
int wsexec_start(struct wsexec_req *r, int sock, const char *extra, size_t extra_len,
		 struct MHD_UpgradeResponseHandle *urh);
/* Frees R (wsexec_answer's), giving back its place among the pending
 * unless a session took it.  NULL is fine. */
void wsexec_req_free(struct wsexec_req *r);

/* berth-web stops: every session's client gets close 1001 and its command
 * is killed; no new session starts.  Returns when all have given their
 * sockets back, or after WAIT_MS.  Before MHD_stop_daemon, which frees
 * what the sessions still use. */
void wsexec_stop_all(int wait_ms);

/* ---- the messages (exposed for the unit tests) ----------------------------- */

/* The group of client address PEER (inet_ntop's text) that the cap on
 * pending sessions counts, into OUT (OUTLEN bytes): an IPv4 address
 * itself (also one mapped into IPv6), an IPv6 address's /64
 * ("2001:db8:1:2::/64"); PEER as it is when it is neither. */
void wsexec_addr_group(const char *peer, char *out, size_t outlen);

/* True when TOKEN may go into "Authorization: Bearer TOKEN": 1 to 511
 * characters of RFC 7235's token68 (letters, digits, - . _ ~ + /, then
 * '=' only at the end).  Anything else, a CR or LF above all, would make
 * more of the request than a token. */
bool wsexec_token_ok(const char *token);

/* The client's first message (TEXT, LEN bytes): a JSON object, the body of
 * POST .../exec, with "token" when the request had no Authorization
 * (HEADER_TOKEN ""; a token in both is refused).  Returns the body for
 * hostd: without "token", "stdin_open" true (binary messages are stdin;
 * {"eof": true} ends it), the caller's to decref; the token into TOKEN
 * (TOKENLEN bytes; "" when there is none: hostd then answers 401).  NULL
 * with WHY when the message is none of that. */
json_t *wsexec_first(const char *text, size_t len, const char *header_token, char *token,
		     size_t tokenlen, char *why, size_t whylen);

/* A later text message: exactly one of {"resize": {"cols": C, "rows": R}},
 * {"signal": "INT"} (a signal's name, letters and digits, as POST
 * .../signal takes it) and {"eof": true}. */
enum wsexec_op { WSEXEC_RESIZE, WSEXEC_SIGNAL, WSEXEC_EOF };

struct wsexec_ctl {
	enum wsexec_op op;
	json_int_t cols, rows;     /* WSEXEC_RESIZE (hostd checks 1 to 1000) */
	char signal[16];           /* WSEXEC_SIGNAL */
};

/* Parses the LEN bytes of TEXT into C: 0, or -1 with WHY. */
int wsexec_ctl_parse(const char *text, size_t len, struct wsexec_ctl *c, char *why,
		     size_t whylen);

#endif
