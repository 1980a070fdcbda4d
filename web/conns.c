#include "web/conns.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "common/addrcount.h"
#include "common/log.h"
#include "common/util.h"
#include "common/banned.h"

struct conn {
	struct conn *prev, *next;
	int fd;
	char key[64];           /* its address's share (an IPv6 /64) */
	bool counted;           /* in its share (refused ones are not) */
	enum { C_HEAD, C_REQUEST, C_IDLE, C_UPGRADED, C_CUT } st;
	int64_t deadline_ms;    /* C_HEAD, C_IDLE: shut down past it */
	void *slot;             /* a module's own (conns_slot) */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool stopping, started;
	pthread_t reaper;
	struct conn *list;
	int max_per_addr;
	int64_t head_ms, idle_ms;
	int64_t said_ms;        /* the last refusal logged (one a second) */
	unsigned unsaid;
} K = { .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER };

static struct addrcount per_addr = ADDRCOUNT_INIT;

/* The share C's client counts in: its IPv4 address, or its IPv6 /64 (a
 * client holds a /64, or a /48, as easily as one address). */
static void share_of(struct MHD_Connection *c, char *out, size_t outlen)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;

	snprintf(out, outlen, "?");
	if (sa && sa->sa_family == AF_INET) {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out,
			  (socklen_t)outlen);
	} else if (sa && sa->sa_family == AF_INET6) {
		const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
		if (IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)sa)->sin6_addr))
			snprintf(out, outlen, "%u.%u.%u.%u", a[12], a[13], a[14], a[15]);
		else
			snprintf(out, outlen, "%02x%02x:%02x%02x:%02x%02x:%02x%02x::/64", a[0],
				 a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
	}
}

static struct conn *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

void conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
		  enum MHD_ConnectionNotificationCode code)
{
	struct conn *k = *socket_context;
	const union MHD_ConnectionInfo *ci;
	bool log_now = false;
	unsigned unsaid = 0;

	(void)cls;
	if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
		if (!k)
			return;
		pthread_mutex_lock(&K.lock);
		if (k->prev)
			k->prev->next = k->next;
		else
			K.list = k->next;
		if (k->next)
			k->next->prev = k->prev;
		pthread_mutex_unlock(&K.lock);
		if (k->counted)
			addrcount_leave(&per_addr, k->key);
		free(k);
		*socket_context = NULL;
		return;
	}
	if (code != MHD_CONNECTION_NOTIFY_STARTED ||
	    !(ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD)))
		return;
	k = calloc(1, sizeof(*k));
	if (!k)
		abort();
	k->fd = ci->connect_fd;
	share_of(c, k->key, sizeof(k->key));
	k->counted = addrcount_enter(&per_addr, k->key, K.max_per_addr);
	pthread_mutex_lock(&K.lock);
	k->st = k->counted ? C_HEAD : C_CUT;
	k->deadline_ms = mono_ms() + K.head_ms;
	k->next = K.list;
	if (K.list)
		K.list->prev = k;
	K.list = k;
	if (!k->counted) {
		int64_t now = mono_ms();
		if (now - K.said_ms >= 1000) {
			log_now = true;
			unsaid = K.unsaid;
			K.unsaid = 0;
			K.said_ms = now;
		} else {
			K.unsaid++;
		}
	}
	pthread_mutex_unlock(&K.lock);
	*socket_context = k;
	if (!k->counted) {
		/* libmicrohttpd closes it at its next look. */
		shutdown(k->fd, SHUT_RDWR);
		if (log_now)
			log_warn("%s has %d connections open, at most: one more is turned away "
				 "(%u more in the last second; --max-per-addr)", k->key,
				 K.max_per_addr, unsaid);
	}
}

void conns_request_line(struct MHD_Connection *c)
{
	struct conn *k = conn_of(c);

	if (!k)
		return;
	pthread_mutex_lock(&K.lock);
	/* A kept connection's next request: its head is owed from now.  The
	 * first request's head was owed from the accept. */
	if (k->st == C_IDLE) {
		k->st = C_HEAD;
		k->deadline_ms = mono_ms() + K.head_ms;
	}
	pthread_mutex_unlock(&K.lock);
}

void conns_head(struct MHD_Connection *c)
{
	struct conn *k = conn_of(c);

	if (!k)
		return;
	pthread_mutex_lock(&K.lock);
	if (k->st == C_HEAD || k->st == C_IDLE)
		k->st = C_REQUEST;
	pthread_mutex_unlock(&K.lock);
}

void conns_done(struct MHD_Connection *c)
{
	struct conn *k = conn_of(c);

	if (!k)
		return;
	pthread_mutex_lock(&K.lock);
	if (k->st == C_REQUEST || k->st == C_HEAD) {
		k->st = C_IDLE;
		k->deadline_ms = mono_ms() + K.idle_ms;
	}
	pthread_mutex_unlock(&K.lock);
}

void conns_upgraded(struct MHD_Connection *c)
{
	struct conn *k = conn_of(c);

	if (!k)
		return;
	pthread_mutex_lock(&K.lock);
	if (k->st != C_CUT)
		k->st = C_UPGRADED;
	pthread_mutex_unlock(&K.lock);
}

void **conns_slot(struct MHD_Connection *c)
{
	struct conn *k = conn_of(c);

	return k ? &k->slot : NULL;
}

/* Every 250 ms: shut down the connections past their deadline.  The
 * descriptor is libmicrohttpd's and open until CLOSED unlists it (under
 * the lock held here), which then closes it. */
static void *reaper(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&K.lock);
	while (!K.stopping) {
		struct timespec ts;
		unsigned heads = 0, idles = 0;
		char last[64] = "";
		int64_t now = mono_ms();

		for (struct conn *k = K.list; k; k = k->next) {
			if ((k->st != C_HEAD && k->st != C_IDLE) || now < k->deadline_ms)
				continue;
			shutdown(k->fd, SHUT_RDWR);
			if (k->st == C_HEAD)
				heads++;
			else
				idles++;
			snprintf(last, sizeof(last), "%s", k->key);
			k->st = C_CUT;
		}
		if (heads || idles) {
			pthread_mutex_unlock(&K.lock);
			log_info("closed %u connection%s without a complete request head within "
				 "%llds and %u kept one%s without a new request within %llds (the "
				 "last from %s)", heads, heads == 1 ? "" : "s",
				 (long long)(K.head_ms / 1000), idles, idles == 1 ? "" : "s",
				 (long long)(K.idle_ms / 1000), last);
			pthread_mutex_lock(&K.lock);
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 250 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&K.wake, &K.lock, &ts);
	}
	pthread_mutex_unlock(&K.lock);
	return NULL;
}

int conns_start(int max_per_addr, int head_s, int idle_s)
{
	K.max_per_addr = max_per_addr;
	K.head_ms = (int64_t)head_s * 1000;
	K.idle_ms = (int64_t)idle_s * 1000;
	if (pthread_create(&K.reaper, NULL, reaper, NULL) != 0) {
		log_error("cannot start the connection reaper");
		return -1;
	}
	K.started = true;
	return 0;
}

void conns_stop(void)
{
	if (!K.started)
		return;
	pthread_mutex_lock(&K.lock);
	K.stopping = true;
	pthread_cond_signal(&K.wake);
	pthread_mutex_unlock(&K.lock);
	pthread_join(K.reaper, NULL);
	K.started = false;
}
