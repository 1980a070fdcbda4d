/* clipagent: the guest side of the SPICE agent protocol's clipboard, for
 * berth's tiny test image (a desktop image runs the real spice-vdagent
 * against the same host side).  Built static by images/recipes/tiny.sh.
 *
 *   clipagent [-d] [-o TEXT] [FILE]
 *
 * Opens the virtio port named com.redhat.spice.0 (found in
 * /sys/class/virtio-ports: the tiny image has no udev for
 * /dev/virtio-ports/), announces clipboard-by-demand, and then:
 *  - when the host grabs the clipboard, asks for its text and writes it
 *    to FILE (replaced whole: written beside it, then renamed);
 *  - with -o TEXT, grabs the clipboard once the host announced itself
 *    (once: as an agent would after a copy) and answers requests for text
 *    with TEXT until the host grabs the clipboard.
 * -d: into the background once the port is open (stderr then goes to
 * /run/clipagent.log).  Runs until killed.  Messages the host sends are
 * checked (chunk and message sizes); a stream out of step is dropped and
 * read afresh. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PORT_NAME "com.redhat.spice.0"
#define MAX_MSG (2u << 20)

enum { CLIPBOARD = 4, ANNOUNCE = 6, GRAB = 7, REQUEST = 8, RELEASE = 9 };
#define UTF8_TEXT 1
#define CAP_BY_DEMAND 5

static int port = -1;
static const char *offer;
static const char *file;
static int grabbed, owner;  /* offered once; the clipboard is still ours */

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static int write_all(const void *data, size_t len)
{
	const char *p = data;

	while (len > 0) {
		ssize_t n = write(port, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* One message: its chunk header, message header, HEAD then BODY, in one
 * write (as spice-vdagentd does: one chunk, one buffer of the port, so
 * that it is not cut in two should the host's end reconnect meanwhile). */
static void send_msg(uint32_t type, const void *head, size_t hl, const void *body, size_t bl)
{
	unsigned char *m = malloc(28 + hl + bl);

	if (!m) {
		fprintf(stderr, "clipagent: out of memory\n");
		return;
	}
	memset(m, 0, 28);
	put32(m, 1);  /* VDP_CLIENT_PORT */
	put32(m + 4, (uint32_t)(20 + hl + bl));
	put32(m + 8, 1);  /* protocol */
	put32(m + 12, type);
	put32(m + 24, (uint32_t)(hl + bl));
	memcpy(m + 28, head, hl);
	if (bl)
		memcpy(m + 28 + hl, body, bl);
	if (write_all(m, 28 + hl + bl) < 0)
		fprintf(stderr, "clipagent: write: %s\n", strerror(errno));
	free(m);
}

static void send_u32(uint32_t type, uint32_t v)
{
	unsigned char b[4];

	put32(b, v);
	send_msg(type, b, 4, NULL, 0);
}

static void send_caps(int request)
{
	unsigned char b[8];

	put32(b, (uint32_t)request);
	put32(b + 4, 1u << CAP_BY_DEMAND);
	send_msg(ANNOUNCE, b, 8, NULL, 0);
}

static void save(const unsigned char *text, size_t len)
{
	char tmp[4096];
	int fd;

	if (!file)
		return;
	snprintf(tmp, sizeof(tmp), "%s.new", file);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, text, len) != (ssize_t)len || close(fd) < 0 ||
	    rename(tmp, file) < 0) {
		fprintf(stderr, "clipagent: write %s: %s\n", file, strerror(errno));
		return;
	}
	fprintf(stderr, "clipagent: %zu bytes from the host into %s\n", len, file);
}

static void handle(uint32_t type, const unsigned char *d, uint32_t size)
{
	switch (type) {
	case ANNOUNCE:
		if (size < 8)
			return;
		if (get32(d))
			send_caps(0);
		if (offer && !grabbed && (get32(d + 4) & (1u << CAP_BY_DEMAND))) {
			send_u32(GRAB, UTF8_TEXT);
			grabbed = owner = 1;
			fprintf(stderr, "clipagent: offered %zu bytes\n", strlen(offer));
		}
		break;
	case GRAB:
		owner = 0;
		for (uint32_t i = 0; i + 4 <= size; i += 4)
			if (get32(d + i) == UTF8_TEXT) {
				send_u32(REQUEST, UTF8_TEXT);
				break;
			}
		break;
	case REQUEST: {
		unsigned char b[4];
		int have = offer && owner && size >= 4 && get32(d) == UTF8_TEXT;
		put32(b, have ? UTF8_TEXT : 0);
		send_msg(CLIPBOARD, b, 4, have ? offer : NULL, have ? strlen(offer) : 0);
		break;
	}
	case CLIPBOARD:
		if (size >= 4 && get32(d) == UTF8_TEXT)
			save(d + 4, size - 4);
		break;
	default:
		break;
	}
}

/* /dev/vportNpM of the port named PORT_NAME, into PATH. */
static int find_port(char *path, size_t len)
{
	DIR *dir = opendir("/sys/class/virtio-ports");
	struct dirent *de;
	int found = -1;

	while (dir && (de = readdir(dir)) && found < 0) {
		char p[512], name[128] = "";
		FILE *f;
		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "/sys/class/virtio-ports/%s/name", de->d_name);
		if (!(f = fopen(p, "r")))
			continue;
		if (fgets(name, sizeof(name), f))
			name[strcspn(name, "\n")] = '\0';
		fclose(f);
		if (!strcmp(name, PORT_NAME)) {
			snprintf(path, len, "/dev/%s", de->d_name);
			found = 0;
		}
	}
	if (dir)
		closedir(dir);
	return found;
}

int main(int argc, char **argv)
{
	char path[300];
	int c, daemonize = 0;
	unsigned char hdr[8], *stream = NULL;
	size_t have = 0;

	while ((c = getopt(argc, argv, "do:")) != -1) {
		switch (c) {
		case 'd': daemonize = 1; break;
		case 'o': offer = optarg; break;
		default:
			fprintf(stderr, "usage: clipagent [-d] [-o TEXT] [FILE]\n");
			return 2;
		}
	}
	if (optind < argc)
		file = argv[optind++];
	if (optind != argc) {
		fprintf(stderr, "usage: clipagent [-d] [-o TEXT] [FILE]\n");
		return 2;
	}
	if (find_port(path, sizeof(path)) < 0) {
		fprintf(stderr, "clipagent: no virtio port named %s\n", PORT_NAME);
		return 1;
	}
	port = open(path, O_RDWR | O_CLOEXEC);
	if (port < 0) {
		fprintf(stderr, "clipagent: %s: %s\n", path, strerror(errno));
		return 1;
	}
	if (daemonize) {
		pid_t pid = fork();
		if (pid < 0)
			return 1;
		if (pid > 0)
			return 0;
		setsid();
		int nul = open("/dev/null", O_RDWR);
		int log = open("/run/clipagent.log", O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(nul, 0);
		dup2(nul, 1);
		dup2(log >= 0 ? log : nul, 2);
	}
	stream = malloc(MAX_MSG + 20);
	if (!stream)
		return 1;
	send_caps(1);
	for (;;) {
		/* A chunk: header, then its bytes onto the message stream. */
		size_t got = 0;
		while (got < sizeof(hdr)) {
			ssize_t n = read(port, hdr + got, sizeof(hdr) - got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				fprintf(stderr, "clipagent: read: %s\n", strerror(errno));
				return 1;
			}
			if (n == 0) {
				/* The host side is not connected: what was
				 * half read is lost; wait for it. */
				got = 0;
				have = 0;
				usleep(200 * 1000);
				continue;
			}
			got += (size_t)n;
		}
		uint32_t size = get32(hdr + 4);
		if (size > 2048 || size == 0 || have + size > MAX_MSG + 20) {
			fprintf(stderr, "clipagent: a chunk of %u bytes: dropped\n", size);
			have = 0;
			continue;
		}
		got = 0;
		while (got < size) {
			ssize_t n = read(port, stream + have + got, size - got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			got += (size_t)n;
		}
		if (got < size) {
			have = 0;
			continue;
		}
		have += size;
		while (have >= 20) {
			uint32_t msize = get32(stream + 16);
			if (get32(stream) != 1 || msize > MAX_MSG) {
				fprintf(stderr, "clipagent: a bad message: dropped\n");
				have = 0;
				break;
			}
			if (have < 20 + (size_t)msize)
				break;
			handle(get32(stream + 4), stream + 20, msize);
			memmove(stream, stream + 20 + msize, have - 20 - msize);
			have -= 20 + msize;
		}
	}
}
