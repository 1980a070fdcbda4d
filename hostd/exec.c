#include "hostd/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libssh/libssh.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/sshexec.h"
#include "common/util.h"
#include "hostd/api.h"
#include "hostd/hostd.h"
#include "hostd/idle.h"
#include "hostd/machine.h"
#include "hostd/quota.h"
#include "common/banned.h"

/* Output is read in pieces of this much: a line of about 43 KiB. */
#define EXEC_PIECE (32 * 1024)
/* The longest timeout a request may ask for: a week. */
#define EXEC_TIMEOUT_MAX (7 * 24 * 3600)
/* After the timeout's SIGKILL, how long the command gets to be reported
 * dead before its run is ended without it. */
#define EXEC_KILL_GRACE_MS 5000
/* How long exec_stdin waits for the command to take its bytes. */
#define EXEC_STDIN_WAIT_MS 5000
/* SSH sessions kept for the next command in the same machine: for this
 * long, this many per machine and in all (each holds an sshd process in
 * its guest). */
#define EXEC_POOL_TTL_MS 60000
#define EXEC_POOL_PER_MACHINE 4
#define EXEC_POOL_MAX 64
/* Detached commands ("detach": true, hostd/exec.h): the longest life of
 * one started without a timeout (a day: none lives for ever unobserved);
 * how long one that ended stays attachable for its last line; the output
 * kept for readers behind the newest (beyond it, the command waits for
 * them); readers of one command at once. */
#define EXEC_DETACHED_MAX_S (24 * 3600)
#define EXEC_RETAIN_MS 60000
#define EXEC_LOG_MAX (256 * 1024)
#define EXEC_ATTACH_MAX 16

enum stage { ST_HEAD, ST_RUNNING, ST_LAST, ST_DONE };

struct exec {
	struct execs *xs;
	struct hostd *h;
	int64_t id;
	char owner[64], machine_id[37], machine[64];
	char user[33];           /* the request's "user", "" for the image's */
	char *what;              /* for the list: the argv or the shell string, as JSON */
	int64_t started;         /* seconds since the epoch */
	int64_t deadline_ms;     /* mono_ms of the timeout, 0 for none */
	int64_t woke_ms;         /* how long its machine took to wake, -1: it ran */
	int cols, rows;          /* its terminal's size (0: none) */
	char term[32];

	/* What the thread runs: the strings are the exec's. */
	struct sshexec_target t;
	char host[64], login[64], *host_key, *cmd;

	pthread_t thread;
	bool thread_on;
	/* The thread's ends of the pipes (closed by the thread when it ends)
	 * and the reader's. */
	int in_r, out_w, err_w, ctl_r;
	int out_r, err_r;
	/* Others' ends, under lock: stdin (-1 once closed) and signals. */
	pthread_mutex_t lock;
	int in_w, ctl_w;
	const char *ended_why;   /* set when berth ended it: "its machine was deleted" */

	/* The thread's outcome, read after the join. */
	int rc;
	bool reused;             /* on a kept session */
	struct sshexec_io io;
	char err[512];

	/* The reader's. */
	enum stage stage;
	bool out_eof, err_eof, timed_out, killed;
	int64_t kill_ms, touched_ms;
	int64_t said_ms;         /* when the stream last had a line */
	struct buf line;
	size_t line_off;

	/* Detached: the pump thread is the only reader (exec_read); what it
	 * read is in LOG for the attached readers, from byte LOG_BASE of the
	 * whole stream on.  Under log_lock, signalled on COND. */
	bool detached;
	pthread_mutex_t log_lock;
	pthread_cond_t cond;
	struct buf log;
	uint64_t log_base;
	bool log_ended;          /* the stream's last line is in */
	bool over;               /* ended: no longer listed, found only to attach */
	bool dying;              /* the pump is freeing it: no new reader */
	char *final;             /* the last line */
	struct exec_attach *readers;
	int nreaders;
	struct exec_attach *first;   /* exec_start's own, for the POST's stream */

	struct exec *next;
};

/* A reader of a detached command's stream. */
struct exec_attach {
	struct exec *x;
	uint64_t off;            /* the next byte of the stream it reads */
	struct buf pre;          /* its own lines first ({"id"}, a past end) */
	size_t pre_off;
	struct exec_attach *next;
};

/* A session kept for reuse: to MACHINE_ID as LOGIN at HOST:PORT, which
 * presented HOST_KEY.  A session runs one command at a time: taking it
 * removes it. */
struct pooled {
	struct pooled *next;
	ssh_session s;
	char machine_id[37], login[64], host[64];
	int port;
	char *host_key;
	int64_t expires;
};

struct execs {
	pthread_mutex_t lock;
	struct exec *list;
	int64_t next_id;
	bool stopping;
	pthread_mutex_t pool_lock;
	struct pooled *pool;
	int npool;
	int pumps;               /* detached commands' threads running (under lock) */
};

const char *const exec_fields[] = { "argv", "cmd", "env", "cwd", "user", "stdin",
				    "stdin_open", "timeout", "wake", "connect_timeout", "pty",
				    "detach", NULL };

static void *pump(void *arg);

struct execs *execs_new(void)
{
	struct execs *xs = calloc(1, sizeof(*xs));

	if (!xs)
		abort();
	pthread_mutex_init(&xs->lock, NULL);
	pthread_mutex_init(&xs->pool_lock, NULL);
	xs->next_id = 1;
	return xs;
}

/* ---- the sessions kept ------------------------------------------------- */

static void pooled_close(struct pooled *p)
{
	sshexec_disconnect(p->s);
	free(p->host_key);
	free(p);
}

/* Unlink into *DEAD the entries that expired, or are MACHINE_ID's (NULL:
 * none), or all (ALL); pool_lock held. */
static void pool_unlink(struct execs *xs, const char *machine_id, bool all,
			struct pooled **dead)
{
	int64_t now = mono_ms();

	for (struct pooled **pp = &xs->pool; *pp;) {
		struct pooled *p = *pp;
		if (all || p->expires <= now || (machine_id && !strcmp(p->machine_id, machine_id))) {
			*pp = p->next;
			xs->npool--;
			p->next = *dead;
			*dead = p;
		} else {
			pp = &p->next;
		}
	}
}

static void pool_close_all(struct pooled *dead)
{
	while (dead) {
		struct pooled *p = dead;
		dead = p->next;
		pooled_close(p);
	}
}

/* Whose a kept session is: the machine, and the target it was made for. */
struct pool_key {
	const char *machine_id;
	const struct sshexec_target *t;
};

static bool pooled_for(const struct pooled *p, const struct pool_key *k)
{
	return !strcmp(p->machine_id, k->machine_id) && !strcmp(p->login, k->t->user) &&
	       !strcmp(p->host, k->t->host) && p->port == k->t->port &&
	       !strcmp(p->host_key, k->t->host_key ? k->t->host_key : "");
}

/* A kept session for K, or NULL.  One on which anything arrived while it
 * was kept (its end, most likely: it has no channel) is closed instead. */
static ssh_session pool_take(struct execs *xs, const struct pool_key *k)
{
	struct pooled *dead = NULL, *found = NULL;

	pthread_mutex_lock(&xs->pool_lock);
	pool_unlink(xs, NULL, false, &dead);
	for (struct pooled **pp = &xs->pool; *pp && !found;) {
		struct pooled *p = *pp;
		if (!pooled_for(p, k)) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		xs->npool--;
		if (sshexec_session_quiet(p->s)) {
			found = p;
		} else {
			p->next = dead;
			dead = p;
		}
	}
	pthread_mutex_unlock(&xs->pool_lock);
	pool_close_all(dead);
	if (!found)
		return NULL;
	ssh_session s = found->s;
	found->s = NULL;
	pooled_close(found);
	return s;
}

/* Keep S (its channels closed) for K's next command, or close it. */
static void pool_put(struct execs *xs, const struct pool_key *k, ssh_session s)
{
	struct pooled *dead = NULL, *p;
	int mine = 0;

	p = calloc(1, sizeof(*p));
	if (!p)
		abort();
	p->s = s;
	snprintf(p->machine_id, sizeof(p->machine_id), "%s", k->machine_id);
	snprintf(p->login, sizeof(p->login), "%s", k->t->user);
	snprintf(p->host, sizeof(p->host), "%s", k->t->host);
	p->port = k->t->port;
	p->host_key = strdup(k->t->host_key ? k->t->host_key : "");
	if (!p->host_key)
		abort();
	p->expires = mono_ms() + EXEC_POOL_TTL_MS;
	pthread_mutex_lock(&xs->pool_lock);
	pool_unlink(xs, NULL, false, &dead);
	for (struct pooled *q = xs->pool; q; q = q->next)
		mine += !strcmp(q->machine_id, k->machine_id);
	if (!xs->stopping && xs->npool < EXEC_POOL_MAX && mine < EXEC_POOL_PER_MACHINE) {
		p->next = xs->pool;
		xs->pool = p;
		xs->npool++;
		p = NULL;
	}
	pthread_mutex_unlock(&xs->pool_lock);
	if (p)
		pooled_close(p);
	pool_close_all(dead);
}

/* Ask X's run to end: SIGKILL to the command, then the end of the run. */
static void end_run(struct exec *x, const char *why)
{
	unsigned char b[2] = { SIGKILL, SSHEXEC_CTL_END };

	pthread_mutex_lock(&x->lock);
	if (why && !x->ended_why)
		x->ended_why = why;
	if (x->ctl_w >= 0 && write(x->ctl_w, b, sizeof(b)) < 0)
		log_debug("exec %lld: control pipe: %s", (long long)x->id, strerror(errno));
	pthread_mutex_unlock(&x->lock);
}

void execs_stop(struct execs *xs)
{
	struct exec *x;

	if (!xs)
		return;
	struct pooled *dead = NULL;

	pthread_mutex_lock(&xs->lock);
	xs->stopping = true;
	for (x = xs->list; x; x = x->next) {
		end_run(x, "berth-hostd stopped");
		if (x->detached) {
			pthread_mutex_lock(&x->log_lock);
			pthread_cond_broadcast(&x->cond);
			pthread_mutex_unlock(&x->log_lock);
		}
	}
	pthread_mutex_unlock(&xs->lock);
	pthread_mutex_lock(&xs->pool_lock);
	pool_unlink(xs, NULL, true, &dead);
	pthread_mutex_unlock(&xs->pool_lock);
	pool_close_all(dead);
}

void execs_free(struct execs *xs)
{
	if (!xs)
		return;
	/* Detached commands' threads end once their readers went (the API's
	 * connections ended): up to 10 s. */
	for (int i = 0; i < 1000; i++) {
		pthread_mutex_lock(&xs->lock);
		int n = xs->pumps;
		pthread_mutex_unlock(&xs->lock);
		if (!n)
			break;
		usleep(10000);
	}
	/* The streams ended with the API's connections (api_stop): each
	 * took its exec out of the list. */
	if (xs->list)
		log_warn("%s: commands still listed at exit", __func__);
	pthread_mutex_destroy(&xs->lock);
	pthread_mutex_destroy(&xs->pool_lock);
	free(xs);
}

void execs_machine_gone(struct execs *xs, const char *machine_id)
{
	struct exec *x;

	pthread_mutex_lock(&xs->lock);
	for (x = xs->list; x; x = x->next)
		if (!strcmp(x->machine_id, machine_id))
			end_run(x, "its machine was deleted");
	pthread_mutex_unlock(&xs->lock);
	execs_machine_reset(xs, machine_id);
}

void execs_machine_reset(struct execs *xs, const char *machine_id)
{
	struct pooled *dead = NULL;

	pthread_mutex_lock(&xs->pool_lock);
	pool_unlink(xs, machine_id, false, &dead);
	pthread_mutex_unlock(&xs->pool_lock);
	pool_close_all(dead);
}

ssh_session exec_session_get(struct execs *xs, const char *machine_id,
			     const struct sshexec_target *t, bool *kept, char *err, size_t errlen)
{
	struct pool_key k = { machine_id, t };
	ssh_session s = pool_take(xs, &k);

	*kept = s != NULL;
	if (s)
		return s;
	return sshexec_connect(t, sshexec_now_ms() + t->connect_timeout_ms, err, errlen);
}

void exec_session_put(struct execs *xs, const char *machine_id, const struct sshexec_target *t,
		      ssh_session s, bool keep)
{
	struct pool_key k = { machine_id, t };

	if (s && keep && ssh_is_connected(s))
		pool_put(xs, &k, s);
	else
		sshexec_disconnect(s);
}

static void *run(void *arg)
{
	struct exec *x = arg;

	struct pool_key k = { x->machine_id, &x->t };
	long long deadline = sshexec_now_ms() + x->t.connect_timeout_ms;
	ssh_session s = pool_take(x->xs, &k);

	x->io = (struct sshexec_io){ .in = x->in_r, .out = x->out_w, .err = x->err_w,
				     .ctl = x->ctl_r, .pty_cols = x->cols, .pty_rows = x->rows };
	snprintf(x->io.term, sizeof(x->io.term), "%s", x->term);
	if (s) {
		x->rc = sshexec_run_session(s, &x->t, x->cmd, &x->io, deadline, x->err,
					    sizeof(x->err));
		x->reused = true;
		if (x->rc < 0 && !x->io.started) {
			/* The kept session had died: a new one. */
			sshexec_disconnect(s);
			s = NULL;
			x->reused = false;
		}
	}
	if (!s) {
		/* The whole time again: a kept session that died may have
		 * taken it all (a guest restored from memory older than it
		 * never answers). */
		deadline = sshexec_now_ms() + x->t.connect_timeout_ms;
		s = sshexec_connect(&x->t, deadline, x->err, sizeof(x->err));
		x->rc = s ? sshexec_run_session(s, &x->t, x->cmd, &x->io, deadline, x->err,
						sizeof(x->err))
			  : -1;
	}
	if (s && x->rc == 0 && ssh_is_connected(s))
		pool_put(x->xs, &k, s);
	else
		sshexec_disconnect(s);
	/* EOF for the reader: the stream's last line follows. */
	close(x->out_w);
	close(x->err_w);
	close(x->in_r);
	close(x->ctl_r);
	x->out_w = x->err_w = x->in_r = x->ctl_r = -1;
	return NULL;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void exec_free(struct exec *x)
{
	close_fd(&x->in_r);
	close_fd(&x->out_w);
	close_fd(&x->err_w);
	close_fd(&x->ctl_r);
	close_fd(&x->out_r);
	close_fd(&x->err_r);
	close_fd(&x->in_w);
	close_fd(&x->ctl_w);
	pthread_mutex_destroy(&x->lock);
	pthread_mutex_destroy(&x->log_lock);
	pthread_cond_destroy(&x->cond);
	buf_free(&x->log);
	free(x->final);
	buf_free(&x->line);
	free(x->what);
	free(x->host_key);
	free(x->cmd);
	free(x);
}

/* ---- the request ------------------------------------------------------- */

/* A POSIX shell word for S (single quotes, ' as '\''). */
static void add_word(struct buf *b, const char *s)
{
	char *argv[2] = { (char *)s, NULL };
	char *q = sshexec_quote(argv);

	if (!q)
		abort();
	buf_adds(b, q);
	free(q);
}

static bool env_name_valid(const char *k)
{
	if (!*k || strlen(k) > 128 || (*k >= '0' && *k <= '9'))
		return false;
	return strspn(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") ==
	       strlen(k);
}

static bool login_name_valid(const char *u)
{
	if (!*u || strlen(u) > 32 || *u == '-')
		return false;
	return strspn(u, "abcdefghijklmnopqrstuvwxyz0123456789_-.") == strlen(u);
}

/* REQ's command fields (argv or cmd, env, cwd, user), checked before
 * anything wakes: 0, or -1 with E (400 "invalid_exec") naming the field. */
static int check_cmd(json_t *req, struct err *e)
{
	json_t *argv = json_object_get(req, "argv"), *sh = json_object_get(req, "cmd");
	json_t *env = json_object_get(req, "env"), *cwd = json_object_get(req, "cwd");
	json_t *u = json_object_get(req, "user"), *v;
	const char *k;
	size_t i;

	if (!argv == !sh)
		return err_set(e, 400, "invalid_exec", "give the command as \"argv\" (a list of "
			       "strings) or as \"cmd\" (a shell command line), one of them");
	if (argv && (!json_is_array(argv) || json_array_size(argv) == 0))
		return err_set(e, 400, "invalid_exec", "\"argv\" must be a list of one or more "
			       "strings");
	if (sh && (!json_is_string(sh) || !*json_string_value(sh)))
		return err_set(e, 400, "invalid_exec", "\"cmd\" must be a non-empty string");
	json_array_foreach(argv, i, v)
		if (!json_is_string(v))
			return err_set(e, 400, "invalid_exec", "argv[%zu] is not a string", i);
	if (env && !json_is_object(env))
		return err_set(e, 400, "invalid_exec", "\"env\" must be an object of strings");
	json_object_foreach(env, k, v) {
		if (!env_name_valid(k))
			return err_set(e, 400, "invalid_exec", "env: '%.64s' is not a variable name "
				       "(letters, digits and _, not starting with a digit)", k);
		if (!json_is_string(v))
			return err_set(e, 400, "invalid_exec", "env: %s must be a string", k);
	}
	if (cwd && (!json_is_string(cwd) || !*json_string_value(cwd)))
		return err_set(e, 400, "invalid_exec", "\"cwd\" must be a non-empty string");
	if (u && (!json_is_string(u) || !login_name_valid(json_string_value(u))))
		return err_set(e, 400, "invalid_exec", "\"user\" must be a user name of the "
			       "machine's (letters, digits, _ - ., at most 32)");
	return 0;
}

/* The guest's command line for REQ (check_cmd passed) into CMD, its
 * description (the argv or the shell string, as JSON) into *WHAT, and the
 * user it runs as, when not the image's, into USER.  LOGIN is the image's
 * user: another "user" runs through su (as root) or sudo -n. */
static void build_cmd(json_t *req, const char *login, struct buf *cmd, char **what, char *user,
		      size_t userlen)
{
	json_t *argv = json_object_get(req, "argv"), *sh = json_object_get(req, "cmd");
	json_t *env = json_object_get(req, "env"), *cwd = json_object_get(req, "cwd");
	json_t *u = json_object_get(req, "user"), *v;
	struct buf inner = BUF_INIT;
	const char *k;
	size_t i;

	/* cd DIR && exec env K=V... ARGV (or: sh -c CMD) */
	if (cwd) {
		buf_adds(&inner, "cd ");
		add_word(&inner, json_string_value(cwd));
		buf_adds(&inner, " && ");
	}
	buf_adds(&inner, "exec");
	if (json_object_size(env)) {
		buf_adds(&inner, " env");
		json_object_foreach(env, k, v) {
			char *kv = NULL;
			if (asprintf(&kv, "%s=%s", k, json_string_value(v)) < 0)
				abort();
			buf_adds(&inner, " ");
			add_word(&inner, kv);
			free(kv);
		}
	}
	if (argv) {
		json_array_foreach(argv, i, v) {
			buf_adds(&inner, " ");
			add_word(&inner, json_string_value(v));
		}
	} else {
		buf_adds(&inner, " sh -c ");
		add_word(&inner, json_string_value(sh));
	}
	json_t *w = json_pack("{s:O}", argv ? "argv" : "cmd", argv ? argv : sh);
	if (cwd)
		json_object_set(w, "cwd", cwd);
	if (json_object_size(env))
		json_object_set(w, "env", env);
	*what = json_dumps(w, JSON_COMPACT);
	json_decref(w);
	if (!*what)
		abort();
	user[0] = '\0';
	if (u && strcmp(json_string_value(u), login)) {
		snprintf(user, userlen, "%s", json_string_value(u));
		/* The image's user is root (su) or may sudo (berth's images). */
		if (!strcmp(login, "root")) {
			buf_adds(cmd, "exec su -s /bin/sh -c ");
			add_word(cmd, buf_str(&inner));
			buf_adds(cmd, " ");
			add_word(cmd, user);
		} else {
			buf_adds(cmd, "exec sudo -n -u ");
			add_word(cmd, user);
			buf_adds(cmd, " -- sh -c ");
			add_word(cmd, buf_str(&inner));
		}
	} else {
		buf_add(cmd, inner.data, inner.len);
	}
	buf_free(&inner);
}

/* A pipe whose ends are close-on-exec; R and W may be made nonblocking. */
static int pipe_pair(int *r, int *w, bool r_nonblock, bool w_nonblock)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	if (r_nonblock)
		fcntl(p[0], F_SETFL, O_NONBLOCK);
	if (w_nonblock)
		fcntl(p[1], F_SETFL, O_NONBLOCK);
	*r = p[0];
	*w = p[1];
	return 0;
}

struct exec *exec_start(struct hostd *h, const char *owner, const char *name, json_t *req,
			struct err *e)
{
	struct buf cmd = BUF_INIT, in0 = BUF_INIT;
	struct machine_ssh s;
	struct exec *x = NULL;
	json_int_t timeout = 0, connect_s = 0, cols = 0, rows = 0;
	const char *term = "";
	json_t *v;
	char *what = NULL, user[33];
	bool wake = true, stdin_open = false, counted = false, detach = false;

	if ((v = json_object_get(req, "wake")) && !json_is_boolean(v)) {
		err_set(e, 400, "invalid_exec", "\"wake\" must be true or false");
		goto fail;
	}
	wake = !v || json_is_true(v);
	if ((v = json_object_get(req, "stdin_open")) && !json_is_boolean(v)) {
		err_set(e, 400, "invalid_exec", "\"stdin_open\" must be true or false");
		goto fail;
	}
	stdin_open = v && json_is_true(v);
	if ((v = json_object_get(req, "detach")) && !json_is_boolean(v)) {
		err_set(e, 400, "invalid_exec", "\"detach\" must be true or false");
		goto fail;
	}
	detach = v && json_is_true(v);
	if ((v = json_object_get(req, "timeout"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > EXEC_TIMEOUT_MAX) {
			err_set(e, 400, "invalid_exec", "\"timeout\" must be whole seconds from 0 "
				"(none) to %d", EXEC_TIMEOUT_MAX);
			goto fail;
		}
		timeout = json_integer_value(v);
	}
	if ((v = json_object_get(req, "connect_timeout"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 3600) {
			err_set(e, 400, "invalid_exec", "\"connect_timeout\" must be whole seconds "
				"from 1 to 3600");
			goto fail;
		}
		connect_s = json_integer_value(v);
	}
	if ((v = json_object_get(req, "pty"))) {
		if (json_unpack(v, "{s:I, s:I, s?s}", "cols", &cols, "rows", &rows, "term",
				&term) < 0 || cols < 1 || cols > 1000 || rows < 1 || rows > 1000 ||
		    strlen(term) >= 32 || strspn(term, "abcdefghijklmnopqrstuvwxyz0123456789-") !=
		    strlen(term)) {
			err_set(e, 400, "invalid_exec", "\"pty\" must be {\"cols\": 1-1000, "
				"\"rows\": 1-1000, \"term\"?: \"xterm-256color\"}");
			goto fail;
		}
	}
	if ((v = json_object_get(req, "stdin")) &&
	    (!json_is_string(v) ||
	     buf_add_unbase64(&in0, json_string_value(v), json_string_length(v)) < 0)) {
		err_set(e, 400, "invalid_exec", "\"stdin\" must be base64");
		goto fail;
	}
	if (check_cmd(req, e) < 0)
		goto fail;
	if (quota_begin(h, owner, QUOTA_EXECS, e) < 0)
		goto fail;
	counted = true;
	if (machine_ssh(h, owner, name, wake, &s, e) < 0)
		goto fail;
	build_cmd(req, s.user, &cmd, &what, user, sizeof(user));

	x = calloc(1, sizeof(*x));
	if (!x)
		abort();
	x->in_r = x->out_w = x->err_w = x->ctl_r = x->out_r = x->err_r = x->in_w = x->ctl_w = -1;
	pthread_mutex_init(&x->lock, NULL);
	pthread_mutex_init(&x->log_lock, NULL);
	pthread_cond_init(&x->cond, NULL);
	x->detached = detach;
	/* A detached command outlives its readers, not a day without a
	 * timeout of its own. */
	if (detach && !timeout)
		timeout = EXEC_DETACHED_MAX_S;
	x->xs = h->execs;
	x->h = h;
	snprintf(x->owner, sizeof(x->owner), "%s", owner);
	snprintf(x->machine_id, sizeof(x->machine_id), "%s", s.m.id);
	snprintf(x->machine, sizeof(x->machine), "%s", name);
	snprintf(x->user, sizeof(x->user), "%s", user);
	snprintf(x->host, sizeof(x->host), "%s", s.host);
	snprintf(x->login, sizeof(x->login), "%s", s.user);
	x->what = what;
	what = NULL;
	x->host_key = strdup(s.m.host_key);
	x->cmd = buf_detach(&cmd);
	if (!x->host_key || !x->cmd)
		abort();
	x->started = now_s();
	x->woke_ms = s.woke_ms;
	x->cols = (int)cols;
	x->rows = (int)rows;
	snprintf(x->term, sizeof(x->term), "%s", term);
	x->deadline_ms = timeout ? mono_ms() + (int64_t)timeout * 1000 : 0;
	x->t = (struct sshexec_target){ .host = x->host, .port = s.port, .user = x->login,
					.key_b64 = h->key.private_pem,
					.connect_timeout_ms = machine_ssh_timeout_ms(h),
					.host_key = x->host_key };
	if (connect_s)
		x->t.connect_timeout_ms = (int)connect_s * 1000;
	if (pipe_pair(&x->in_r, &x->in_w, false, true) < 0 ||
	    pipe_pair(&x->out_r, &x->out_w, true, false) < 0 ||
	    pipe_pair(&x->err_r, &x->err_w, true, false) < 0 ||
	    pipe_pair(&x->ctl_r, &x->ctl_w, false, true) < 0) {
		err_errno(e, errno, "exec in %s: pipe", name);
		goto fail;
	}
	/* The request's stdin goes in first; then the stream stays open for
	 * POST .../exec/ID/stdin, or ends here. */
	if (in0.len) {
		if ((size_t)fcntl(x->in_w, F_GETPIPE_SZ) < in0.len)
			fcntl(x->in_w, F_SETPIPE_SZ, (int)in0.len);
		if (write(x->in_w, in0.data, in0.len) != (ssize_t)in0.len) {
			err_set(e, 413, "stdin_too_large", "\"stdin\" of %zu bytes does not fit in "
				"one request's pipe; send it with POST .../exec/ID/stdin", in0.len);
			goto fail;
		}
	}
	if (!stdin_open)
		close_fd(&x->in_w);

	pthread_mutex_lock(&h->execs->lock);
	if (h->execs->stopping) {
		pthread_mutex_unlock(&h->execs->lock);
		err_set(e, 503, "stopping", "berth-hostd is stopping");
		goto fail;
	}
	x->id = h->execs->next_id++;
	if (pthread_create(&x->thread, NULL, run, x) != 0) {
		pthread_mutex_unlock(&h->execs->lock);
		err_set(e, 500, "internal", "exec in %s: cannot start a thread", name);
		goto fail;
	}
	x->thread_on = true;
	if (detach) {
		pthread_t t;
		/* The POST's own stream reads from the start: {"id"} first. */
		x->first = calloc(1, sizeof(*x->first));
		if (!x->first)
			abort();
		x->first->x = x;
		x->readers = x->first;
		x->nreaders = 1;
		if (pthread_create(&t, NULL, pump, x) != 0) {
			/* Not detached after all: the POST's reader ends it. */
			log_warn("exec %lld in %s: cannot start its pump thread; it ends with "
				 "its stream", (long long)x->id, name);
			free(x->first);
			x->first = NULL;
			x->readers = NULL;
			x->nreaders = 0;
			x->detached = false;
		} else {
			pthread_detach(t);
			h->execs->pumps++;
		}
	}
	x->next = h->execs->list;
	h->execs->list = x;
	pthread_mutex_unlock(&h->execs->lock);
	log_info("exec %lld in %s/%s%s%s%s: %s", (long long)x->id, owner, name,
		 user[0] ? " as " : "", user, x->detached ? " (detached)" : "", x->what);
	buf_free(&in0);
	return x;
fail:
	if (counted)
		quota_end(h, owner, QUOTA_EXECS);
	if (x)
		exec_free(x);
	buf_free(&cmd);
	buf_free(&in0);
	free(what);
	return NULL;
}

/* ---- the stream -------------------------------------------------------- */

/* The stream's last line, after the thread ended. */
static void last_line(struct exec *x)
{
	json_t *j;

	if (x->rc == 0) {
		j = json_pack("{s:i}", "exit", x->io.status);
		if (x->io.signal[0])
			json_object_set_new(j, "signal", json_string(x->io.signal));
	} else if (x->ended_why) {
		j = json_pack("{s:{s:s, s:s}}", "error", "code", "ended", "message",
			      x->ended_why);
	} else {
		j = json_pack("{s:{s:s, s:s}}", "error", "code", "ssh_failed", "message", x->err);
	}
	if (x->timed_out)
		json_object_set_new(j, "timed_out", json_true());
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!s)
		abort();
	buf_adds(&x->line, s);
	buf_adds(&x->line, "\n");
	free(x->final);
	if (asprintf(&x->final, "%s\n", s) < 0)
		abort();
	free(s);
	log_info("exec %lld in %s/%s ended: %.*s%s", (long long)x->id, x->owner, x->machine,
		 (int)x->line.len - 1, buf_str(&x->line), x->reused ? " (on a kept session)" : "");
}

/* One piece of FD (stdout or stderr) as a line, or EOF noted. */
static void read_piece(struct exec *x, int fd, const char *key, bool *eof)
{
	char piece[EXEC_PIECE];
	ssize_t n = read(fd, piece, sizeof(piece));

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		*eof = true;
		return;
	}
	buf_printf(&x->line, "{\"%s\":\"", key);
	buf_add_base64(&x->line, piece, (size_t)n);
	buf_adds(&x->line, "\"}\n");
}

ssize_t exec_read(struct exec *x, int peer_fd, char *buf, size_t max)
{
	for (;;) {
		if (x->line_off < x->line.len) {
			size_t n = x->line.len - x->line_off;
			if (n > max)
				n = max;
			memcpy(buf, x->line.data + x->line_off, n);
			x->line_off += n;
			if (x->line_off == x->line.len) {
				buf_reset(&x->line);
				x->line_off = 0;
			}
			return (ssize_t)n;
		}
		switch (x->stage) {
		case ST_HEAD:
			buf_printf(&x->line, "{\"id\":%lld", (long long)x->id);
			if (x->woke_ms >= 0)
				buf_printf(&x->line, ",\"woke_ms\":%lld", (long long)x->woke_ms);
			buf_adds(&x->line, "}\n");
			x->stage = ST_RUNNING;
			continue;
		case ST_LAST:
			x->stage = ST_DONE;
			return 0;
		case ST_DONE:
			return 0;
		case ST_RUNNING:
			break;
		}
		if (x->out_eof && x->err_eof) {
			pthread_join(x->thread, NULL);
			x->thread_on = false;
			last_line(x);
			x->stage = ST_LAST;
			continue;
		}
		struct pollfd p[3] = {
			{ .fd = x->out_eof ? -1 : x->out_r, .events = POLLIN },
			{ .fd = x->err_eof ? -1 : x->err_r, .events = POLLIN },
			{ .fd = peer_fd, .events = POLLRDHUP },
		};
		int64_t now = mono_ms(), wait = 1000;
		/* A quiet command still sends a line now and then: the API
		 * drops a stream without progress for api_send_timeout. */
		int64_t keepalive_ms = (int64_t)x->h->cfg.api_send_timeout_s * 1000 / 2;
		if (keepalive_ms > 30000)
			keepalive_ms = 30000;
		if (!x->said_ms)
			x->said_ms = now;
		if (now - x->said_ms >= keepalive_ms) {
			buf_adds(&x->line, "{\"keepalive\":true}\n");
			x->said_ms = now;
			continue;
		}
		if (x->deadline_ms && !x->timed_out && x->deadline_ms - now < wait)
			wait = x->deadline_ms > now ? x->deadline_ms - now : 0;
		if (poll(p, 3, (int)wait) < 0 && errno != EINTR)
			return -1;
		now = mono_ms();
		if (p[2].revents & (POLLRDHUP | POLLHUP | POLLERR))
			return -1;	/* the client went: exec_release ends it */
		/* Quiet or not, a running command is activity. */
		if (now - x->touched_ms >= 1000) {
			idle_touch(x->h, x->machine_id, "exec");
			x->touched_ms = now;
		}
		if (x->deadline_ms && !x->timed_out && now >= x->deadline_ms) {
			unsigned char b = SIGKILL;
			x->timed_out = true;
			x->kill_ms = now;
			pthread_mutex_lock(&x->lock);
			if (x->ctl_w >= 0 && write(x->ctl_w, &b, 1) < 0)
				log_debug("exec %lld: control pipe: %s", (long long)x->id,
					  strerror(errno));
			pthread_mutex_unlock(&x->lock);
			log_info("exec %lld in %s/%s: timed out; killed", (long long)x->id,
				 x->owner, x->machine);
		} else if (x->timed_out && !x->killed && now - x->kill_ms >= EXEC_KILL_GRACE_MS) {
			/* An sshd that does not deliver signals: end the run. */
			x->killed = true;
			end_run(x, NULL);
		}
		if (p[0].revents)
			read_piece(x, x->out_r, "stdout", &x->out_eof);
		if (p[1].revents)
			read_piece(x, x->err_r, "stderr", &x->err_eof);
		if (x->line.len)
			x->said_ms = now;
	}
}

/* The client of X's stream went, or its pump is done: a command still
 * running is killed and its thread joined. */
static void end_thread(struct exec *x)
{
	if (!x->thread_on)
		return;
	/* What it still writes is read and dropped until the thread has
	 * ended (it may be blocked on a full pipe), for 5 s at most; then the
	 * pipes close under it. */
	int64_t until = mono_ms() + 5000;
	char sink[EXEC_PIECE];
	end_run(x, "its client went");
	while ((!x->out_eof || !x->err_eof) && mono_ms() < until) {
		struct pollfd p[2] = { { .fd = x->out_eof ? -1 : x->out_r, .events = POLLIN },
				       { .fd = x->err_eof ? -1 : x->err_r, .events = POLLIN } };
		if (poll(p, 2, 200) < 0 && errno != EINTR)
			break;
		for (int i = 0; i < 2; i++) {
			bool *eof = i ? &x->err_eof : &x->out_eof;
			ssize_t n;
			if (!p[i].revents)
				continue;
			n = read(p[i].fd, sink, sizeof(sink));
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
				*eof = true;
		}
	}
	close_fd(&x->out_r);
	close_fd(&x->err_r);
	pthread_join(x->thread, NULL);
	x->thread_on = false;
	log_info("exec %lld in %s/%s: its client went; ended", (long long)x->id, x->owner,
		 x->machine);
}

/* X out of the list, and freed (its quota given back unless GIVEN). */
static void unlist_free(struct exec *x, bool given)
{
	struct execs *xs = x->xs;
	struct exec **pp;

	pthread_mutex_lock(&xs->lock);
	for (pp = &xs->list; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			break;
		}
	pthread_mutex_unlock(&xs->lock);
	/* Unlisted, X is found no more; a stdin or signal request that found
	 * it before holds its lock: wait for it to let go. */
	pthread_mutex_lock(&x->lock);
	pthread_mutex_unlock(&x->lock);
	if (!given)
		quota_end(x->h, x->owner, QUOTA_EXECS);
	exec_free(x);
}

void exec_release(struct exec *x)
{
	end_thread(x);
	unlist_free(x, false);
}

/* ---- detached commands -------------------------------------------------- */

/* Drop what every reader of X has read (all, without readers); log_lock
 * held. */
static void log_trim(struct exec *x)
{
	uint64_t end = x->log_base + x->log.len, min = end;

	for (struct exec_attach *a = x->readers; a; a = a->next)
		if (a->off < min)
			min = a->off;
	if (min > x->log_base) {
		size_t drop = (size_t)(min - x->log_base);
		memmove(x->log.data, x->log.data + drop, x->log.len - drop);
		x->log.len -= drop;
		x->log_base = min;
	}
}

/* A detached command's own reader: its stream into the log for whoever is
 * attached, waiting for the slowest of them when EXEC_LOG_MAX is behind
 * it; at the end, kept EXEC_RETAIN_MS for a late reader's last line,
 * then freed once no reader is left. */
static void *pump(void *arg)
{
	struct exec *x = arg;
	struct execs *xs = x->xs;
	char *piece = malloc(128 << 10);
	ssize_t n;

	if (!piece)
		abort();
	while ((n = exec_read(x, -1, piece, 128 << 10)) > 0) {
		pthread_mutex_lock(&x->log_lock);
		log_trim(x);
		while (x->log.len > EXEC_LOG_MAX && x->readers && !xs->stopping) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&x->cond, &x->log_lock, &ts);
			log_trim(x);
		}
		buf_add(&x->log, piece, (size_t)n);
		pthread_cond_broadcast(&x->cond);
		pthread_mutex_unlock(&x->log_lock);
	}
	free(piece);
	end_thread(x);          /* (only when exec_read failed) */
	if (!x->final && asprintf(&x->final, "{\"error\":{\"code\":\"ended\",\"message\":"
				 "\"its stream failed\"}}\n") < 0)
		abort();
	pthread_mutex_lock(&xs->lock);
	x->over = true;
	pthread_mutex_unlock(&xs->lock);
	quota_end(x->h, x->owner, QUOTA_EXECS);
	int64_t until = mono_ms() + EXEC_RETAIN_MS;
	pthread_mutex_lock(&x->log_lock);
	x->log_ended = true;
	pthread_cond_broadcast(&x->cond);
	while (x->readers || (!xs->stopping && mono_ms() < until)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&x->cond, &x->log_lock, &ts);
	}
	x->dying = true;
	pthread_mutex_unlock(&x->log_lock);
	unlist_free(x, true);
	pthread_mutex_lock(&xs->lock);
	xs->pumps--;
	pthread_mutex_unlock(&xs->lock);
	return NULL;
}

bool exec_is_detached(const struct exec *x)
{
	return x->detached;
}

struct exec_attach *exec_first_reader(struct exec *x)
{
	return x->first;
}

struct exec_attach *exec_attach(struct execs *xs, const char *owner, const char *name,
				int64_t id, struct err *e)
{
	struct exec *x;
	struct exec_attach *a = NULL;

	pthread_mutex_lock(&xs->lock);
	for (x = xs->list; x; x = x->next)
		if (x->id == id && !strcmp(x->owner, owner) && !strcmp(x->machine, name))
			break;
	if (!x || !x->detached) {
		pthread_mutex_unlock(&xs->lock);
		err_set(e, 404, "not_found", x ? "command %lld in %s was not started with "
			"\"detach\": its stream is its client's alone" : "no command %lld in %s "
			"(GET /v1/machines/%s/exec lists them)", (long long)id, name, name);
		return NULL;
	}
	/* The pump frees X only with no reader left, under log_lock: X is
	 * safe once this reader is in. */
	pthread_mutex_lock(&x->log_lock);
	pthread_mutex_unlock(&xs->lock);
	if (x->dying) {
		pthread_mutex_unlock(&x->log_lock);
		err_set(e, 404, "not_found", "no command %lld in %s (it ended)", (long long)id,
			name);
		return NULL;
	}
	if (x->nreaders >= EXEC_ATTACH_MAX) {
		pthread_mutex_unlock(&x->log_lock);
		err_set(e, 429, "too_many_readers", "command %lld has %d readers already",
			(long long)id, EXEC_ATTACH_MAX);
		return NULL;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		abort();
	a->x = x;
	a->off = x->log_base + x->log.len;
	buf_printf(&a->pre, "{\"id\":%lld,\"attached\":true}\n", (long long)id);
	if (x->log_ended)
		buf_adds(&a->pre, x->final);
	a->next = x->readers;
	x->readers = a;
	x->nreaders++;
	pthread_mutex_unlock(&x->log_lock);
	return a;
}

ssize_t exec_attach_read(struct exec_attach *a, int peer_fd, char *buf, size_t max)
{
	struct exec *x = a->x;
	ssize_t got = 0;

	if (a->pre_off < a->pre.len) {
		size_t n = a->pre.len - a->pre_off;
		if (n > max)
			n = max;
		memcpy(buf, a->pre.data + a->pre_off, n);
		a->pre_off += n;
		return (ssize_t)n;
	}
	pthread_mutex_lock(&x->log_lock);
	for (;;) {
		uint64_t end = x->log_base + x->log.len;
		if (a->off < x->log_base)
			a->off = x->log_base;
		if (a->off < end) {
			size_t n = (size_t)(end - a->off);
			if (n > max)
				n = max;
			memcpy(buf, x->log.data + (a->off - x->log_base), n);
			a->off += n;
			got = (ssize_t)n;
			pthread_cond_broadcast(&x->cond);   /* the pump may wait for us */
			break;
		}
		if (x->log_ended)
			break;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&x->cond, &x->log_lock, &ts);
		struct pollfd p = { .fd = peer_fd, .events = POLLRDHUP };
		if (peer_fd >= 0 && poll(&p, 1, 0) > 0 &&
		    (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
			got = -1;
			break;
		}
	}
	pthread_mutex_unlock(&x->log_lock);
	return got;
}

void exec_detach(struct exec_attach *a)
{
	struct exec *x;

	if (!a)
		return;
	x = a->x;
	pthread_mutex_lock(&x->log_lock);
	for (struct exec_attach **pp = &x->readers; *pp; pp = &(*pp)->next)
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	x->nreaders--;
	if (x->first == a)
		x->first = NULL;
	buf_free(&a->pre);
	free(a);
	log_trim(x);
	pthread_cond_broadcast(&x->cond);
	pthread_mutex_unlock(&x->log_lock);
}

/* ---- stdin, signals, the list ------------------------------------------ */

/* OWNER's command ID in machine NAME, its lock held; NULL with E (404). */
static struct exec *find_locked(struct execs *xs, const char *owner, const char *name,
				int64_t id, struct err *e)
{
	struct exec *x;

	pthread_mutex_lock(&xs->lock);
	for (x = xs->list; x; x = x->next)
		if (x->id == id && !x->over && !strcmp(x->owner, owner) &&
		    !strcmp(x->machine, name))
			break;
	if (x)
		pthread_mutex_lock(&x->lock);
	pthread_mutex_unlock(&xs->lock);
	if (!x)
		err_set(e, 404, "not_found", "no command %lld running in %s (GET "
			"/v1/machines/%s/exec lists them)", (long long)id, name, name);
	return x;
}

ssize_t exec_stdin(struct execs *xs, const char *owner, const char *name, int64_t id,
		   const void *data, size_t len, bool eof, struct err *e)
{
	struct exec *x = find_locked(xs, owner, name, id, e);
	int64_t until = mono_ms() + EXEC_STDIN_WAIT_MS;
	size_t done = 0;

	if (!x)
		return -1;
	if (x->in_w < 0) {
		pthread_mutex_unlock(&x->lock);
		return err_set(e, 409, "stdin_closed", "command %lld's stdin is closed (it was "
			       "not started with \"stdin_open\", or was sent its EOF)",
			       (long long)id);
	}
	while (done < len) {
		ssize_t n = write(x->in_w, (const char *)data + done, len - done);
		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR) {
			/* EPIPE: the command's run ended; its stream says how. */
			pthread_mutex_unlock(&x->lock);
			return err_set(e, 409, "stdin_closed", "command %lld no longer reads stdin",
				       (long long)id);
		}
		if (mono_ms() >= until)
			break;
		struct pollfd p = { .fd = x->in_w, .events = POLLOUT };
		poll(&p, 1, 100);
	}
	if (eof && done == len)
		close_fd(&x->in_w);
	pthread_mutex_unlock(&x->lock);
	return (ssize_t)done;
}

int exec_resize(struct execs *xs, const char *owner, const char *name, int64_t id, int cols,
		int rows, struct err *e)
{
	struct exec *x;
	unsigned char b[5] = { SSHEXEC_CTL_RESIZE, (unsigned char)(cols >> 8), (unsigned char)cols,
			       (unsigned char)(rows >> 8), (unsigned char)rows };
	int rc = 0;

	if (cols < 1 || cols > 1000 || rows < 1 || rows > 1000)
		return err_set(e, 400, "invalid_size", "cols and rows must be 1 to 1000");
	if (!(x = find_locked(xs, owner, name, id, e)))
		return -1;
	if (!x->cols)
		rc = err_set(e, 409, "no_pty", "command %lld runs without a terminal (start it with "
			     "\"pty\")", (long long)id);
	else if (x->ctl_w < 0 || write(x->ctl_w, b, sizeof(b)) != (ssize_t)sizeof(b))
		rc = err_set(e, 409, "ended", "command %lld is ending", (long long)id);
	pthread_mutex_unlock(&x->lock);
	return rc;
}

int exec_signal(struct execs *xs, const char *owner, const char *name, int64_t id, int sig,
		struct err *e)
{
	struct exec *x = find_locked(xs, owner, name, id, e);
	unsigned char b = (unsigned char)sig;
	int rc = 0;

	if (!x)
		return -1;
	if (x->ctl_w < 0 || write(x->ctl_w, &b, 1) != 1)
		rc = err_set(e, 409, "ended", "command %lld is ending", (long long)id);
	pthread_mutex_unlock(&x->lock);
	return rc;
}

json_t *exec_list_json(struct execs *xs, const char *owner, const char *machine_id)
{
	json_t *l = json_array();
	struct exec *x;

	pthread_mutex_lock(&xs->lock);
	for (x = xs->list; x; x = x->next) {
		bool open;
		if (x->over || strcmp(x->owner, owner) || strcmp(x->machine_id, machine_id))
			continue;
		pthread_mutex_lock(&x->lock);
		open = x->in_w >= 0;
		pthread_mutex_unlock(&x->lock);
		json_t *j = json_loads(x->what, 0, NULL);
		if (!j)
			j = json_object();
		json_object_set_new(j, "id", json_integer(x->id));
		json_object_set_new(j, "started", json_integer(x->started));
		json_object_set_new(j, "user", json_string(x->user[0] ? x->user : x->login));
		json_object_set_new(j, "stdin_open", json_boolean(open));
		if (x->cols)
			json_object_set_new(j, "pty", json_true());
		if (x->detached)
			json_object_set_new(j, "detached", json_true());
		json_array_append_new(l, j);
	}
	pthread_mutex_unlock(&xs->lock);
	return json_pack("{s:o}", "execs", l);
}
