/* webserve: the tiny image's test web server, for previews (t480,
 * bench/preview.py).  HTTP/1.1 with keep-alive, a thread per connection:
 *
 *   webserve [PORT]          (default 8080, on every address)
 *
 *   GET  /                 a small HTML page naming the machine
 *   GET  /bytes?n=N[&chunked=1]   N bytes (Content-Length, or chunked)
 *   POST /echo             the request's body back, chunked, as it arrives
 *   GET  /headers          the request's head as received (text/plain)
 *   GET  /log              the heads of the requests received since the last
 *                          /log (any connection; at most 64 KiB, the first kept)
 *   GET  /conn             "request N on this connection" (kept ones count up)
 *   GET  /setcookie        sets berth_preview=guest and app=1, and sends
 *                          Clear-Site-Data: "cookies"
 *   GET  /slow             four chunked lines, half a second apart
 *   GET  /close            an answer ended by closing the connection
 *   GET  /bad              a malformed answer (two framings), then the close
 *   GET  /ws               a WebSocket that echoes each message
 *
 * Static (no library in the image), so it carries its own SHA-1 for the
 * WebSocket handshake. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX 16384

static char host[64];

/* Every request's head, for /log. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_buf[65536];
static size_t log_len;

static void log_head(const char *head, size_t len)
{
	pthread_mutex_lock(&log_mu);
	if (len > sizeof(log_buf) - log_len)
		len = sizeof(log_buf) - log_len;
	memcpy(log_buf + log_len, head, len);
	log_len += len;
	pthread_mutex_unlock(&log_mu);
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

/* ---- SHA-1 (FIPS 180-4) and base64, for Sec-WebSocket-Accept ---------- */

#define ROL(x, n) (((x) << (n)) | ((x) >> (32 - (n))))

static void sha1(const unsigned char *msg, size_t len, unsigned char out[20])
{
	uint32_t h[5] = { 0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0 };
	size_t total = ((len + 8) / 64 + 1) * 64;
	unsigned char *m = calloc(1, total);
	uint64_t bits = (uint64_t)len * 8;

	memcpy(m, msg, len);
	m[len] = 0x80;
	for (int i = 0; i < 8; i++)
		m[total - 1 - i] = (unsigned char)(bits >> (8 * i));
	for (size_t off = 0; off < total; off += 64) {
		uint32_t w[80], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
		for (int i = 0; i < 16; i++)
			w[i] = (uint32_t)m[off + 4 * i] << 24 | (uint32_t)m[off + 4 * i + 1] << 16 |
			       (uint32_t)m[off + 4 * i + 2] << 8 | m[off + 4 * i + 3];
		for (int i = 16; i < 80; i++)
			w[i] = ROL(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
		for (int i = 0; i < 80; i++) {
			uint32_t f, k;
			if (i < 20)
				f = (b & c) | (~b & d), k = 0x5A827999;
			else if (i < 40)
				f = b ^ c ^ d, k = 0x6ED9EBA1;
			else if (i < 60)
				f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
			else
				f = b ^ c ^ d, k = 0xCA62C1D6;
			uint32_t t = ROL(a, 5) + f + e + k + w[i];
			e = d, d = c, c = ROL(b, 30), b = a, a = t;
		}
		h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
	}
	for (int i = 0; i < 20; i++)
		out[i] = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
	free(m);
}

static void base64(const unsigned char *in, size_t len, char *out)
{
	static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t o = 0;

	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0) |
			     (i + 2 < len ? in[i + 2] : 0);
		out[o++] = t[v >> 18 & 63];
		out[o++] = t[v >> 12 & 63];
		out[o++] = i + 1 < len ? t[v >> 6 & 63] : '=';
		out[o++] = i + 2 < len ? t[v & 63] : '=';
	}
	out[o] = '\0';
}

/* ---- a connection --------------------------------------------------------- */

struct conn {
	int fd;
	char buf[HEAD_MAX + 65536];
	size_t len;        /* bytes in buf */
	int served;        /* requests on this connection so far */
};

/* Read until buf holds N bytes (or more); -1 at the end. */
static int need(struct conn *c, size_t n)
{
	while (c->len < n) {
		ssize_t r = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
		if (r <= 0)
			return -1;
		c->len += (size_t)r;
	}
	return 0;
}

static void consume(struct conn *c, size_t n)
{
	memmove(c->buf, c->buf + n, c->len - n);
	c->len -= n;
}

/* The value of header NAME in HEAD (a copy into OUT), or NULL. */
static char *header(const char *head, const char *name, char *out, size_t outlen)
{
	size_t nl = strlen(name);

	for (const char *p = strstr(head, "\r\n"); p && p[2] != '\r'; p = strstr(p + 2, "\r\n")) {
		const char *l = p + 2;
		if (strncasecmp(l, name, nl) == 0 && l[nl] == ':') {
			const char *v = l + nl + 1, *e = strstr(v, "\r\n");
			while (*v == ' ')
				v++;
			snprintf(out, outlen, "%.*s", (int)(e - v), v);
			return out;
		}
	}
	return NULL;
}

static int reply(struct conn *c, const char *status, const char *type, const char *extra,
		 const char *body, size_t len)
{
	char h[1024];
	int n = snprintf(h, sizeof(h), "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "%s\r\n", status, type, len, extra);
	return write_all(c->fd, h, (size_t)n) < 0 || write_all(c->fd, body, len) < 0 ? -1 : 0;
}

static int chunk(int fd, const void *p, size_t n)
{
	char h[32];
	int hl = snprintf(h, sizeof(h), "%zx\r\n", n);
	return write_all(fd, h, (size_t)hl) < 0 || write_all(fd, p, n) < 0 ||
	       write_all(fd, "\r\n", 2) < 0 ? -1 : 0;
}

/* The request's body, in pieces, to FN (or dropped). */
static int body(struct conn *c, const char *head, int (*fn)(struct conn *, const char *, size_t))
{
	char v[64];

	if (header(head, "Content-Length", v, sizeof(v))) {
		unsigned long long left = strtoull(v, NULL, 10);
		while (left) {
			if (!c->len && need(c, 1) < 0)
				return -1;
			size_t n = c->len < left ? c->len : (size_t)left;
			if (fn && fn(c, c->buf, n) < 0)
				return -1;
			consume(c, n);
			left -= n;
		}
	} else if (header(head, "Transfer-Encoding", v, sizeof(v))) {
		for (;;) {
			char *nl;
			while (!(nl = memchr(c->buf, '\n', c->len)))
				if (need(c, c->len + 1) < 0)
					return -1;
			unsigned long long size = strtoull(c->buf, NULL, 16);
			consume(c, (size_t)(nl - c->buf) + 1);
			if (!size) {
				/* Trailers, up to the empty line. */
				for (;;) {
					while (!(nl = memchr(c->buf, '\n', c->len)))
						if (need(c, c->len + 1) < 0)
							return -1;
					size_t ll = (size_t)(nl - c->buf) + 1;
					consume(c, ll);
					if (ll <= 2)
						return 0;
				}
			}
			while (size) {
				if (!c->len && need(c, 1) < 0)
					return -1;
				size_t n = c->len < size ? c->len : (size_t)size;
				if (fn && fn(c, c->buf, n) < 0)
					return -1;
				consume(c, n);
				size -= n;
			}
			if (need(c, 2) < 0)
				return -1;
			consume(c, 2);
		}
	}
	return 0;
}

static int echo_piece(struct conn *c, const char *p, size_t n)
{
	return chunk(c->fd, p, n);
}

/* A WebSocket that echoes each message (RFC 6455; the client's frames are
 * masked, ours are not); a ping is answered, a close returned. */
static void websocket(struct conn *c, const char *key)
{
	char acc[320], h[512];
	unsigned char dg[20];

	snprintf(acc, sizeof(acc), "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
	sha1((unsigned char *)acc, strlen(acc), dg);
	base64(dg, 20, acc);
	int n = snprintf(h, sizeof(h), "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
			 "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", acc);
	if (write_all(c->fd, h, (size_t)n) < 0)
		return;
	for (;;) {
		if (need(c, 2) < 0)
			return;
		unsigned char b0 = (unsigned char)c->buf[0], b1 = (unsigned char)c->buf[1];
		size_t hl = 2, len = b1 & 0x7f;
		if (len == 126) {
			if (need(c, 4) < 0)
				return;
			len = (size_t)(unsigned char)c->buf[2] << 8 | (unsigned char)c->buf[3];
			hl = 4;
		} else if (len == 127) {
			if (need(c, 10) < 0)
				return;
			len = 0;
			for (int i = 0; i < 8; i++)
				len = len << 8 | (unsigned char)c->buf[2 + i];
			hl = 10;
		}
		if (!(b1 & 0x80) || len > 65536)
			return;
		if (need(c, hl + 4 + len) < 0)
			return;
		unsigned char *mask = (unsigned char *)c->buf + hl, *p = mask + 4;
		for (size_t i = 0; i < len; i++)
			p[i] ^= mask[i % 4];
		int op = b0 & 0x0f;
		unsigned char out[10];
		size_t ol = 0;
		out[ol++] = (unsigned char)(0x80 | (op == 9 ? 10 : op));
		if (len < 126) {
			out[ol++] = (unsigned char)len;
		} else {
			out[ol++] = 126;
			out[ol++] = (unsigned char)(len >> 8);
			out[ol++] = (unsigned char)len;
		}
		if (op != 10 && (write_all(c->fd, out, ol) < 0 || write_all(c->fd, p, len) < 0))
			return;
		consume(c, hl + 4 + len);
		if (op == 8)
			return;
	}
}

static char pattern[65536];

/* One request; 0 to read the next on this connection, -1 to close. */
static int request(struct conn *c)
{
	char head[HEAD_MAX + 1], method[16], target[2048], v[256], *end;
	size_t hl;

	while (!(end = memmem(c->buf, c->len, "\r\n\r\n", 4)))
		if (c->len >= HEAD_MAX || need(c, c->len + 1) < 0)
			return -1;
	hl = (size_t)(end - c->buf) + 4;
	memcpy(head, c->buf, hl);
	head[hl] = '\0';
	consume(c, hl);
	if (sscanf(head, "%15s %2047s", method, target) != 2)
		return -1;
	bool close_after = header(head, "Connection", v, sizeof(v)) && !strcasecmp(v, "close");
	c->served++;
	if (strcmp(target, "/log") != 0)
		log_head(head, hl);

	if (!strcmp(target, "/ws") && header(head, "Sec-WebSocket-Key", v, sizeof(v))) {
		websocket(c, v);
		return -1;
	}
	if (!strcmp(target, "/echo")) {
		const char *h = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
				"Transfer-Encoding: chunked\r\n\r\n";
		if (write_all(c->fd, h, strlen(h)) < 0 || body(c, head, echo_piece) < 0 ||
		    write_all(c->fd, "0\r\n\r\n", 5) < 0)
			return -1;
		return close_after ? -1 : 0;
	}
	if (body(c, head, NULL) < 0)
		return -1;
	if (!strcmp(target, "/")) {
		char page[256];
		int n = snprintf(page, sizeof(page), "<!doctype html><title>webserve</title>"
				 "<h1>hello from %s</h1>\n", host);
		if (reply(c, "200 OK", "text/html", "", page, (size_t)n) < 0)
			return -1;
	} else if (!strncmp(target, "/bytes?", 7)) {
		const char *q = strstr(target, "n=");
		unsigned long long n = q ? strtoull(q + 2, NULL, 10) : 0;
		bool chunked = strstr(target, "chunked=1") != NULL;
		char h[256];
		int hl2 = snprintf(h, sizeof(h), chunked ? "HTTP/1.1 200 OK\r\nContent-Type: "
				   "application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n" :
				   "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
				   "Content-Length: %llu\r\n\r\n", n);
		if (write_all(c->fd, h, (size_t)hl2) < 0)
			return -1;
		while (n) {
			size_t k = n < sizeof(pattern) ? (size_t)n : sizeof(pattern);
			if ((chunked ? chunk(c->fd, pattern, k) : write_all(c->fd, pattern, k)) < 0)
				return -1;
			n -= k;
		}
		if (chunked && write_all(c->fd, "0\r\n\r\n", 5) < 0)
			return -1;
	} else if (!strcmp(target, "/conn")) {
		char line[64];
		int n = snprintf(line, sizeof(line), "request %d on this connection\n", c->served);
		if (reply(c, "200 OK", "text/plain", "", line, (size_t)n) < 0)
			return -1;
	} else if (!strcmp(target, "/log")) {
		static char copy[sizeof(log_buf)];
		static pthread_mutex_t copy_mu = PTHREAD_MUTEX_INITIALIZER;
		pthread_mutex_lock(&copy_mu);
		pthread_mutex_lock(&log_mu);
		size_t n = log_len;
		memcpy(copy, log_buf, n);
		log_len = 0;
		pthread_mutex_unlock(&log_mu);
		int rc = reply(c, "200 OK", "text/plain", "", copy, n);
		pthread_mutex_unlock(&copy_mu);
		if (rc < 0)
			return -1;
	} else if (!strcmp(target, "/headers")) {
		if (reply(c, "200 OK", "text/plain", "", head, hl) < 0)
			return -1;
	} else if (!strcmp(target, "/setcookie")) {
		if (reply(c, "200 OK", "text/plain", "Set-Cookie: berth_preview=guest; Path=/\r\n"
			  "Set-Cookie: app=1; Path=/\r\nClear-Site-Data: \"cookies\"\r\n", "set\n",
			  4) < 0)
			return -1;
	} else if (!strcmp(target, "/slow")) {
		const char *h = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
				"Transfer-Encoding: chunked\r\n\r\n";
		if (write_all(c->fd, h, strlen(h)) < 0)
			return -1;
		for (int i = 1; i <= 4; i++) {
			char line[32];
			int n = snprintf(line, sizeof(line), "tick %d\n", i);
			if (chunk(c->fd, line, (size_t)n) < 0)
				return -1;
			usleep(500 * 1000);
		}
		if (write_all(c->fd, "0\r\n\r\n", 5) < 0)
			return -1;
	} else if (!strcmp(target, "/bad")) {
		const char *a = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
				"Transfer-Encoding: chunked\r\n\r\nhello";
		write_all(c->fd, a, strlen(a));
		return -1;
	} else if (!strcmp(target, "/close")) {
		const char *a = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
				"\r\nclosed by the server\n";
		write_all(c->fd, a, strlen(a));
		return -1;
	} else {
		if (reply(c, "404 Not Found", "text/plain", "", "no such page\n", 13) < 0)
			return -1;
	}
	return close_after ? -1 : 0;
}

static void *serve(void *arg)
{
	struct conn *c = arg;

	while (request(c) == 0)
		;
	close(c->fd);
	free(c);
	return NULL;
}

int main(int argc, char **argv)
{
	int port = argc > 1 ? atoi(argv[1]) : 8080, one = 1;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	pthread_attr_t attr;
	int s = socket(AF_INET, SOCK_STREAM, 0);

	signal(SIGPIPE, SIG_IGN);
	gethostname(host, sizeof(host) - 1);
	for (size_t i = 0; i < sizeof(pattern); i++)
		pattern[i] = (char)('a' + i % 26);
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 1024) < 0) {
		perror("webserve");
		return 1;
	}
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 << 10);
	for (;;) {
		int fd = accept(s, NULL, NULL);
		pthread_t t;
		if (fd < 0)
			continue;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		struct conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->fd = fd;
		if (pthread_create(&t, &attr, serve, c) != 0) {
			close(fd);
			free(c);
		}
	}
}
