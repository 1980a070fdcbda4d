/*
 * netprobe: what a guest can reach, for berth's network tests and
 * benchmarks (busybox's nc has no UDP and no timing).  Static, in the tiny
 * image.
 *
 * IP is an IPv4 or an IPv6 address.
 *
 *   netprobe tcp IP PORT [MS]       connect: prints "open", "refused" or
 *                                   "timeout" (after MS, default 2000)
 *   netprobe udp IP PORT [MS]       send "ping", wait for any answer:
 *                                   "open", "refused" (ICMP) or "timeout"
 *   netprobe stream IP PORT FILE    connect and append what arrives to FILE
 *                                   until the connection ends (it sends a
 *                                   byte every 0.5 s meanwhile); then write
 *                                   "end eof|reset|..." to FILE.end
 *   netprobe send IP PORT MIB       connect, send MIB MiB, print
 *                                   "sent N bytes in S s: M Mbit/s"
 *   netprobe rtt IP PORT N          N one-byte round trips to an echo
 *                                   server: min/median/max in microseconds
 *   netprobe http IP PORT PATH [HEADER...]
 *                                   GET PATH (HTTP/1.1, Connection: close,
 *                                   each HEADER a "Name: value" line), the
 *                                   answer read to its end: "status S head
 *                                   U body U bytes N s S mbit M", head and
 *                                   body the microseconds from the connect
 *                                   to the answer's first byte and to its
 *                                   body's (what follows the head: the
 *                                   first chunk's size line when chunked),
 *                                   N the bytes after the head
 * Exit status 0 when it did what was asked ("open" for tcp and udp), 1
 * otherwise, 2 for bad arguments.
 */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* An IPv4 or IPv6 address and a port. */
struct addr {
	struct sockaddr_storage ss;
	socklen_t len;
	int family;
};

static int addr_of(const char *ip, const char *port, struct addr *a)
{
	struct sockaddr_in *v4 = (struct sockaddr_in *)&a->ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&a->ss;
	unsigned short p = htons((unsigned short)atoi(port));

	memset(a, 0, sizeof(*a));
	if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
		v4->sin_family = a->family = AF_INET;
		v4->sin_port = p;
		a->len = sizeof(*v4);
		return 0;
	}
	if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1) {
		v6->sin6_family = a->family = AF_INET6;
		v6->sin6_port = p;
		a->len = sizeof(*v6);
		return 0;
	}
	return -1;
}

/* A TCP connection to SA within MS: the socket, or -1 with *WHY. */
static int tcp_connect(const struct addr *sa, int ms, const char **why)
{
	int fd = socket(sa->family, SOCK_STREAM, 0), err = 0;
	socklen_t len = sizeof(err);
	struct pollfd p;

	*why = "error";
	if (fd < 0)
		return -1;
	fcntl(fd, F_SETFL, O_NONBLOCK);
	if (connect(fd, (const struct sockaddr *)&sa->ss, sa->len) < 0 && errno != EINPROGRESS)
		goto fail;
	p.fd = fd;
	p.events = POLLOUT;
	if (poll(&p, 1, ms) == 0) {
		*why = "timeout";
		close(fd);
		return -1;
	}
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
	if (err) {
		errno = err;
		goto fail;
	}
	fcntl(fd, F_SETFL, 0);
	return fd;
fail:
	*why = errno == ECONNREFUSED ? "refused" : errno == EHOSTUNREACH || errno == ENETUNREACH
		? "unreachable" : errno == EACCES || errno == EPERM ? "refused" : "error";
	close(fd);
	return -1;
}

static int do_tcp(const struct addr *sa, int ms)
{
	const char *why;
	int fd = tcp_connect(sa, ms, &why);

	puts(fd >= 0 ? "open" : why);
	if (fd >= 0)
		close(fd);
	return fd >= 0 ? 0 : 1;
}

static int do_udp(const struct addr *sa, int ms)
{
	int fd = socket(sa->family, SOCK_DGRAM, 0);
	char buf[512];
	struct pollfd p;
	ssize_t n;

	if (fd < 0 || connect(fd, (const struct sockaddr *)&sa->ss, sa->len) < 0 ||
	    send(fd, "ping", 4, 0) != 4) {
		puts("error");
		return 1;
	}
	p.fd = fd;
	p.events = POLLIN;
	if (poll(&p, 1, ms) == 0) {
		puts("timeout");
		return 1;
	}
	n = recv(fd, buf, sizeof(buf), 0);
	puts(n > 0 ? "open" : errno == ECONNREFUSED || errno == EHOSTUNREACH ? "refused" : "error");
	return n > 0 ? 0 : 1;
}

static int do_stream(const struct addr *sa, const char *file)
{
	const char *why;
	char buf[4096], end[512];
	int fd = tcp_connect(sa, 5000, &why), out;
	ssize_t n;
	FILE *f;

	snprintf(end, sizeof(end), "%s.end", file);
	out = open(file, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (fd < 0 || out < 0) {
		if ((f = fopen(end, "w"))) {
			fprintf(f, "end %s\n", fd < 0 ? why : "open");
			fclose(f);
		}
		return 1;
	}
	/* Like an interactive client, it says something every half second
	 * (the server ignores it): a connection cut on the way is learnt at
	 * the next of these at the latest. */
	double next = now() + 0.5;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int ms = (int)((next - now()) * 1000);
		int r = poll(&p, 1, ms > 0 ? ms : 0);
		if (r > 0) {
			n = read(fd, buf, sizeof(buf));
			if (n <= 0 || write(out, buf, (size_t)n) != n)
				break;
		}
		if (now() >= next) {
			next += 0.5;
			if (write(fd, "", 1) < 0) {
				n = -1;
				break;
			}
		}
	}
	if ((f = fopen(end, "w"))) {
		fprintf(f, "end %s\n", n == 0 ? "eof" : errno == ECONNRESET ? "reset" : strerror(errno));
		fclose(f);
	}
	close(out);
	close(fd);
	return 0;
}

static int do_send(const struct addr *sa, long mib)
{
	static char buf[1 << 16];
	const char *why;
	int fd = tcp_connect(sa, 5000, &why);
	long long total = (long long)mib << 20, sent = 0;
	double t0;

	if (fd < 0) {
		puts(why);
		return 1;
	}
	t0 = now();
	while (sent < total) {
		ssize_t n = write(fd, buf, sizeof(buf));
		if (n <= 0) {
			puts("error");
			return 1;
		}
		sent += n;
	}
	shutdown(fd, SHUT_WR);
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	double s = now() - t0;
	printf("sent %lld bytes in %.3f s: %.1f Mbit/s\n", sent, s, (double)sent * 8 / s / 1e6);
	close(fd);
	return 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int do_rtt(const struct addr *sa, int count)
{
	const char *why;
	int fd = tcp_connect(sa, 5000, &why), one = 1;
	double *t = calloc((size_t)count, sizeof(*t));
	char c = 'x';

	if (fd < 0 || !t || count < 1) {
		puts(fd < 0 ? why : "error");
		return 1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (int i = 0; i < count; i++) {
		double t0 = now();
		if (write(fd, &c, 1) != 1 || read(fd, &c, 1) != 1) {
			puts("error");
			return 1;
		}
		t[i] = (now() - t0) * 1e6;
	}
	qsort(t, (size_t)count, sizeof(*t), cmp);
	printf("rtt us min %.0f median %.0f max %.0f\n", t[0], t[count / 2], t[count - 1]);
	close(fd);
	return 0;
}

static int do_http(const struct addr *sa, const char *path, char **headers, int nh)
{
	static char buf[1 << 16];
	const char *why;
	char req[8192];
	int fd, len, status = 0;
	double t0 = now(), head = -1, body = -1;
	long long bytes = 0;
	size_t got = 0;
	char host[64];

	inet_ntop(sa->family, sa->family == AF_INET ?
		  (const void *)&((const struct sockaddr_in *)&sa->ss)->sin_addr :
		  (const void *)&((const struct sockaddr_in6 *)&sa->ss)->sin6_addr, host, sizeof(host));
	len = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n",
		       path, host);
	for (int i = 0; i < nh && len < (int)sizeof(req) - 4; i++)
		len += snprintf(req + len, sizeof(req) - (size_t)len, "%s\r\n", headers[i]);
	if (len >= (int)sizeof(req) - 4) {
		puts("error");
		return 1;
	}
	len += snprintf(req + len, sizeof(req) - (size_t)len, "\r\n");
	fd = tcp_connect(sa, 5000, &why);
	if (fd < 0) {
		puts(why);
		return 1;
	}
	if (write(fd, req, (size_t)len) != len) {
		puts("error");
		return 1;
	}
	/* The head is looked for in the first 64 KiB. */
	for (bool in_head = true;;) {
		ssize_t n = in_head ? read(fd, buf + got, sizeof(buf) - got)
				    : read(fd, buf, sizeof(buf));
		if (n <= 0)
			break;
		if (head < 0)
			head = (now() - t0) * 1e6;
		if (!in_head) {
			if (body < 0)
				body = (now() - t0) * 1e6;
			bytes += n;
			continue;
		}
		got += (size_t)n;
		char *end = memmem(buf, got, "\r\n\r\n", 4);
		if (!end) {
			if (got == sizeof(buf)) {
				puts("error");
				return 1;
			}
			continue;
		}
		sscanf(buf, "HTTP/%*s %d", &status);
		in_head = false;
		size_t rest = got - (size_t)(end + 4 - buf);
		if (rest > 0) {
			body = (now() - t0) * 1e6;
			bytes += (long long)rest;
		}
	}
	double s = now() - t0;
	printf("status %d head %.0f body %.0f bytes %lld s %.3f mbit %.1f\n", status, head, body,
	       bytes, s, (double)bytes * 8 / s / 1e6);
	close(fd);
	return status ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct addr sa;

	if (argc < 4 || addr_of(argv[2], argv[3], &sa) < 0) {
		fputs("usage: netprobe tcp|udp IP PORT [MS] | stream IP PORT FILE | "
		      "send IP PORT MIB | rtt IP PORT N | http IP PORT PATH [HEADER...]\n", stderr);
		return 2;
	}
	if (!strcmp(argv[1], "tcp"))
		return do_tcp(&sa, argc > 4 ? atoi(argv[4]) : 2000);
	if (!strcmp(argv[1], "udp"))
		return do_udp(&sa, argc > 4 ? atoi(argv[4]) : 2000);
	if (!strcmp(argv[1], "stream") && argc > 4)
		return do_stream(&sa, argv[4]);
	if (!strcmp(argv[1], "send") && argc > 4)
		return do_send(&sa, atol(argv[4]));
	if (!strcmp(argv[1], "rtt") && argc > 4)
		return do_rtt(&sa, atoi(argv[4]));
	if (!strcmp(argv[1], "http") && argc > 4)
		return do_http(&sa, argv[4], argv + 5, argc - 5);
	fputs("netprobe: unknown mode\n", stderr);
	return 2;
}
