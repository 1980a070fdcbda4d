/*
 * One client connection through the gateway.
 *
 * Shape: the thread of the connection runs one libssh event loop holding the
 * client's session ("down", libssh server) and, once it exists, the session
 * to the machine's sshd ("up", libssh client, see common/sshexec.c).  Every
 * channel the client opens becomes a pair: its down channel and an up
 * channel of the same kind (session, direct-tcpip), and an agent channel the
 * machine opens towards us becomes a pair the other way round.
 *
 * libssh callbacks only record what arrived (a request, a window change, an
 * exit status); the loop does the work between polls: it opens up channels
 * and replays the requests, and moves data.  This keeps every blocking libssh
 * call out of the callbacks, which libssh may run from inside another
 * blocking call of the same event.
 *
 * Data is moved without callbacks: a channel's data stays in libssh's buffer
 * until the loop reads it, and the loop reads no more than the other side's
 * window takes.  libssh re-opens a channel's receive window only as its
 * buffer is read, so a slow reader on either side holds back the sender
 * instead of filling memory.
 *
 * Requests from the client are answered at once (success) and replayed on
 * the machine when the up channel opens; a failure there closes the channel
 * with a message on its stderr and exit status 255, as ssh does for its own
 * errors.  Terminal modes are not forwarded: libssh 0.10 neither exposes the
 * modes a client sends nor sends any but its own (none), so the machine's
 * sshd uses its defaults.
 */
#include "sshgw/proxy.h"

#include <errno.h>
#include <stdarg.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <libssh/callbacks.h>
#include <libssh/libssh.h>

#include "common/log.h"
#include "common/sshexec.h"
#include "common/util.h"
#include "common/hostapi.h"
#include "sshgw/algos.h"
#include "sshgw/pool.h"
#include "common/banned.h"

#define MAX_ENV 16
#define MOVE_BUF (64 * 1024)
#define UP_CONNECT_MS 20000

enum pair_kind { P_SESSION, P_TCPIP, P_AGENT };
enum pair_req { REQ_NONE, REQ_SHELL, REQ_EXEC, REQ_SUBSYSTEM };

struct pair {
	struct pair *next;
	struct conn *c;
	enum pair_kind kind;
	ssh_channel down, up;
	struct ssh_channel_callbacks_struct dcb, ucb;
	bool started;		/* the up side is open (or, P_AGENT, the down side) */
	bool done;
	/* session: what the client asked for, replayed on the machine */
	bool pty;
	char term[64];
	int cols, rows;
	char *env_name[MAX_ENV], *env_value[MAX_ENV];
	int nenv;
	bool agent;
	enum pair_req req;
	char *cmd;		/* exec command or subsystem name */
	bool winch;		/* a window change to pass on */
	char signal[32];	/* a signal to pass on */
	/* direct-tcpip */
	char dhost[256], ohost[64];
	int dport, oport;
	/* how the machine's side ended */
	bool have_status, have_signal, core;
	int status;
	char exit_signal[32];
	bool eof_up, eof_down;	/* EOF sent up / down */
	bool retried;		/* started again on a new session to the machine */
};

struct conn {
	struct gw *g;
	char addr[64];
	int port;
	ssh_session down;
	struct upstream up;	/* up.s: the session to the machine, or NULL */
	bool up_pooled;		/* up came from the pool (and may turn out dead) */
	ssh_event ev;
	struct ssh_server_callbacks_struct scb;
	/* authentication */
	char login[128];
	char machine[64], vm_user[40];
	char owner[64];
	bool authed;
	int refused;
	char *last_key;		/* "TYPE BASE64" of the last key asked about */
	char first_use[200];	/* for the client's stderr: the key's first login */
	bool last_known;
	/* the machine */
	bool up_failed;
	char up_err[256];
	char session_id[64];
	int generation;		/* g->hostd_generation() when it was opened */
	struct pair *pairs;
	/* Set by any callback: something arrived that the loop has not looked
	 * at.  libssh reads every session of the event whenever it reads one,
	 * so data can land in a channel the loop has just passed. */
	bool stirred;
	int64_t t0;
	uint64_t bytes_in, bytes_out;
};

static bool closed(ssh_session s)
{
	return !s || (ssh_get_status(s) & (SSH_CLOSED | SSH_CLOSED_ERROR)) != 0 ||
	       !ssh_is_connected(s);
}

/* ---- hostd -------------------------------------------------------------- */

/* Which user owns KEY ("TYPE BASE64")?  1 and OWNER set, 0 unknown, -1 when
 * hostd cannot say.  SIGNED: the client proved it holds the key, and when
 * this is the key's first such use, c->first_use says so for the client. */
static int key_owner(struct conn *c, const char *key, bool signed_, char *owner, size_t len)
{
	json_t *body = json_pack("{s:s, s:b}", "key", key, "signed", signed_), *resp = NULL;
	char err[256];
	long st;
	int rc = -1;

	if (hostapi_call(c->g->hostd_sock, "POST", "/v1/gateway/auth", body, &st, &resp, err,
			 sizeof(err)) < 0) {
		log_error("%s", err);
	} else if (st == 200 && json_is_string(json_object_get(resp, "user"))) {
		snprintf(owner, len, "%s", json_string_value(json_object_get(resp, "user")));
		if (signed_ && json_is_true(json_object_get(resp, "first_use")))
			snprintf(c->first_use, sizeof(c->first_use), "berth: this is the first "
				 "login with key %s: it signs you in as %s",
				 json_string_value(json_object_get(resp, "fingerprint")) ?: "?",
				 owner);
		rc = 1;
	} else if (st == 404) {
		rc = 0;
	} else {
		log_error("hostd answered %ld to a key lookup: %s", st,
			  hostapi_message(resp, "no message"));
	}
	json_decref(body);
	json_decref(resp);
	return rc;
}

/* Ask hostd for the machine's SSH endpoint (waking it with WAKE).  Returns
 * 0 with *RESP holding it, 1 when the machine is not running (and WAKE is
 * false), -1 with MSG set for the client. */
static int machine_endpoint(struct conn *c, bool wake, json_t **resp, char *msg, size_t len)
{
	json_t *body = json_pack("{s:s, s:s, s:b, s:s}", "user", c->owner, "machine",
				 c->machine, "wake", wake, "from", c->addr);
	char err[256];
	long st;
	int rc = -1;

	*resp = NULL;
	if (hostapi_call(c->g->hostd_sock, "POST", "/v1/gateway/connect", body, &st, resp, err,
			 sizeof(err)) < 0) {
		log_error("%s", err);
		snprintf(msg, len, "the host cannot reach its daemon; try again later");
	} else if (st == 200) {
		rc = 0;
	} else if (st == 409 && !wake) {
		rc = 1;
	} else if (st == 404) {
		snprintf(msg, len, "no machine %s", c->machine);
	} else {
		snprintf(msg, len, "%s", hostapi_message(*resp, "the machine cannot be reached"));
	}
	json_decref(body);
	if (rc != 0) {
		json_decref(*resp);
		*resp = NULL;
	}
	return rc;
}

static void session_opened(struct conn *c)
{
	c->generation = c->g->hostd_generation(c->g->data);
	json_t *body = json_pack("{s:s, s:s, s:s, s:s}", "user", c->owner, "machine", c->machine,
				 "kind", "ssh", "from", c->addr), *resp = NULL;
	char err[256];
	long st;

	if (hostapi_call(c->g->hostd_sock, "POST", "/v1/gateway/sessions", body, &st, &resp, err,
			 sizeof(err)) == 0 && st == 201) {
		json_t *id = json_object_get(resp, "session");
		if (json_is_string(id))
			snprintf(c->session_id, sizeof(c->session_id), "%s", json_string_value(id));
		else if (json_is_integer(id))
			snprintf(c->session_id, sizeof(c->session_id), "%lld",
				 (long long)json_integer_value(id));
	} else {
		log_warn("session of %s/%s not registered with hostd (%ld): the idle policy "
			 "does not see it", c->owner, c->machine, st);
	}
	json_decref(body);
	json_decref(resp);
}

static void session_closed(struct conn *c)
{
	char path[128], err[256];
	json_t *body, *resp = NULL;
	long st;

	if (!c->session_id[0])
		return;
	snprintf(path, sizeof(path), "/v1/gateway/sessions/%s", c->session_id);
	body = json_pack("{s:I, s:I}", "bytes_in", (json_int_t)c->bytes_in, "bytes_out",
			 (json_int_t)c->bytes_out);
	if (hostapi_call(c->g->hostd_sock, "DELETE", path, body, &st, &resp, err,
			 sizeof(err)) < 0 || st != 200)
		log_warn("session %s of %s/%s: hostd did not take its end (%ld)", c->session_id,
			 c->owner, c->machine, st);
	json_decref(body);
	json_decref(resp);
}

/* ---- authentication ----------------------------------------------------- */

static bool vm_user_valid(const char *s, size_t n)
{
	if (n == 0 || n > 32 || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' ||
		      ch == '-' || ch == '.'))
			return false;
	}
	return true;
}

/* LOGIN is NAME or USER+NAME. */
static bool parse_login(struct conn *c, const char *login)
{
	const char *plus = strchr(login, '+');
	const char *name = plus ? plus + 1 : login;

	if (plus && !vm_user_valid(login, (size_t)(plus - login)))
		return false;
	if (!name_valid(name))
		return false;
	snprintf(c->machine, sizeof(c->machine), "%s", name);
	if (plus)
		snprintf(c->vm_user, sizeof(c->vm_user), "%.*s", (int)(plus - login), login);
	else
		c->vm_user[0] = '\0';
	return true;
}

static int on_auth_pubkey(ssh_session s, const char *user, struct ssh_key_struct *pubkey,
			  char signature_state, void *userdata)
{
	struct conn *c = userdata;
	char *b64 = NULL, *key = NULL, owner[64];
	const char *type = ssh_key_type_to_char(ssh_key_type(pubkey));
	int known;

	(void)s;
	if (c->refused >= c->g->max_auth_tries)
		return SSH_AUTH_DENIED;
	if (!user || !parse_login(c, user) || !type ||
	    ssh_pki_export_pubkey_base64(pubkey, &b64) != SSH_OK ||
	    asprintf(&key, "%s %s", type, b64) < 0) {
		ssh_string_free_char(b64);
		c->refused++;
		c->g->auth_failed(c->addr, c->g->data);
		return SSH_AUTH_DENIED;
	}
	ssh_string_free_char(b64);
	/* A client asks about a key, then signs with it: one lookup. */
	if (c->last_key && strcmp(c->last_key, key) == 0) {
		known = c->last_known;
		free(key);
	} else {
		known = key_owner(c, key, false, owner, sizeof(owner));
		if (known < 0) {
			free(key);
			return SSH_AUTH_DENIED;
		}
		free(c->last_key);
		c->last_key = key;
		c->last_known = known == 1;
		if (known == 1)
			snprintf(c->owner, sizeof(c->owner), "%s", owner);
	}
	if (!known) {
		c->refused++;
		c->g->auth_failed(c->addr, c->g->data);
		return SSH_AUTH_DENIED;
	}
	if (signature_state == SSH_PUBLICKEY_STATE_NONE)
		return SSH_AUTH_SUCCESS;	/* "this key would do" */
	if (signature_state != SSH_PUBLICKEY_STATE_VALID) {
		c->refused++;
		c->g->auth_failed(c->addr, c->g->data);
		return SSH_AUTH_DENIED;
	}
	/* Signed: its first use is recorded (hostd may not answer: the
	 * login goes on without the note). */
	known = key_owner(c, c->last_key, true, owner, sizeof(owner));
	if (known == 0 || (known == 1 && strcmp(owner, c->owner) != 0))
		return SSH_AUTH_DENIED;	/* removed (and registered anew) meanwhile */
	snprintf(c->login, sizeof(c->login), "%s", user);
	if (!c->authed && c->g->authenticated)
		c->g->authenticated(c->addr, c->g->data);
	c->authed = true;
	return SSH_AUTH_SUCCESS;
}

/* ---- pairs -------------------------------------------------------------- */

static struct pair *pair_new(struct conn *c, enum pair_kind kind)
{
	struct pair *p = calloc(1, sizeof(*p));

	if (!p)
		abort();
	p->c = c;
	p->kind = kind;
	p->next = c->pairs;
	c->pairs = p;
	c->stirred = true;
	return p;
}

static void free_up_channel(struct pair *p)
{
	if (p->up) {
		ssh_remove_channel_callbacks(p->up, &p->ucb);
		ssh_channel_free(p->up);
		p->up = NULL;
	}
}

static void pair_free(struct pair *p)
{
	/* libssh keeps a freed channel until the peer's close arrives, and
	 * calls its callbacks meanwhile: they must not find P. */
	if (p->down) {
		ssh_remove_channel_callbacks(p->down, &p->dcb);
		ssh_channel_free(p->down);
	}
	free_up_channel(p);
	for (int i = 0; i < p->nenv; i++) {
		free(p->env_name[i]);
		free(p->env_value[i]);
	}
	free(p->cmd);
	free(p);
}

/* Callbacks on every channel: data, EOF, close and window changes only
 * mark the connection; the loop reads the data from libssh's buffer (0: none
 * of it taken here). */
static int on_data(ssh_session s, ssh_channel ch, void *data, uint32_t len, int is_stderr,
		   void *userdata)
{
	struct pair *p = userdata;

	(void)s, (void)ch, (void)data, (void)len, (void)is_stderr;
	p->c->stirred = true;
	return 0;
}

static void on_eof(ssh_session s, ssh_channel ch, void *userdata)
{
	struct pair *p = userdata;

	(void)s, (void)ch;
	p->c->stirred = true;
}

static int on_window(ssh_session s, ssh_channel ch, uint32_t bytes, void *userdata)
{
	struct pair *p = userdata;

	(void)s, (void)ch, (void)bytes;
	p->c->stirred = true;
	return 0;
}

static void watch(struct ssh_channel_callbacks_struct *cb, struct pair *p)
{
	cb->userdata = p;
	cb->channel_data_function = on_data;
	cb->channel_eof_function = on_eof;
	cb->channel_close_function = on_eof;
	cb->channel_write_wontblock_function = on_window;
}

/* Callbacks on the client's session channel: record, answer. */

static int on_pty(ssh_session s, ssh_channel ch, const char *term, int cols, int rows,
		  int pxw, int pxh, void *userdata)
{
	struct pair *p = userdata;

	(void)s, (void)ch, (void)pxw, (void)pxh;
	if (p->started || p->pty)
		return -1;
	p->pty = true;
	snprintf(p->term, sizeof(p->term), "%s", term ? term : "xterm");
	p->cols = cols;
	p->rows = rows;
	return 0;
}

static int on_winch(ssh_session s, ssh_channel ch, int cols, int rows, int pxw, int pxh,
		    void *userdata)
{
	struct pair *p = userdata;

	(void)s, (void)ch, (void)pxw, (void)pxh;
	p->cols = cols;
	p->rows = rows;
	p->winch = true;
	p->c->stirred = true;
	return 0;
}

static int on_env(ssh_session s, ssh_channel ch, const char *name, const char *value,
		  void *userdata)
{
	struct pair *p = userdata;

	(void)s, (void)ch;
	if (p->started || p->nenv == MAX_ENV || !name || !value)
		return -1;
	p->env_name[p->nenv] = strdup(name);
	p->env_value[p->nenv] = strdup(value);
	if (!p->env_name[p->nenv] || !p->env_value[p->nenv])
		abort();
	p->nenv++;
	return 0;
}

static int start_req(struct pair *p, enum pair_req req, const char *arg)
{
	if (p->req != REQ_NONE)
		return -1;
	p->req = req;
	p->c->stirred = true;
	if (arg && !(p->cmd = strdup(arg)))
		abort();
	return 0;
}

static int on_shell(ssh_session s, ssh_channel ch, void *userdata)
{
	(void)s, (void)ch;
	return start_req(userdata, REQ_SHELL, NULL);
}

static int on_exec(ssh_session s, ssh_channel ch, const char *cmd, void *userdata)
{
	(void)s, (void)ch;
	return start_req(userdata, REQ_EXEC, cmd ? cmd : "");
}

static int on_subsystem(ssh_session s, ssh_channel ch, const char *name, void *userdata)
{
	(void)s, (void)ch;
	return start_req(userdata, REQ_SUBSYSTEM, name ? name : "");
}

static void on_agent_req(ssh_session s, ssh_channel ch, void *userdata)
{
	struct pair *p = userdata;

	(void)s, (void)ch;
	p->agent = true;
}

static void on_signal(ssh_session s, ssh_channel ch, const char *sig, void *userdata)
{
	struct pair *p = userdata;

	(void)s, (void)ch;
	if (sig)
		snprintf(p->signal, sizeof(p->signal), "%s", sig);
	p->c->stirred = true;
}

/* Callbacks on the machine's channel. */

static void on_exit_status(ssh_session s, ssh_channel ch, int status, void *userdata)
{
	struct pair *p = userdata;

	(void)s, (void)ch;
	p->have_status = true;
	p->status = status;
	p->c->stirred = true;
}

static void on_exit_signal(ssh_session s, ssh_channel ch, const char *sig, int core,
			   const char *errmsg, const char *lang, void *userdata)
{
	struct pair *p = userdata;

	(void)s, (void)ch, (void)errmsg, (void)lang;
	p->have_signal = true;
	p->c->stirred = true;
	p->core = core != 0;
	snprintf(p->exit_signal, sizeof(p->exit_signal), "%s", sig ? sig : "KILL");
}

static void set_up_callbacks(struct pair *p)
{
	memset(&p->ucb, 0, sizeof(p->ucb));
	watch(&p->ucb, p);
	p->ucb.channel_exit_status_function = on_exit_status;
	p->ucb.channel_exit_signal_function = on_exit_signal;
	ssh_callbacks_init(&p->ucb);
	ssh_set_channel_callbacks(p->up, &p->ucb);
}

static ssh_channel on_session_open(ssh_session s, void *userdata)
{
	struct conn *c = userdata;
	struct pair *p = pair_new(c, P_SESSION);

	p->down = ssh_channel_new(s);
	if (!p->down) {
		p->done = true;
		return NULL;
	}
	memset(&p->dcb, 0, sizeof(p->dcb));
	watch(&p->dcb, p);
	p->dcb.channel_pty_request_function = on_pty;
	p->dcb.channel_pty_window_change_function = on_winch;
	p->dcb.channel_env_request_function = on_env;
	p->dcb.channel_shell_request_function = on_shell;
	p->dcb.channel_exec_request_function = on_exec;
	p->dcb.channel_subsystem_request_function = on_subsystem;
	p->dcb.channel_auth_agent_req_function = on_agent_req;
	p->dcb.channel_signal_function = on_signal;
	ssh_callbacks_init(&p->dcb);
	ssh_set_channel_callbacks(p->down, &p->dcb);
	return p->down;
}

static int ensure_up(struct conn *c, bool wake, struct pair *progress);

/* What the server callbacks leave: direct-tcpip opens (ssh -L, -W,
 * ProxyJump).  The machine's side is opened first, here: its refusal is
 * the client's refusal, as with direct ssh.  This is the one blocking
 * libssh call inside a callback: libssh polls only for output on the
 * client's socket meanwhile (it is locked while its packet is handled), so
 * the machine's session runs and nothing of the client's is re-entered.
 * Everything else gets libssh's default answer (a refusal): returning 1
 * asks for it. */
static int on_message(ssh_session s, ssh_message msg, void *userdata)
{
	struct conn *c = userdata;
	struct pair *p;
	const char *dh, *oh;

	(void)s;
	if (!c->authed || ssh_message_type(msg) != SSH_REQUEST_CHANNEL_OPEN ||
	    ssh_message_subtype(msg) != SSH_CHANNEL_DIRECT_TCPIP)
		return 1;
	dh = ssh_message_channel_request_open_destination(msg);
	oh = ssh_message_channel_request_open_originator(msg);
	if (!dh || strlen(dh) >= sizeof(p->dhost) || ensure_up(c, true, NULL) < 0)
		return 1;
	p = pair_new(c, P_TCPIP);
	snprintf(p->dhost, sizeof(p->dhost), "%s", dh);
	snprintf(p->ohost, sizeof(p->ohost), "%s", oh ? oh : "127.0.0.1");
	p->dport = ssh_message_channel_request_open_destination_port(msg);
	p->oport = ssh_message_channel_request_open_originator_port(msg);
	p->up = ssh_channel_new(c->up.s);
	if (!p->up || ssh_channel_open_forward(p->up, p->dhost, p->dport, p->ohost,
					       p->oport) != SSH_OK) {
		log_info("%s/%s: the machine refused a connection to %s:%d", c->owner, c->machine,
			 p->dhost, p->dport);
		p->done = true;
		return 1;
	}
	set_up_callbacks(p);
	p->down = ssh_message_channel_request_open_reply_accept(msg);
	if (!p->down) {
		ssh_channel_close(p->up);
		p->done = true;
		return 1;
	}
	memset(&p->dcb, 0, sizeof(p->dcb));
	watch(&p->dcb, p);
	ssh_callbacks_init(&p->dcb);
	ssh_set_channel_callbacks(p->down, &p->dcb);
	p->started = true;
	return 0;
}

/* The machine opens an agent channel (the client asked for forwarding). */
static ssh_channel on_agent_open(ssh_session s, void *userdata)
{
	struct conn *c = userdata;
	struct pair *p;

	if (!c)
		return NULL;	/* a pooled session: nobody to forward to */
	p = pair_new(c, P_AGENT);

	p->up = ssh_channel_new(s);
	if (!p->up)
		p->done = true;
	else
		set_up_callbacks(p);
	return p->up;
}

/* ---- the machine's side ------------------------------------------------- */

/* Write TEXT to the client's stderr on P's channel. */
static void tell(struct pair *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tell(struct pair *p, const char *fmt, ...)
{
	char text[512];
	va_list ap;
	int n;

	if (!p || !p->down)
		return;
	va_start(ap, fmt);
	n = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(text) - 1)
		n = (int)sizeof(text) - 1;
	if (n > 0)
		ssh_channel_write_stderr(p->down, text, (uint32_t)n);
}

/* Connect to the machine unless that is done or has failed.  With WAKE a
 * machine that does not run is started or resumed (PROGRESS, when not NULL,
 * gets "waking NAME… ready in 2.3 s"); without, nothing happens to it.
 * Returns 0 when connected, 1 when not running (without WAKE), -1 when it
 * failed (c->up_err says why). */
static int ensure_up(struct conn *c, bool wake, struct pair *progress)
{
	json_t *ep = NULL;
	char msg[256];
	const char *nl = progress && progress->pty ? "\r\n" : "\n";
	int64_t t0 = mono_ms();
	int rc;

	if (c->up.s)
		return 0;
	if (c->up_failed)
		return -1;
	rc = machine_endpoint(c, false, &ep, msg, sizeof(msg));
	if (rc == 1 && !wake)
		return 1;
	if (rc == 1) {
		tell(progress, "waking %s\u2026 ", c->machine);
		rc = machine_endpoint(c, true, &ep, msg, sizeof(msg));
		if (rc == 0)
			tell(progress, "ready in %.1f s%s", (double)(mono_ms() - t0) / 1000, nl);
		else
			tell(progress, "failed%s", nl);
	}
	if (rc != 0)
		goto fail;
	const char *host = json_string_value(json_object_get(ep, "host"));
	const char *user = json_string_value(json_object_get(ep, "user"));
	const char *key = json_string_value(json_object_get(ep, "private_key"));
	json_t *port = json_object_get(ep, "port");
	if (!host || !user || !key || !json_is_integer(port)) {
		snprintf(msg, sizeof(msg), "the host gave no endpoint for %s", c->machine);
		rc = -1;
		goto fail;
	}
	/* The machine must present the host key hostd pinned for it. */
	const char *host_key = json_string_value(json_object_get(ep, "host_key"));
	struct sshexec_target t = { .host = host, .port = (int)json_integer_value(port),
				    .user = c->vm_user[0] ? c->vm_user : user, .key_b64 = key,
				    .host_key = host_key };
	snprintf(c->up.key, sizeof(c->up.key), "%s/%s/%s@%s:%d", c->owner, c->machine, t.user,
		 host, t.port);
	if (pool_take(c->up.key, &c->up)) {
		c->up_pooled = true;
		log_debug("%s/%s: reusing a session to %s:%d", c->owner, c->machine, host,
			  t.port);
	} else {
		char err[256], endpoint[80];
		snprintf(endpoint, sizeof(endpoint), "%s:%d", host, t.port);
		handshake_begin(endpoint);
		c->up.s = sshexec_connect(&t, sshexec_now_ms() + UP_CONNECT_MS, err,
					  sizeof(err));
		handshake_end(endpoint);
		if (!c->up.s) {
			log_warn("%s/%s from %s: %s", c->owner, c->machine, c->addr, err);
			const char *mismatch = strstr(err, "host key mismatch");
			if (mismatch)
				snprintf(msg, sizeof(msg), "refusing to connect to %s: %s", c->machine,
					 mismatch);
			else if (strstr(err, "authentication failed") && c->vm_user[0])
				snprintf(msg, sizeof(msg), "cannot log in to %s as %s", c->machine,
					 c->vm_user);
			else
				snprintf(msg, sizeof(msg), "cannot connect to %s", c->machine);
			rc = -1;
			goto fail;
		}
		log_debug("%s/%s: connected to %s:%d in %lld ms", c->owner, c->machine, host,
			  t.port, (long long)(mono_ms() - t0));
		/* The session runs now: no timeout on what the loop waits for
		 * (both parts: sshexec_connect left what remained of its
		 * deadline in them, and a leftover fraction of a second made
		 * a busy machine's slower answers look like refusals). */
		long zero = 0;
		ssh_options_set(c->up.s, SSH_OPTIONS_TIMEOUT, &zero);
		ssh_options_set(c->up.s, SSH_OPTIONS_TIMEOUT_USEC, &zero);
		c->up.cb = calloc(1, sizeof(*c->up.cb));
		if (!c->up.cb)
			abort();
		c->up.cb->channel_open_request_auth_agent_function = on_agent_open;
		ssh_callbacks_init(c->up.cb);
		ssh_set_callbacks(c->up.s, c->up.cb);
	}
	json_decref(ep);
	c->up.cb->userdata = c;
	ssh_event_add_session(c->ev, c->up.s);
	if (!c->session_id[0])
		session_opened(c);
	return 0;
fail:
	json_decref(ep);
	c->up_failed = true;
	snprintf(c->up_err, sizeof(c->up_err), "%s", msg);
	return -1;
}

/* End P's client side with MSG on its stderr and status 255. */
static void fail_pair(struct pair *p, const char *msg)
{
	if (p->kind == P_SESSION) {
		tell(p, "berth: %s%s", msg, p->pty ? "\r\n" : "\n");
		ssh_channel_request_send_exit_status(p->down, 255);
		ssh_channel_send_eof(p->down);
	}
	if (p->down)
		ssh_channel_close(p->down);
	if (p->up)
		ssh_channel_close(p->up);
	p->done = true;
}

/* Drop the session to the machine; the next channel connects anew. */
static void drop_up(struct conn *c)
{
	ssh_event_remove_session(c->ev, c->up.s);
	upstream_close(&c->up);
	c->up_pooled = false;
}

/* A kept session that refused P's channel or request may be on its way
 * out: when no other channel uses it, drop it (P's own channel first) so
 * that P can try once more on a new one.  Returns whether it did. */
static bool drop_kept_session(struct pair *p)
{
	struct conn *c = p->c;

	if (!c->up_pooled)
		return false;
	for (struct pair *o = c->pairs; o; o = o->next)
		if (o != p && o->up)
			return false;
	free_up_channel(p);
	drop_up(c);
	return true;
}

/* Open P's session channel on the machine (waking it, with the progress
 * line on P).  A session from the pool that turns out dead is replaced by
 * a new one, once.  Returns 0, or -1 with P failed. */
static int open_up(struct pair *p)
{
	struct conn *c = p->c;

	if (c->first_use[0]) {
		tell(p, "%s%s", c->first_use, p->pty ? "\r\n" : "\n");
		c->first_use[0] = '\0';
	}
	for (int attempt = 0;; attempt++) {
		int rc = SSH_ERROR;

		if (ensure_up(c, true, p) < 0) {
			fail_pair(p, c->up_err);
			return -1;
		}
		p->up = ssh_channel_new(c->up.s);
		if (p->up)
			rc = ssh_channel_open_session(p->up);
		if (rc == SSH_OK) {
			set_up_callbacks(p);
			return 0;
		}
		free_up_channel(p);
		log_warn("%s/%s from %s: %s: %s", c->owner, c->machine, c->addr,
			 c->up_pooled ? "a kept session refused a channel" : "the machine refused a channel",
			 ssh_get_error(c->up.s));
		if (attempt > 0 || !drop_kept_session(p))
			break;
	}
	fail_pair(p, "the machine refused a session");
	return -1;
}

/* Open P's machine side and replay what the client asked for. */
static void start_pair(struct pair *p)
{
	struct conn *c = p->c;

	switch (p->kind) {
	case P_SESSION:
		if (p->req == REQ_NONE || open_up(p) < 0)
			return;
		/* Refused variables are dropped, as sshd drops them. */
		for (int i = 0; i < p->nenv; i++)
			ssh_channel_request_env(p->up, p->env_name[i], p->env_value[i]);
		if (p->pty && ssh_channel_request_pty_size(p->up, p->term, p->cols,
							   p->rows) != SSH_OK) {
			fail_pair(p, "the machine refused a terminal");
			return;
		}
		p->winch = false;
		if (p->agent && ssh_channel_request_auth_agent(p->up) != SSH_OK)
			log_debug("%s/%s: the machine refused agent forwarding", c->owner,
				  c->machine);
		if ((p->req == REQ_SHELL && ssh_channel_request_shell(p->up) != SSH_OK) ||
		    (p->req == REQ_EXEC && ssh_channel_request_exec(p->up, p->cmd) != SSH_OK) ||
		    (p->req == REQ_SUBSYSTEM &&
		     ssh_channel_request_subsystem(p->up, p->cmd) != SSH_OK)) {
			char m[128];
			snprintf(m, sizeof(m), "the machine refused the %s",
				 p->req == REQ_SHELL ? "shell" : p->req == REQ_EXEC ? "command" :
				 "subsystem");
			log_warn("%s/%s from %s: %s: %s", c->owner, c->machine, c->addr, m,
				 ssh_get_error(c->up.s));
			if (!p->retried && drop_kept_session(p)) {
				p->retried = true;
				start_pair(p);
				return;
			}
			fail_pair(p, m);
			return;
		}
		break;
	case P_TCPIP:	/* opened in on_message */
		break;
	case P_AGENT:
		p->down = ssh_channel_new(c->down);
		if (!p->down || ssh_channel_open_auth_agent(p->down) != SSH_OK) {
			fail_pair(p, "no agent");
			return;
		}
		memset(&p->dcb, 0, sizeof(p->dcb));
		watch(&p->dcb, p);
		ssh_callbacks_init(&p->dcb);
		ssh_set_channel_callbacks(p->down, &p->dcb);
		break;
	}
	p->started = true;
}

/* Move what SRC holds (its stderr with STDERR_) to DST, no more than DST's
 * window takes.  Returns the bytes moved. */
static size_t move(ssh_channel src, ssh_channel dst, int stderr_, char *buf)
{
	size_t total = 0;

	for (;;) {
		uint32_t w = ssh_channel_window_size(dst);
		int n;

		if (w == 0)
			break;
		n = ssh_channel_read_nonblocking(src, buf, w < MOVE_BUF ? w : MOVE_BUF, stderr_);
		if (n <= 0)
			break;
		if ((stderr_ ? ssh_channel_write_stderr(dst, buf, (uint32_t)n)
			     : ssh_channel_write(dst, buf, (uint32_t)n)) < 0)
			break;
		total += (size_t)n;
	}
	return total;
}

/* One step of a started pair: pass on requests, data, EOF and the end.
 * Returns whether data moved. */
static bool step_pair(struct pair *p, char *buf)
{
	struct conn *c = p->c;
	size_t in, out;

	if (p->winch && p->up) {
		ssh_channel_change_pty_size(p->up, p->cols, p->rows);
		p->winch = false;
	}
	if (p->signal[0] && p->up) {
		ssh_channel_request_send_signal(p->up, p->signal);
		p->signal[0] = '\0';
	}
	in = move(p->down, p->up, 0, buf);
	out = move(p->up, p->down, 0, buf) + move(p->up, p->down, 1, buf);
	c->bytes_in += in;
	c->bytes_out += out;
	if (!p->eof_up && ssh_channel_is_eof(p->down) && ssh_channel_is_open(p->up)) {
		ssh_channel_send_eof(p->up);
		p->eof_up = true;
	}
	if (!p->eof_down && ssh_channel_is_eof(p->up) && ssh_channel_is_open(p->down)) {
		ssh_channel_send_eof(p->down);
		p->eof_down = true;
	}
	if (ssh_channel_is_closed(p->up)) {
		if (ssh_channel_is_open(p->down)) {
			if (p->have_signal)
				ssh_channel_request_send_exit_signal(p->down, p->exit_signal,
								     p->core, "", "");
			else if (p->have_status)
				ssh_channel_request_send_exit_status(p->down, p->status);
			ssh_channel_close(p->down);
		}
		p->done = true;
	} else if (ssh_channel_is_closed(p->down)) {
		ssh_channel_close(p->up);
		p->done = true;
	}
	return in + out > 0;
}

/* ---- the connection ----------------------------------------------------- */

static void serve(struct conn *c)
{
	char *buf = malloc(MOVE_BUF);
	int64_t deadline = mono_ms() + (int64_t)c->g->login_grace_s * 1000;

	if (!buf)
		abort();
	while (!c->authed) {
		if (closed(c->down)) {
			log_debug("connection from %s:%d closed before authentication", c->addr,
				  c->port);
			goto out;
		}
		if (mono_ms() > deadline) {
			log_info("connection from %s:%d: not authenticated within %d s", c->addr,
				 c->port, c->g->login_grace_s);
			goto out;
		}
		if (c->refused >= c->g->max_auth_tries) {
			log_info("connection from %s:%d: %d keys refused", c->addr, c->port,
				 c->refused);
			goto out;
		}
		ssh_event_dopoll(c->ev, 250);
	}
	c->t0 = mono_ms();
	log_debug("%s:%d authenticated as %s for %s", c->addr, c->port, c->owner, c->login);
	/* A running machine is reached while the client opens its channel. */
	ensure_up(c, false, NULL);
	for (;;) {
		bool progress = false;
		c->stirred = false;
		for (struct pair *p = c->pairs; p; p = p->next) {
			if (p->done)
				continue;
			if (!p->started) {
				start_pair(p);
				progress = true;
			}
			/* Data moved: more may wait in libssh's buffers, read
			 * there while the loop wrote. */
			if (p->started && !p->done && step_pair(p, buf))
				progress = true;
		}
		for (struct pair **pp = &c->pairs; *pp;) {
			struct pair *p = *pp;
			if (p->done) {
				*pp = p->next;
				pair_free(p);
				progress = true;
			} else {
				pp = &p->next;
			}
		}
		if (closed(c->down))
			break;
		if (c->session_id[0] && c->generation != c->g->hostd_generation(c->g->data)) {
			/* hostd restarted and forgot this session. */
			c->session_id[0] = '\0';
			session_opened(c);
		}
		if (c->up.s && closed(c->up.s)) {
			/* The machine went away: its channels are closed, and a
			 * new channel will find out why. */
			drop_up(c);
			c->up_failed = true;
			snprintf(c->up_err, sizeof(c->up_err), "connection to %s lost", c->machine);
			continue;
		}
		ssh_event_dopoll(c->ev, progress || c->stirred ? 0 : 1000);
	}
	log_info("session %s/%s as %s from %s:%d: %.1f s, in %llu B, out %llu B", c->owner,
		 c->machine, c->vm_user[0] ? c->vm_user : "default", c->addr, c->port,
		 (double)(mono_ms() - c->t0) / 1000, (unsigned long long)c->bytes_in,
		 (unsigned long long)c->bytes_out);
out:
	free(buf);
}

bool proxy_serve(struct gw *g, int fd, const char *addr, int port)
{
	struct conn *c = calloc(1, sizeof(*c));
	/* The key exchange within kex_timeout_s, authentication within
	 * login_grace_s (serve's deadline). */
	long kex = g->kex_timeout_s > 0 && g->kex_timeout_s < g->login_grace_s ? g->kex_timeout_s
									       : g->login_grace_s;
	int one = 1;
	bool authed;

	if (!c)
		abort();
	c->g = g;
	c->port = port;
	snprintf(c->addr, sizeof(c->addr), "%s", addr);
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	c->down = ssh_new();
	if (!c->down) {
		close(fd);
		free(c);
		return false;
	}
	ssh_options_set(c->down, SSH_OPTIONS_TIMEOUT, &kex);
	if (ssh_bind_accept_fd(g->bind, c->down, fd) != SSH_OK) {
		log_error("accept %s:%d: %s", addr, port, ssh_get_error(g->bind));
		close(fd);
		goto out;
	}
	/* What the bind cannot set (algos.c). */
	if (algos_session(c->down) < 0)
		goto out;
	/* Before the key exchange: the client's first requests can arrive in
	 * the same read as its last key exchange packet, and a request that
	 * finds no callback is queued where nobody looks. */
	memset(&c->scb, 0, sizeof(c->scb));
	c->scb.userdata = c;
	c->scb.auth_pubkey_function = on_auth_pubkey;
	c->scb.channel_open_request_session_function = on_session_open;
	ssh_callbacks_init(&c->scb);
	ssh_set_server_callbacks(c->down, &c->scb);
	ssh_set_message_callback(c->down, on_message, c);
	ssh_set_auth_methods(c->down, SSH_AUTH_METHOD_PUBLICKEY);
	if (ssh_handle_key_exchange(c->down) != SSH_OK) {
		log_info("connection from %s:%d: no key exchange: %s", addr, port,
			 ssh_get_error(c->down));
		goto out;
	}
	long zero = 0;
	ssh_options_set(c->down, SSH_OPTIONS_TIMEOUT, &zero);
	c->ev = ssh_event_new();
	if (!c->ev || ssh_event_add_session(c->ev, c->down) != SSH_OK)
		goto out;
	serve(c);
out:
	while (c->pairs) {
		struct pair *p = c->pairs;
		c->pairs = p->next;
		pair_free(p);
	}
	session_closed(c);
	if (c->up.s) {
		if (c->ev)
			ssh_event_remove_session(c->ev, c->up.s);
		/* Every channel is closed (the pairs are freed): the next
		 * connection to this machine may take it. */
		if (c->ev && !closed(c->up.s))
			pool_put(&c->up);
		else
			upstream_close(&c->up);
	}
	if (c->ev) {
		ssh_event_remove_session(c->ev, c->down);
		ssh_event_free(c->ev);
	}
	/* The server session owns its socket (unlike an up session, see
	 * sshexec_disconnect): ssh_disconnect closes it. */
	ssh_disconnect(c->down);
	ssh_free(c->down);
	free(c->last_key);
	authed = c->authed;
	free(c);
	return authed;
}
