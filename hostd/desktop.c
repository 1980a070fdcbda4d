#include "hostd/desktop.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "hostd/events.h"
#include "hostd/hostd.h"
#include "hostd/machine.h"
#include "common/banned.h"

#define MAX_TOKENS 1024
/* A spent or expired token is remembered this much longer, so that its
 * second use is told "used" or "expired" rather than "unknown". */
#define REMEMBER_MS (10 * 60 * 1000)
/* A hold names up to every grant the bridge keeps (its viewers' and their
 * resume keys'): 512 ids fit. */
#define LINE_MAX_BYTES 32768
#define MAX_GRANTS 1024
/* A grant not held (op hold) nor used for this long ends: the first
 * attach's handle is short-lived, and a bridge that stops holding (it
 * died, its viewers left) leaves nothing behind for long. */
#define GRANT_IDLE_MS (60 * 1000)
/* Live (unspent, unexpired) tokens one owner may hold; minting another
 * evicts that owner's oldest, so that no one fills the table. */
#define PER_OWNER 16

struct dtoken {
	char token[44];       /* "" = free slot */
	char owner[64];
	char machine[64];
	int64_t minted_ms;    /* monotonic clock, ms */
	int64_t expires_ms;   /* monotonic clock, ms */
	int64_t family;       /* the API token that minted it, 0: none */
	bool used;
	bool evicted;         /* by PER_OWNER newer ones of its owner */
	bool revoked;         /* desktop_revoke */
};

/* What redeeming a token leaves: the right to attach to its machine, for
 * the viewer it let in (and the resume keys the bridge gives that
 * viewer).  Each attach spends HANDLE and sets a new one. */
struct dgrant {
	int64_t id;           /* 0 = free slot */
	char handle[44];      /* the next attach's; "" = burnt (a wrong use) */
	char owner[64];
	char machine[64];
	int64_t family;       /* its token's */
	int64_t expires_ms;   /* monotonic: pushed on by each hold and attach */
};

struct desktop {
	struct hostd *h;
	int fd;
	int stop_pipe[2];
	pthread_t thread;
	char path[108];
	atomic_int inflight;
	pthread_mutex_t lock;
	struct dtoken tok[MAX_TOKENS];
	/* Under lock; kept in grants_path across hostd's restarts (the
	 * bridge's viewers outlive them). */
	struct dgrant grant[MAX_GRANTS];
	int64_t next_grant;
	char grants_path[PATH_MAX + 32];
};

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether A and B (NUL-terminated, B at most 43 characters) are equal, in
 * a time that does not depend on where they differ. */
static bool token_eq(const char a[44], const char *b)
{
	size_t bl = strnlen(b, 44);
	unsigned char diff = bl == 43 ? 0 : 1;

	for (size_t i = 0; i < 43; i++)
		diff |= (unsigned char)(a[i] ^ (i < bl ? b[i] : 0));
	return diff == 0;
}

static bool live(const struct dtoken *k, int64_t now)
{
	return k->token[0] && !k->used && !k->evicted && !k->revoked && now <= k->expires_ms;
}

/* 43 random base64url characters (256 bits) and a NUL into T.  0 or -1. */
static int make_secret(char t[44])
{
	static const char alphabet[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	unsigned char raw[32];

	if (random_bytes(raw, sizeof(raw)) < 0)
		return -1;
	/* 6 bits a character. */
	for (size_t i = 0; i < 43; i++) {
		size_t bit = i * 6, byte = bit / 8, sh = bit % 8;
		unsigned v = raw[byte] | (byte + 1 < sizeof(raw) ? raw[byte + 1] << 8 : 0);
		t[i] = alphabet[(v >> sh) & 63];
	}
	t[43] = '\0';
	return 0;
}

/* ---- grants (under d->lock) ---------------------------------------------- */

/* Write the grants to grants_path (root's, 0600), replacing it whole
 * (rename).  Not synced: the file is for hostd's restarts, and after the
 * host's own the bridge has no viewers left.  A failure is logged: the
 * grants hold in memory, and a restart of hostd would then make the
 * bridge's viewers ask for new URLs. */
static void grants_save(struct desktop *d)
{
	char tmp[PATH_MAX + 40];
	json_t *arr = json_array(), *j;
	int fd = -1;
	char *s = NULL;

	for (int i = 0; i < MAX_GRANTS && arr; i++) {
		const struct dgrant *g = &d->grant[i];
		if (g->id)
			json_array_append_new(arr, json_pack("{s:I, s:s, s:s, s:s, s:I}", "id",
							     (json_int_t)g->id, "handle", g->handle,
							     "owner", g->owner, "machine", g->machine,
							     "family", (json_int_t)g->family));
	}
	j = json_pack("{s:I, s:o}", "next", (json_int_t)d->next_grant, "grants", arr);
	s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	snprintf(tmp, sizeof(tmp), "%s.tmp", d->grants_path);
	if (s)
		fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	bool good = fd >= 0 && write(fd, s, strlen(s)) == (ssize_t)strlen(s);
	if (fd >= 0 && close(fd) < 0)
		good = false;
	if (!good || rename(tmp, d->grants_path) < 0) {
		log_warn("desktop: cannot save the grants to %s: %s", d->grants_path,
			 s ? strerror(errno) : "out of memory");
		unlink(tmp);
	}
	free(s);
	json_decref(j);
}

/* The grants an earlier hostd saved, each held for GRANT_IDLE_MS from now
 * (the bridge holds its own again within seconds). */
static void grants_load(struct desktop *d)
{
	json_t *j = json_load_file(d->grants_path, 0, NULL), *g;
	json_int_t next = 1;
	size_t i, n = 0;
	int64_t now = mono_ms();

	d->next_grant = 1;
	if (!j)
		return;
	json_unpack(j, "{s?I}", "next", &next);
	d->next_grant = next > 0 ? next : 1;
	json_array_foreach(json_object_get(j, "grants"), i, g) {
		json_int_t id = 0, family = 0;
		const char *handle = NULL, *owner = NULL, *machine = NULL;
		if (n >= MAX_GRANTS ||
		    json_unpack(g, "{s:I, s:s, s:s, s:s, s:I}", "id", &id, "handle", &handle,
				"owner", &owner, "machine", &machine, "family", &family) < 0 ||
		    id <= 0 || strlen(handle) > 43 || !user_name_valid(owner) ||
		    !name_valid(machine))
			continue;
		struct dgrant *k = &d->grant[n++];
		k->id = id;
		snprintf(k->handle, sizeof(k->handle), "%s", handle);
		snprintf(k->owner, sizeof(k->owner), "%s", owner);
		snprintf(k->machine, sizeof(k->machine), "%s", machine);
		k->family = family;
		k->expires_ms = now + GRANT_IDLE_MS;
		if (id >= d->next_grant)
			d->next_grant = id + 1;
	}
	json_decref(j);
	log_info("desktop: %zu grants kept from before the restart", n);
}

/* End the grants not held for GRANT_IDLE_MS.  Whether any ended. */
static bool grants_sweep(struct desktop *d, int64_t now)
{
	bool changed = false;

	for (int i = 0; i < MAX_GRANTS; i++)
		if (d->grant[i].id && now > d->grant[i].expires_ms) {
			memset(&d->grant[i], 0, sizeof(d->grant[i]));
			changed = true;
		}
	return changed;
}

/* A new grant for USER's MACHINE (its token minted by FAMILY): *ID and
 * HANDLE (44 bytes), the first attach's. */
static int grant_new(struct desktop *d, const char *user, const char *machine,
		     int64_t family, int64_t *id, char handle[44], struct err *e)
{
	int64_t now = mono_ms();
	int slot = -1;

	if (make_secret(handle) < 0)
		return err_set(e, 500, "internal", "no randomness for an attach handle");
	pthread_mutex_lock(&d->lock);
	grants_sweep(d, now);
	for (int i = 0; i < MAX_GRANTS && slot < 0; i++)
		if (!d->grant[i].id)
			slot = i;
	if (slot >= 0) {
		struct dgrant *g = &d->grant[slot];
		g->id = d->next_grant++;
		memcpy(g->handle, handle, 44);
		snprintf(g->owner, sizeof(g->owner), "%s", user);
		snprintf(g->machine, sizeof(g->machine), "%s", machine);
		g->family = family;
		g->expires_ms = now + GRANT_IDLE_MS;
		*id = g->id;
		grants_save(d);
	}
	pthread_mutex_unlock(&d->lock);
	if (slot < 0)
		return err_set(e, 503, "too_many_grants", "%d desktop viewers are let in: try "
			       "again later", MAX_GRANTS);
	return 0;
}

/* Spend HANDLE for an attach to USER's MACHINE: NEXT (44 bytes) gets the
 * grant's new handle.  A handle shown for another user or machine is
 * burnt (its grant can attach no more). */
static int handle_take(struct desktop *d, const char *handle, const char *user,
		       const char *machine, char next[44], struct err *e)
{
	int64_t now = mono_ms();
	int rc = -1;
	char fresh[44];

	if (make_secret(fresh) < 0)
		return err_set(e, 500, "internal", "no randomness for an attach handle");
	pthread_mutex_lock(&d->lock);
	bool changed = grants_sweep(d, now);
	for (int i = 0; i < MAX_GRANTS; i++) {
		struct dgrant *g = &d->grant[i];
		if (!g->id || !g->handle[0] || !token_eq(g->handle, handle))
			continue;
		changed = true;
		if (strcmp(g->owner, user) != 0 || strcmp(g->machine, machine) != 0) {
			g->handle[0] = '\0';
			err_set(e, 403, "invalid_handle", "the attach handle is not for %s/%s",
				user, machine);
			break;
		}
		memcpy(g->handle, fresh, sizeof(fresh));
		memcpy(next, fresh, sizeof(fresh));
		g->expires_ms = now + GRANT_IDLE_MS;
		rc = 0;
		break;
	}
	if (changed)
		grants_save(d);
	pthread_mutex_unlock(&d->lock);
	if (rc < 0 && !err_isset(e))
		err_set(e, 403, "invalid_handle", "unknown, spent or expired attach handle: "
			"attach needs the handle of a token redeemed for %s/%s (or the one "
			"the last attach gave)", user, machine);
	return rc;
}

/* The ids in IDS (a JSON array) that are no grants (any more), as a new
 * JSON array; the others are held for GRANT_IDLE_MS more. */
static json_t *grants_hold(struct desktop *d, json_t *ids)
{
	json_t *cut = json_array(), *v;
	int64_t now = mono_ms();
	size_t i;

	pthread_mutex_lock(&d->lock);
	bool changed = grants_sweep(d, now);
	json_array_foreach(ids, i, v) {
		json_int_t id = json_integer_value(v);
		bool found = false;
		for (int k = 0; k < MAX_GRANTS && id > 0 && !found; k++)
			if (d->grant[k].id == id) {
				d->grant[k].expires_ms = now + GRANT_IDLE_MS;
				found = true;
			}
		if (!found)
			json_array_append_new(cut, json_integer(id));
	}
	if (changed)
		grants_save(d);
	pthread_mutex_unlock(&d->lock);
	return cut;
}

int desktop_revoke(struct desktop *d, const char *owner, const char *name, int64_t family,
		   int *ntokens, int *ngrants)
{
	int64_t now = mono_ms();
	int nt = 0, ng = 0;

	if (!d)
		return 0;
	pthread_mutex_lock(&d->lock);
	for (int i = 0; i < MAX_TOKENS; i++) {
		struct dtoken *k = &d->tok[i];
		if (live(k, now) && !strcmp(k->owner, owner) &&
		    (!name || !strcmp(k->machine, name)) && (!family || k->family == family)) {
			k->revoked = true;
			nt++;
		}
	}
	for (int i = 0; i < MAX_GRANTS; i++) {
		struct dgrant *g = &d->grant[i];
		if (g->id && !strcmp(g->owner, owner) && (!name || !strcmp(g->machine, name)) &&
		    (!family || g->family == family)) {
			memset(g, 0, sizeof(*g));
			ng++;
		}
	}
	if (ng)
		grants_save(d);
	pthread_mutex_unlock(&d->lock);
	if (nt || ng)
		log_info("desktop: %s%s%s: %d tokens voided, %d viewers' grants ended%s", owner,
			 name ? "/" : "", name ? name : "", nt, ng,
			 family ? " (their API token was revoked)" : "");
	if (ntokens)
		*ntokens = nt;
	if (ngrants)
		*ngrants = ng;
	return 0;
}

int desktop_mint(struct desktop *d, const char *owner, const char *name, int64_t family,
		 char *token, size_t toklen, int64_t *expires, struct err *e)
{
	char t[44];
	struct machine m;
	int64_t now = mono_ms();
	int64_t ttl_ms = (int64_t)d->h->cfg.desktop_token_ttl_s * 1000;
	int slot = -1, mine = 0, oldest = -1;

	if (toklen < sizeof(t))
		return err_set(e, 500, "internal", "token buffer too small");
	if (db_machine_get(d->h->db, owner, name, &m, e) < 0)
		return -1;
	if (make_secret(t) < 0)
		return err_set(e, 500, "internal", "no randomness for a desktop token");
	pthread_mutex_lock(&d->lock);
	for (int i = 0; i < MAX_TOKENS; i++) {
		struct dtoken *k = &d->tok[i];
		if (live(k, now) && !strcmp(k->owner, owner)) {
			mine++;
			if (oldest < 0 || k->minted_ms < d->tok[oldest].minted_ms)
				oldest = i;
		}
	}
	if (mine >= PER_OWNER) {
		/* Its slot stays as it is (remembered as evicted), so that its
		 * use is told why. */
		d->tok[oldest].evicted = true;
		log_info("desktop: %s holds %d live tokens: the oldest is evicted", owner,
			 mine);
	}
	for (int i = 0; i < MAX_TOKENS; i++) {
		struct dtoken *k = &d->tok[i];
		if (!k->token[0] || now > k->expires_ms + REMEMBER_MS) {
			slot = i;
			break;
		}
	}
	if (slot < 0) /* else the oldest spent, evicted or expired one */
		for (int i = 0; i < MAX_TOKENS; i++)
			if (!live(&d->tok[i], now) &&
			    (slot < 0 || d->tok[i].expires_ms < d->tok[slot].expires_ms))
				slot = i;
	if (slot >= 0) {
		struct dtoken *k = &d->tok[slot];
		memcpy(k->token, t, sizeof(t));
		snprintf(k->owner, sizeof(k->owner), "%s", owner);
		snprintf(k->machine, sizeof(k->machine), "%s", name);
		k->minted_ms = now;
		k->expires_ms = now + ttl_ms;
		k->family = family;
		k->used = false;
		k->evicted = false;
		k->revoked = false;
		/* The wall clock only for the answer. */
		*expires = (wall_ms() + ttl_ms) / 1000;
	}
	pthread_mutex_unlock(&d->lock);
	if (slot < 0)
		return err_set(e, 503, "too_many_tokens", "%d desktop tokens are live: try again "
			       "in a minute", MAX_TOKENS);
	memcpy(token, t, sizeof(t));
	log_info("desktop token for %s/%s, valid %d s", owner, name,
		 d->h->cfg.desktop_token_ttl_s);
	return 0;
}

/* Spend TOKEN for USER's MACHINE; *FAMILY: the API token that minted it
 * (0: none). */
static int redeem(struct desktop *d, const char *token, const char *user,
		  const char *machine, int64_t *family, struct err *e)
{
	int64_t now = mono_ms();
	int rc = -1;

	pthread_mutex_lock(&d->lock);
	for (int i = 0; i < MAX_TOKENS; i++) {
		struct dtoken *k = &d->tok[i];
		if (!k->token[0] || !token_eq(k->token, token))
			continue;
		if (k->used)
			err_set(e, 403, "token_used", "desktop token already used: ask for a "
				"new one (berth desktop %s)", k->machine);
		else if (k->revoked)
			err_set(e, 403, "token_revoked", "desktop token revoked: ask for a new "
				"one (berth desktop %s)", k->machine);
		else if (k->evicted)
			err_set(e, 403, "token_expired", "desktop token expired: %d newer ones "
				"were asked for: ask for a new one (berth desktop %s)",
				PER_OWNER, k->machine);
		else if (now > k->expires_ms)
			err_set(e, 403, "token_expired", "desktop token expired %lld s ago: ask "
				"for a new one (berth desktop %s)",
				(long long)((now - k->expires_ms) / 1000), k->machine);
		else if (strcmp(k->owner, user) != 0 || strcmp(k->machine, machine) != 0)
			err_set(e, 403, "wrong_machine", "desktop token is not for %s/%s",
				user, machine);
		else
			rc = 0;
		*family = k->family;
		k->used = true;
		goto out;
	}
	err_set(e, 403, "invalid_token", "unknown desktop token");
out:
	pthread_mutex_unlock(&d->lock);
	return rc;
}

/* J as one line on FD, with the NFDS descriptors FDS passed along
 * (SCM_RIGHTS, in this order). */
static void send_json(int fd, json_t *j, const int *fds, size_t nfds)
{
	char *s = json_dumps(j, JSON_COMPACT);
	struct iovec iov[2];
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;

	if (!s)
		return;
	iov[0] = (struct iovec){ s, strlen(s) };
	iov[1] = (struct iovec){ (char *)"\n", 1 };
	if (nfds > 0 && nfds <= 2) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	if (sendmsg(fd, &mh, MSG_NOSIGNAL) < 0)
		log_warn("desktop: answer to the bridge: %s", strerror(errno));
	free(s);
}

/* E as an error answer; HANDLE (NULL: none): the grant's next attach
 * handle, which a refused attach gives too (the bridge tries again). */
static void send_err(int fd, const struct err *e, const char *handle)
{
	json_t *j = json_pack("{s:{s:i, s:s, s:s}}", "error", "status", e->status,
			      "code", e->code, "message", e->msg);
	if (j && handle)
		json_object_set_new(j, "handle", json_string(handle));
	if (j)
		send_json(fd, j, NULL, 0);
	json_decref(j);
}

/* A descriptor connected to the agent's socket PATH, or -1.  Never waits:
 * QEMU takes one connection at a time, and a second one (an earlier
 * bridge's not yet closed) could sit in its backlog, or find it full. */
static int connect_agent(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, fl;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		log_debug("desktop: no agent socket %s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	/* The bridge reads it with blocking calls. */
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static void attach(struct desktop *d, int cfd, const char *user, const char *name,
		   bool wake, const char *handle)
{
	struct err e = { 0 };
	struct machine m;
	char path[PATH_MAX], next[44] = "";
	int64_t woke = -1;
	int vfd = -1, afd = -1;

	/* Only for a viewer a token let in: the bridge's user alone gets no
	 * screen. */
	if (!handle) {
		err_set(&e, 403, "invalid_handle", "attach needs a handle (what redeeming a "
			"token for %s/%s, or the last attach, answered)", user, name);
		goto out;
	}
	if (handle_take(d, handle, user, name, next, &e) < 0)
		goto out;
	if (wake) {
		events_cause("a desktop viewer");
		if (machine_wake(d->h, user, name, false, &m, &woke, &e) < 0)
			goto out;
		if (woke >= 0)
			log_info("desktop: woke %s/%s in %lld ms", user, name, (long long)woke);
	} else {
		if (machine_settle(d->h, user, name, &m, &e) < 0)
			goto out;
		if (m.state != MS_RUNNING) {
			err_set(&e, 409, "not_running", "machine %s is %s", name,
				mstate_name(m.state));
			goto out;
		}
	}
	/* The screen listens nowhere: libvirt hands its QEMU one end of a
	 * socket pair and hostd the other. */
	if (virt_open_screen(d->h->virt, m.id, &vfd, &e) < 0)
		goto out;
	/* The clipboard's socket (libvirtd made it, root's, and handed QEMU
	 * the listening descriptor); a machine whose domain predates it has
	 * none: no clipboard then. */
	machine_agent_path(d->h, m.id, path, sizeof(path));
	afd = connect_agent(path);
	int fds[2] = { vfd, afd };
	json_t *j = json_pack("{s:s, s:I, s:b, s:s}", "state", mstate_name(m.state),
			      "woke_ms", (json_int_t)woke, "agent", afd >= 0, "handle", next);
	if (j)
		send_json(cfd, j, fds, afd >= 0 ? 2 : 1);
	json_decref(j);
	close(vfd);
	if (afd >= 0)
		close(afd);
out:
	if (err_isset(&e)) {
		log_info("desktop: attach %s/%s: %s", user, name, e.msg);
		send_err(cfd, &e, next[0] ? next : NULL);
	}
}

struct job {
	struct desktop *d;
	int fd;
};

static void *serve(void *arg)
{
	struct job *jb = arg;
	struct desktop *d = jb->d;
	int fd = jb->fd;
	char line[LINE_MAX_BYTES + 1];
	size_t len = 0;
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	struct err e = { 0 };
	json_t *j = NULL, *grants = NULL;
	const char *op = NULL, *user = NULL, *machine = NULL, *token = NULL, *handle = NULL;
	int wake = 0;

	free(jb);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) < 0 ||
	    (cr.uid != 0 && !(d->h->has_desktop && cr.uid == d->h->desktop_uid))) {
		err_set(&e, 403, "forbidden", "only root and berth-desktop's user may use the "
			"desktop socket");
		goto out;
	}
	/* One line, within 10 s. */
	while (len < LINE_MAX_BYTES && !memchr(line, '\n', len)) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 10000) <= 0) {
			err_set(&e, 408, "timeout", "no request line within 10 s");
			goto out;
		}
		ssize_t n = read(fd, line + len, LINE_MAX_BYTES - len);
		if (n <= 0)
			goto out;
		len += (size_t)n;
	}
	line[len] = '\0';
	j = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);
	if (!j || json_unpack(j, "{s:s, s?s, s?s, s?s, s?b, s?s, s?o}", "op", &op, "user",
			      &user, "machine", &machine, "token", &token, "wake", &wake,
			      "handle", &handle, "grants", &grants) < 0) {
		err_set(&e, 400, "invalid_json", "a request is one JSON object with \"op\"");
		goto out;
	}
	if (!strcmp(op, "hold")) {
		if (!json_is_array(grants)) {
			err_set(&e, 400, "invalid_grants", "grants (an array of ids) is required");
			goto out;
		}
		json_t *r = json_pack("{s:o}", "cut", grants_hold(d, grants));
		if (r)
			send_json(fd, r, NULL, 0);
		json_decref(r);
		goto out;
	}
	if (!user || !machine || !user_name_valid(user) || !name_valid(machine)) {
		err_set(&e, 400, "invalid_name", "a valid user and machine are required");
		goto out;
	}
	if (!strcmp(op, "redeem")) {
		struct machine m;
		int64_t family = 0, grant = 0;
		char h[44];
		if (!token) {
			err_set(&e, 400, "invalid_token", "token is required");
			goto out;
		}
		if (redeem(d, token, user, machine, &family, &e) < 0 ||
		    db_machine_get(d->h->db, user, machine, &m, &e) < 0 ||
		    grant_new(d, user, machine, family, &grant, h, &e) < 0)
			goto out;
		log_info("desktop: token for %s/%s redeemed (grant %lld)", user, machine,
			 (long long)grant);
		json_t *r = json_pack("{s:s, s:s, s:s, s:I, s:s}", "user", user, "machine", machine,
				      "state", mstate_name(m.state), "grant", (json_int_t)grant,
				      "handle", h);
		if (r)
			send_json(fd, r, NULL, 0);
		json_decref(r);
	} else if (!strcmp(op, "attach")) {
		attach(d, fd, user, machine, wake, handle);
	} else {
		err_set(&e, 400, "invalid_op", "unknown op '%.40s' (redeem, attach, hold)", op);
	}
out:
	if (err_isset(&e))
		send_err(fd, &e, NULL);
	json_decref(j);
	close(fd);
	atomic_fetch_sub(&d->inflight, 1);
	return NULL;
}

static void *accept_loop(void *arg)
{
	struct desktop *d = arg;
	pthread_attr_t attr;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	for (;;) {
		struct pollfd p[2] = { { .fd = d->fd, .events = POLLIN },
				       { .fd = d->stop_pipe[0], .events = POLLIN } };
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		int fd = accept4(d->fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			/* Out of descriptors: the pending connection stays
			 * readable, so poll would spin; give them time. */
			if (errno == EMFILE || errno == ENFILE) {
				log_warn("desktop socket: accept: %s", strerror(errno));
				usleep(100 * 1000);
			}
			continue;
		}
		struct job *jb = malloc(sizeof(*jb));
		pthread_t t;
		if (!jb) {
			close(fd);
			continue;
		}
		jb->d = d;
		jb->fd = fd;
		atomic_fetch_add(&d->inflight, 1);
		if (pthread_create(&t, &attr, serve, jb) != 0) {
			atomic_fetch_sub(&d->inflight, 1);
			close(fd);
			free(jb);
		}
	}
	pthread_attr_destroy(&attr);
	return NULL;
}

struct desktop *desktop_start(struct hostd *h, const char *path, struct err *e)
{
	struct desktop *d = calloc(1, sizeof(*d));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (!d) {
		err_set(e, 500, "internal", "out of memory");
		return NULL;
	}
	d->h = h;
	d->fd = -1;
	d->stop_pipe[0] = d->stop_pipe[1] = -1;
	pthread_mutex_init(&d->lock, NULL);
	if (strlen(path) >= sizeof(sa.sun_path)) {
		err_set(e, 500, "internal", "desktop socket path too long: %s", path);
		goto fail;
	}
	snprintf(d->path, sizeof(d->path), "%s", path);
	snprintf(d->grants_path, sizeof(d->grants_path), "%s/desktop-grants.json",
		 h->cfg.state_dir);
	grants_load(d);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	unlink(path);
	d->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (d->fd < 0 || bind(d->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    chmod(path, 0666) < 0 || listen(d->fd, 64) < 0 ||
	    pipe2(d->stop_pipe, O_CLOEXEC) < 0) {
		err_errno(e, errno, "listen on %s", path);
		goto fail;
	}
	if (pthread_create(&d->thread, NULL, accept_loop, d) != 0) {
		err_set(e, 500, "internal", "cannot start the desktop socket's thread");
		goto fail;
	}
	log_info("desktop socket %s, tokens valid %d s, viewers at %s", path,
		 h->cfg.desktop_token_ttl_s, h->cfg.desktop_url);
	return d;
fail:
	if (d->fd >= 0) {
		close(d->fd);
		unlink(path);
	}
	if (d->stop_pipe[0] >= 0) {
		close(d->stop_pipe[0]);
		close(d->stop_pipe[1]);
	}
	pthread_mutex_destroy(&d->lock);
	free(d);
	return NULL;
}

void desktop_stop(struct desktop *d)
{
	if (!d)
		return;
	if (write(d->stop_pipe[1], "x", 1) < 0)
		log_warn("desktop: cannot stop the accept thread: %s", strerror(errno));
	pthread_join(d->thread, NULL);
	close(d->fd);
	unlink(d->path);
	close(d->stop_pipe[0]);
	close(d->stop_pipe[1]);
	/* Requests in flight use D: give them a moment (a wake may take
	 * longer; then D is left to the process's exit). */
	for (int i = 0; i < 100 && atomic_load(&d->inflight) > 0; i++)
		usleep(50 * 1000);
	if (atomic_load(&d->inflight) > 0)
		return;
	pthread_mutex_destroy(&d->lock);
	free(d);
}
