#include "hostd/preview.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/daemon.h"
#include "common/log.h"
#include "common/util.h"
#include "hostd/db.h"
#include "hostd/events.h"
#include "hostd/hostd.h"
#include "hostd/idle.h"
#include "hostd/machine.h"
#include "hostd/webctl.h"
#include "common/banned.h"

/* A secret (link token, cookie): 32 random bytes in hex. */
#define SECRET_HEX 64
/* Cookies a request may offer (one of berth's, and ones another preview's
 * guest set for the whole domain over HTTP). */
#define COOKIES_MAX 8
/* One try to connect to the guest's port; and how long a client's request
 * waits for a port that a wake's boot has not opened yet (boot_timeout
 * after the wake). */
#define CONNECT_TRY_MS 2000
/* A grant berth-web has not reported for this long is forgotten (its
 * connection ended, or berth-web went). */
#define GRANT_FORGET_MS (60 * 1000)
/* A watch report: at most this long a line. */
#define REPORT_MAX (1 << 20)
/* Wakes in progress at once (a browser's "start"). */
#define WAKES 64

/* A connection handed to berth-web: what let it in, for its reports. */
struct grant {
	uint64_t handle;
	int64_t preview_id;
	int64_t key_id;           /* the cookie's key; 0: let in as public */
	char machine_id[37];
	int64_t seen_ms;          /* monotonic: given or last reported */
};

/* A wake a browser's request started (op "preview", "start"). */
struct wake {
	char machine_id[37];      /* "" = free slot */
	bool running;             /* the thread is waking it */
	int64_t ended_ms;         /* monotonic, when it ended */
	char error[300];          /* why it failed; "" */
};

struct previews {
	pthread_mutex_t lock;
	struct grant *g;
	size_t ng, capg;
	struct wake w[WAKES];
	atomic_int wakers;        /* wake threads running */
};

int previews_start(struct hostd *h, struct err *e)
{
	struct previews *p = calloc(1, sizeof(*p));

	if (!p)
		return err_set(e, 500, "internal", "out of memory");
	pthread_mutex_init(&p->lock, NULL);
	h->previews = p;
	return 0;
}

void previews_stop(struct hostd *h)
{
	struct previews *p = h->previews;

	if (!p)
		return;
	/* A wake thread holds H: wait for it (a wake takes seconds). */
	for (int i = 0; i < 300 && atomic_load(&p->wakers) > 0; i++)
		usleep(100 * 1000);
	if (atomic_load(&p->wakers) > 0) {
		log_warn("previews: %d wakes still running at stop", atomic_load(&p->wakers));
		return;
	}
	h->previews = NULL;
	pthread_mutex_destroy(&p->lock);
	free(p->g);
	free(p);
}

/* ---- names ---------------------------------------------------------------- */

int preview_port_parse(const char *s, int *port, struct err *e)
{
	long v = 0;
	size_t i;

	for (i = 0; s[i] >= '0' && s[i] <= '9' && i < 6; i++)
		v = v * 10 + (s[i] - '0');
	if (i == 0 || s[i] || v < 1 || v > 65535 || s[0] == '0')
		return err_set(e, 400, "invalid_port", "bad port '%.20s': a number from 1 to 65535",
			       s);
	*port = (int)v;
	return 0;
}

int preview_label(const char *owner, const char *name, int port, char *out, size_t outlen,
		  struct err *e)
{
	/* A host name is case-blind and has no '_' or '.' in a label: the
	 * owner must be one as it is. */
	if (!name_valid(owner))
		return err_set(e, 409, "owner_not_a_host_name", "user name '%s' cannot be part of "
			       "a host name (a-z, 0-9 and '-' only): its machines have no previews",
			       owner);
	if (snprintf(out, outlen, "%d-%s-%s", port, name, owner) > 63 || strlen(out) > 63)
		return err_set(e, 409, "label_too_long", "%d-%s-%s is longer than a host name's "
			       "label may be (63 characters): a shorter machine name has previews",
			       port, name, owner);
	return 0;
}

void preview_url(const struct config *cfg, const char *label, const char *path, char *out,
		 size_t outlen)
{
	bool tls = cfg->tls_cert[0] != '\0';
	const char *colon = strrchr(cfg->http_listen, ':');
	int port = colon ? atoi(colon + 1) : 0;
	char at[16] = "";

	if (port > 0 && port != (tls ? 443 : 80))
		snprintf(at, sizeof(at), ":%d", port);
	snprintf(out, outlen, "%s://%s.%s%s%s", tls ? "https" : "http", label,
		 cfg->preview_domain, at, path);
}

/* A label as berth-web sends it: PORT-REST, with REST of a-z, 0-9, '-'
 * (the lookup decides what REST names).  0, or -1 with E. */
static int label_check(const char *label, struct err *e)
{
	size_t n = label ? strlen(label) : 0;
	const char *dash = label ? strchr(label, '-') : NULL;
	char port_s[8];
	int port;

	if (n < 5 || n > 63 || !dash || dash == label || (size_t)(dash - label) >= sizeof(port_s) ||
	    !dash[1])
		return err_set(e, 400, "invalid_label", "'%.63s' is no preview's name: "
			       "PORT-MACHINE-USER", label ? label : "");
	for (size_t i = 0; i < n; i++) {
		char c = label[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
			return err_set(e, 400, "invalid_label", "'%.63s' is no preview's name: "
				       "PORT-MACHINE-USER, of a-z, 0-9 and '-'", label);
	}
	memcpy(port_s, label, (size_t)(dash - label));
	port_s[dash - label] = '\0';
	return preview_port_parse(port_s, &port, e);
}

/* SECRET (SECRET_HEX + 1 bytes): a new random secret. */
static int secret_make(char *secret, struct err *e)
{
	unsigned char raw[SECRET_HEX / 2];

	if (random_bytes(raw, sizeof(raw)) < 0)
		return err_set(e, 500, "internal", "no randomness for a preview's secret");
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(secret + 2 * i, 3, "%02x", raw[i]);
	explicit_bzero(raw, sizeof(raw));
	return 0;
}

/* Whether S is a secret as secret_make writes them. */
static bool secret_form(const char *s)
{
	size_t i;

	for (i = 0; s[i]; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return i == SECRET_HEX;
}

/* HEX (65 bytes) = the sha256 of S in hex: what the database keeps. */
static int secret_hash(const char *s, char hex[65], struct err *e)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;

	if (!EVP_Digest(s, strlen(s), md, &len, EVP_sha256(), NULL) || len != 32)
		return err_set(e, 500, "internal", "sha256 of a preview's secret failed");
	for (unsigned int i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return 0;
}

/* ---- the API's side ------------------------------------------------------- */

static int needs_routed(const struct hostd *h, struct err *e)
{
	if (strcmp(h->cfg.network, "routed") == 0)
		return 0;
	return err_set(e, 409, "preview_needs_routed", "previews need network = routed: with "
		       "network = %s a machine's ports are reached only through QEMU's own "
		       "forwards", h->cfg.network);
}

static json_t *preview_json(const struct hostd *h, const struct db_preview *p, bool owner)
{
	char url[512];
	json_t *j;

	preview_url(&h->cfg, p->label, "/", url, sizeof(url));
	j = json_pack("{s:s, s:i, s:b, s:s, s:s, s:I}", "machine", p->machine, "port", p->port,
		      "public", p->public_, "label", p->label, "url", url, "created",
		      (json_int_t)p->created);
	if (j && owner)
		json_object_set_new(j, "owner", json_string(p->owner));
	return j;
}

json_t *preview_put(struct hostd *h, const char *owner, const char *name, int port,
		    bool public_, struct err *e)
{
	struct machine m;
	struct db_preview p;
	char label[64], secret[SECRET_HEX + 1], hash[65], path[128], link[512];
	int64_t expires, key_id;
	bool created;
	json_t *j;

	if (needs_routed(h, e) < 0 || db_machine_get(h->db, owner, name, &m, e) < 0 ||
	    preview_label(owner, name, port, label, sizeof(label), e) < 0)
		return NULL;
	/* A private preview's link (one browser in) is made before the
	 * preview, and a preview this call made goes again when the link
	 * cannot be kept: no private preview without a way in. */
	if (!public_ && (secret_make(secret, e) < 0 || secret_hash(secret, hash, e) < 0))
		return NULL;
	if (db_preview_put(h->db, m.id, port, label, public_, &created, e) < 0 ||
	    db_preview_get(h->db, m.id, port, &p, e) < 0)
		return NULL;
	expires = now_s() + PREVIEW_LINK_TTL_S;
	j = preview_json(h, &p, false);
	if (!j)
		err_set(e, 500, "internal", "out of memory");
	if (!j || (!public_ && db_preview_key_add(h->db, p.id, "link", hash, expires, &key_id,
						  e) < 0)) {
		struct err de = { 0 };
		json_decref(j);
		explicit_bzero(secret, sizeof(secret));
		if (created && db_preview_delete(h->db, p.id, &de) < 0)
			log_warn("preview %s: %s", label, de.msg);
		return NULL;
	}
	log_info("preview %s: %s's %s port %d, %s (%s)", label, owner, name, port,
		 public_ ? "public" : "private", created ? "made" : "changed");
	json_object_set_new(j, "created", json_boolean(created));
	if (public_)
		return j;
	snprintf(path, sizeof(path), "%s?token=%s", PREVIEW_LOGIN_PATH, secret);
	preview_url(&h->cfg, label, path, link, sizeof(link));
	json_object_set_new(j, "link", json_string(link));
	json_object_set_new(j, "link_expires", json_integer(expires));
	explicit_bzero(secret, sizeof(secret));
	explicit_bzero(link, sizeof(link));
	return j;
}

json_t *preview_list(struct hostd *h, const char *owner, struct err *e)
{
	struct db_preview *ps = NULL;
	size_t n = 0;
	json_t *arr;

	if (db_preview_list(h->db, owner, &ps, &n, e) < 0)
		return NULL;
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, preview_json(h, &ps[i], owner == NULL));
	free(ps);
	return json_pack("{s:o}", "previews", arr);
}

int preview_remove(struct hostd *h, const char *owner, const char *name, int port,
		   struct err *e)
{
	struct machine m;
	struct db_preview p;

	if (db_machine_get(h->db, owner, name, &m, e) < 0 ||
	    db_preview_get(h->db, m.id, port, &p, e) < 0 ||
	    db_preview_delete(h->db, p.id, e) < 0)
		return -1;
	log_info("preview %s: removed (berth-web cuts its connections at its next report)",
		 p.label);
	return 0;
}

/* ---- grants: the connections handed out ----------------------------------- */

/* Record a connection let in to preview PREVIEW_ID by KEY_ID (0: public)
 * on MACHINE_ID: its handle, nonzero. */
static uint64_t grant_add(struct previews *p, int64_t preview_id, int64_t key_id,
			  const char *machine_id)
{
	uint64_t handle = 0;

	while (!handle && random_bytes(&handle, sizeof(handle)) == 0)
		;
	if (!handle)
		return 0;
	pthread_mutex_lock(&p->lock);
	/* Forgotten ones go here too, not only at berth-web's reports: while
	 * no watch connection reports, grants would pile up. */
	if (p->ng == p->capg) {
		int64_t now = mono_ms();
		for (size_t i = 0; i < p->ng;) {
			if (now - p->g[i].seen_ms > GRANT_FORGET_MS)
				p->g[i] = p->g[--p->ng];
			else
				i++;
		}
	}
	if (p->ng == p->capg) {
		p->capg = p->capg ? p->capg * 2 : 64;
		p->g = realloc(p->g, p->capg * sizeof(*p->g));
		if (!p->g)
			abort();
	}
	struct grant *g = &p->g[p->ng++];
	g->handle = handle;
	g->preview_id = preview_id;
	g->key_id = key_id;
	snprintf(g->machine_id, sizeof(g->machine_id), "%s", machine_id);
	g->seen_ms = mono_ms();
	pthread_mutex_unlock(&p->lock);
	return handle;
}

/* ---- the connection to the guest ------------------------------------------ */

/* A TCP connection to HOST:PORT within TIMEOUT_MS (blocking once made,
 * no Nagle): the socket, or -1 with errno (ETIMEDOUT when it did not
 * answer). */
static int tcp_connect(const char *host, int port, int timeout_ms)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd, err = 0, one = 1;
	socklen_t el = sizeof(err);

	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
		errno = EINVAL;
		return -1;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		struct pollfd pf = { .fd = fd, .events = POLLOUT };
		int r;
		if (errno != EINPROGRESS)
			goto fail;
		while ((r = poll(&pf, 1, timeout_ms)) < 0 && errno == EINTR)
			;
		if (r == 0) {
			errno = ETIMEDOUT;
			goto fail;
		}
		if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
			goto fail;
		if (err) {
			errno = err;
			goto fail;
		}
	}
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0)
		goto fail;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
fail:
	err = errno;
	close(fd);
	errno = err;
	return -1;
}

/* A connection to machine M's PORT, tried until UNTIL_MS (monotonic; once
 * when it has passed): while its boot has not opened the port, nothing
 * answers or it is refused.  The socket, or -1 with E: 502
 * "port_closed". */
static int guest_connect(struct hostd *h, const struct machine *m, int port, int64_t until_ms,
			 struct err *e)
{
	char host[64];
	int hport, fd, errnum;

	if (machine_endpoint(h, m, host, sizeof(host), &hport, e) != 0)
		return err_set(e, 503, "no_address", "machine %s has no address yet", m->name);
	for (;;) {
		fd = tcp_connect(host, port, CONNECT_TRY_MS);
		if (fd >= 0)
			return fd;
		errnum = errno;
		if (mono_ms() >= until_ms)
			break;
		usleep(250 * 1000);
	}
	return err_set(e, 502, "port_closed", "nothing answers on port %d in machine %s (%s): "
		       "is a server listening there on 0.0.0.0, not only on 127.0.0.1?", port,
		       m->name, strerror(errnum));
}

/* ---- wakes a browser's request starts ------------------------------------- */

struct wake_job {
	struct hostd *h;
	char owner[64], name[64], id[37];
};

static void *wake_thread(void *arg)
{
	struct wake_job *j = arg;
	struct previews *p = j->h->previews;
	struct err e = { 0 };
	struct machine m;
	int64_t woke = -1;

	events_cause("a browser's request to a preview");
	if (machine_wake(j->h, j->owner, j->name, false, &m, &woke, &e) == 0)
		log_info("preview: woke %s/%s in %lld ms", j->owner, j->name, (long long)woke);
	else
		log_warn("preview: waking %s/%s: %s", j->owner, j->name, e.msg);
	pthread_mutex_lock(&p->lock);
	for (int i = 0; i < WAKES; i++) {
		if (strcmp(p->w[i].machine_id, j->id) != 0)
			continue;
		p->w[i].running = false;
		p->w[i].ended_ms = mono_ms();
		snprintf(p->w[i].error, sizeof(p->w[i].error), "%.299s",
			 err_isset(&e) ? e.msg : "");
	}
	pthread_mutex_unlock(&p->lock);
	atomic_fetch_sub(&p->wakers, 1);
	free(j);
	return NULL;
}

/* Machine M is asleep and a browser asks: a wake is started unless one
 * runs.  0 (answer "waking"), or -1 with E (the last wake's failure, or
 * no room for another). */
static int wake_start(struct hostd *h, const struct machine *m, struct err *e)
{
	struct previews *p = h->previews;
	struct wake *slot = NULL;
	int64_t now = mono_ms();
	int rc = 0;

	pthread_mutex_lock(&p->lock);
	for (int i = 0; i < WAKES; i++) {
		struct wake *w = &p->w[i];
		if (!strcmp(w->machine_id, m->id)) {
			slot = w;
			break;
		}
		if (!slot && (!w->machine_id[0] || (!w->running && now - w->ended_ms > 60000)))
			slot = w;
	}
	if (!slot) {
		rc = err_set(e, 503, "too_many_wakes", "%d machines are being woken for previews; "
			     "try again in a moment", WAKES);
	} else if (!strcmp(slot->machine_id, m->id) && slot->running) {
		rc = 0;
	} else if (!strcmp(slot->machine_id, m->id) && slot->error[0] && now - slot->ended_ms < 5000) {
		/* The wake a reload just waited for failed: say why, once. */
		rc = err_set(e, 502, "wake_failed", "waking %s failed: %s", m->name, slot->error);
		slot->error[0] = '\0';
	} else {
		struct wake_job *j = calloc(1, sizeof(*j));
		pthread_attr_t attr;
		pthread_t t;
		if (!j)
			abort();
		j->h = h;
		snprintf(j->owner, sizeof(j->owner), "%s", m->owner);
		snprintf(j->name, sizeof(j->name), "%s", m->name);
		snprintf(j->id, sizeof(j->id), "%s", m->id);
		memset(slot, 0, sizeof(*slot));
		snprintf(slot->machine_id, sizeof(slot->machine_id), "%s", m->id);
		slot->running = true;
		atomic_fetch_add(&p->wakers, 1);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &attr, wake_thread, j) != 0) {
			atomic_fetch_sub(&p->wakers, 1);
			slot->machine_id[0] = '\0';
			free(j);
			rc = err_set(e, 500, "internal", "cannot start a thread to wake %s", m->name);
		}
		pthread_attr_destroy(&attr);
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

/* When a wake of machine ID ended that a browser started (monotonic ms),
 * or 0 when none did lately; *RUNNING: one is in progress. */
static int64_t wake_ended(struct previews *p, const char *id, bool *running)
{
	int64_t t = 0;

	*running = false;
	pthread_mutex_lock(&p->lock);
	for (int i = 0; i < WAKES; i++) {
		if (strcmp(p->w[i].machine_id, id) != 0)
			continue;
		*running = p->w[i].running;
		t = p->w[i].ended_ms;
	}
	pthread_mutex_unlock(&p->lock);
	return t;
}

/* ---- the ops -------------------------------------------------------------- */

/* Which key of preview P the request's COOKIES hold: *KEY_ID (0: none). */
static int cookie_key(struct hostd *h, const struct db_preview *p, json_t *cookies,
		      int64_t *key_id, struct err *e)
{
	size_t i, tried = 0;
	json_t *v;

	*key_id = 0;
	json_array_foreach(cookies, i, v) {
		const char *s = json_string_value(v);
		char hash[65];
		if (!s || !secret_form(s) || tried++ >= COOKIES_MAX)
			continue;
		if (secret_hash(s, hash, e) < 0 ||
		    db_preview_key_find(h->db, p->id, "cookie", hash, now_s(), key_id, e) < 0)
			return -1;
		if (*key_id)
			return 0;
	}
	return 0;
}

/* Tell berth-web on CFD that its client's request is held for a wake:
 * from this line on it takes a client that closes its side as gone, and
 * stops waiting (web/hostctl.h). */
static void say_waiting(int cfd)
{
	json_t *j = json_pack("{s:b}", "waiting", 1);

	if (j)
		webctl_send(cfd, j, NULL, 0);
	json_decref(j);
}

void preview_op_connect(struct webctl *w, int cfd, json_t *req, int fd)
{
	struct hostd *h = webctl_hostd(w);
	struct err e = { 0 };
	const char *label = json_string_value(json_object_get(req, "label"));
	const char *wake = json_string_value(json_object_get(req, "wake"));
	json_t *cookies = json_object_get(req, "cookies"), *ans = NULL;
	struct db_preview p;
	struct machine m;
	int64_t key_id = 0, woke = -1, until;
	uint64_t handle;
	bool browser = wake && !strcmp(wake, "start"), waking;
	int gfd = -1;
	char hex[17];

	(void)fd;
	if (label_check(label, &e) < 0)
		goto out;
	if (db_preview_find(h->db, label, &p, &e) < 0) {
		if (e.status == 404) {
			err_clear(&e);
			err_set(&e, 404, "no_preview", "no preview %s: its owner makes one with "
				"`berth preview MACHINE PORT`", label);
		}
		goto out;
	}
	/* Who may: before anything is woken or connected. */
	if (!p.public_) {
		if (cookie_key(h, &p, cookies, &key_id, &e) < 0)
			goto out;
		if (!key_id) {
			err_set(&e, 403, "login_needed", "preview %s is private: %s opens it with the "
				"link `berth preview %s %d` prints (once per browser)", label, p.owner,
				p.machine, p.port);
			goto out;
		}
	}
	if (needs_routed(h, &e) < 0 || machine_settle(h, p.owner, p.machine, &m, &e) < 0)
		goto out;
	until = mono_ms();
	if (m.state != MS_RUNNING) {
		if (browser) {
			if (wake_start(h, &m, &e) == 0)
				err_set(&e, 503, "waking", "machine %s was asleep: berth is waking it",
					m.name);
			goto out;
		}
		say_waiting(cfd);
		events_cause("a request to preview %s", label);
		if (machine_wake(h, p.owner, p.machine, false, &m, &woke, &e) < 0)
			goto out;
		log_info("preview %s: woke %s/%s in %lld ms for a request", label, p.owner,
			 p.machine, (long long)woke);
		/* Its boot may open the port later than the machine runs. */
		until = mono_ms() + (int64_t)h->cfg.boot_timeout_s * 1000;
	} else if (!browser) {
		int64_t ended = wake_ended(h->previews, m.id, &waking);
		if (ended && mono_ms() - ended < (int64_t)h->cfg.boot_timeout_s * 1000)
			until = ended + (int64_t)h->cfg.boot_timeout_s * 1000;
	}
	gfd = guest_connect(h, &m, p.port, until, &e);
	if (gfd < 0) {
		/* A browser's page waits out the boot a wake of its started. */
		int64_t ended = wake_ended(h->previews, m.id, &waking);
		if (browser && (waking || (ended && mono_ms() - ended <
					   (int64_t)h->cfg.boot_timeout_s * 1000))) {
			err_clear(&e);
			err_set(&e, 503, "waking", "machine %s was asleep: berth is waking it",
				m.name);
		}
		goto out;
	}
	handle = grant_add(h->previews, p.id, key_id, m.id);
	if (!handle) {
		err_set(&e, 500, "internal", "no randomness for a grant");
		goto out;
	}
	snprintf(hex, sizeof(hex), "%016" PRIx64, handle);
	idle_touch(h, m.id, "preview");
	ans = json_pack("{s:s, s:s, s:s, s:i, s:b, s:I}", "grant", hex, "owner", p.owner,
			"machine", p.machine, "port", p.port, "public", p.public_, "woke_ms",
			(json_int_t)woke);
	if (ans)
		webctl_send(cfd, ans, &gfd, 1);
out:
	if (err_isset(&e)) {
		if (e.status != 503 || strcmp(e.code, "waking") != 0)
			log_info("preview %s: %s", label ? label : "?", e.msg);
		webctl_send_err(cfd, &e);
	}
	if (gfd >= 0)
		close(gfd);
	json_decref(ans);
}

void preview_op_login(struct webctl *w, int cfd, json_t *req, int fd)
{
	struct hostd *h = webctl_hostd(w);
	struct err e = { 0 };
	const char *label = json_string_value(json_object_get(req, "label"));
	const char *token = json_string_value(json_object_get(req, "token"));
	char hash[65], secret[SECRET_HEX + 1] = "";
	struct db_preview p;
	int64_t key_id;
	json_t *ans = NULL;

	(void)fd;
	if (label_check(label, &e) < 0 || db_preview_find(h->db, label, &p, &e) < 0)
		goto out;
	if (!token || !secret_form(token) || secret_hash(token, hash, &e) < 0 ||
	    db_preview_link_take(h->db, p.id, hash, now_s(), &e) < 0) {
		err_clear(&e);
		err_set(&e, 403, "invalid_link", "this link to preview %s is unknown, used or "
			"expired: `berth preview %s %d` prints a new one", label, p.machine, p.port);
		goto out;
	}
	if (secret_make(secret, &e) < 0 || secret_hash(secret, hash, &e) < 0 ||
	    db_preview_key_add(h->db, p.id, "cookie", hash, now_s() + PREVIEW_COOKIE_TTL_S,
			       &key_id, &e) < 0)
		goto out;
	log_info("preview %s: a link let a browser in", label);
	ans = json_pack("{s:s, s:i, s:s, s:s, s:i}", "cookie", secret, "max_age",
			PREVIEW_COOKIE_TTL_S, "owner", p.owner, "machine", p.machine, "port", p.port);
	if (ans)
		webctl_send(cfd, ans, NULL, 0);
out:
	if (err_isset(&e)) {
		log_info("preview %s: login: %s", label ? label : "?", e.msg);
		webctl_send_err(cfd, &e);
	}
	explicit_bzero(secret, sizeof(secret));
	json_decref(ans);
}

/* The grant of HANDLE (the caller holds the lock), or NULL. */
static struct grant *grant_find(struct previews *p, uint64_t handle)
{
	for (size_t i = 0; i < p->ng; i++)
		if (p->g[i].handle == handle)
			return &p->g[i];
	return NULL;
}

/* HANDLE's text (16 hex digits) into *OUT: false when it is not one. */
static bool handle_parse(json_t *v, uint64_t *out)
{
	const char *s = json_string_value(v);
	char *end;

	if (!s || strlen(s) != 16)
		return false;
	errno = 0;
	*out = strtoull(s, &end, 16);
	return !errno && !*end && *out;
}

/* One report: LIVE and ACTIVE handles; the answer's "cut" into CUT. */
static void report(struct hostd *h, json_t *live, json_t *active, json_t *cut)
{
	struct previews *p = h->previews;
	struct checked {
		int64_t preview_id, key_id;
		bool ok;
	} *seen = NULL;
	size_t nseen = 0, i, k;
	json_t *v;
	int64_t now = mono_ms(), t = now_s();

	/* Each distinct access once: a browser's connections share one. */
	json_array_foreach(live, i, v) {
		uint64_t handle;
		struct grant g;
		bool found = false, ok = false;
		if (!handle_parse(v, &handle))
			continue;
		pthread_mutex_lock(&p->lock);
		struct grant *gp = grant_find(p, handle);
		if (gp) {
			gp->seen_ms = now;
			g = *gp;
			found = true;
		}
		pthread_mutex_unlock(&p->lock);
		if (found) {
			for (k = 0; k < nseen; k++)
				if (seen[k].preview_id == g.preview_id && seen[k].key_id == g.key_id)
					break;
			if (k == nseen) {
				struct err e = { 0 };
				seen = realloc(seen, (nseen + 1) * sizeof(*seen));
				if (!seen)
					abort();
				seen[nseen].preview_id = g.preview_id;
				seen[nseen].key_id = g.key_id;
				/* A database that fails to answer cuts nothing. */
				if (db_preview_grant_ok(h->db, g.preview_id, g.key_id, t, &seen[nseen].ok,
							&e) < 0)
					seen[nseen].ok = true;
				nseen++;
			}
			ok = seen[k].ok;
		}
		if (!ok)
			json_array_append(cut, v);
	}
	free(seen);
	/* What was cut is forgotten, and what was not reported for long. */
	pthread_mutex_lock(&p->lock);
	for (i = 0; i < p->ng;) {
		bool drop = now - p->g[i].seen_ms > GRANT_FORGET_MS;
		json_array_foreach(cut, k, v) {
			uint64_t handle;
			if (handle_parse(v, &handle) && handle == p->g[i].handle)
				drop = true;
		}
		if (drop)
			p->g[i] = p->g[--p->ng];
		else
			i++;
	}
	/* The active ones' machines, each once. */
	char (*ids)[37] = NULL;
	size_t nids = 0;
	json_array_foreach(active, i, v) {
		uint64_t handle;
		struct grant *gp;
		if (!handle_parse(v, &handle) || !(gp = grant_find(p, handle)))
			continue;
		for (k = 0; k < nids && strcmp(ids[k], gp->machine_id); k++)
			;
		if (k < nids)
			continue;
		ids = realloc(ids, (nids + 1) * sizeof(*ids));
		if (!ids)
			abort();
		snprintf(ids[nids++], sizeof(ids[0]), "%s", gp->machine_id);
	}
	pthread_mutex_unlock(&p->lock);
	for (k = 0; k < nids; k++)
		idle_touch(h, ids[k], "preview");
	free(ids);
}

void preview_op_watch(struct webctl *w, int cfd, json_t *req, int fd)
{
	struct hostd *h = webctl_hostd(w);
	json_t *ok = json_pack("{s:b}", "watching", 1);
	char *line = malloc(REPORT_MAX + 1);
	size_t len = 0;

	(void)req;
	(void)fd;
	if (!line)
		abort();
	if (!ok || webctl_send(cfd, ok, NULL, 0) < 0)
		goto out;
	log_info("preview: berth-web watches its connections");
	while (!webctl_stopping(w)) {
		struct pollfd pf = { .fd = cfd, .events = POLLIN };
		int r = poll(&pf, 1, 1000);
		char *nl;
		if (r < 0 && errno != EINTR)
			break;
		if (r <= 0)
			continue;
		ssize_t n = read(cfd, line + len, REPORT_MAX - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		while ((nl = memchr(line, '\n', len))) {
			json_t *j = json_loadb(line, (size_t)(nl - line), 0, NULL);
			json_t *cut = json_array(), *ans;
			report(h, json_object_get(j, "live"), json_object_get(j, "active"), cut);
			ans = json_pack("{s:o}", "cut", cut);
			json_decref(j);
			r = ans ? webctl_send(cfd, ans, NULL, 0) : -1;
			json_decref(ans);
			if (r < 0)
				goto out;
			len -= (size_t)(nl + 1 - line);
			memmove(line, nl + 1, len);
		}
		if (len == REPORT_MAX) {
			log_warn("preview: a report from berth-web longer than %d bytes", REPORT_MAX);
			break;
		}
	}
	log_info("preview: berth-web's watch ended");
out:
	json_decref(ok);
	free(line);
}
