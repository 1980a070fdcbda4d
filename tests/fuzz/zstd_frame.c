/*
 * Fuzz harness: zstd files hostd reads (hostd/zmem.c): a suspended
 * machine's memory image on wake, checked by zmem_frame_check and
 * decompressed by zmem_feed into a FIFO for its reader (here this harness,
 * as libvirt is in hostd), and zmem_head (the start of a file, decompressed
 * when it is zstd).  The input is the file: written once per run to a
 * memfd, which both read by its /proc/self/fd path.  The FIFO is made once,
 * in a temporary directory removed at exit.
 */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/err.h"
#include "hostd/zmem.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[] = "/tmp/berth-fuzz-zstd.XXXXXX";
static char fifo[PATH_MAX];
static char rbuf[1 << 20];

static void cleanup(void)
{
	unlink(fifo);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);  /* as hostd */
	if (!mkdtemp(dir))
		abort();
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	if (mkfifo(fifo, 0600) < 0)
		abort();
	atexit(cleanup);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct buf head = BUF_INIT;
	struct err e = { 0 };
	char path[64];
	uint64_t content, window;
	struct zmem_feed *f;
	int fd = memfd_create("zstd-fuzz", MFD_CLOEXEC), rd;

	if (fd < 0)
		abort();
	if (size && write(fd, data, size) != (ssize_t)size)
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	zmem_frame_check(data, size, &content, &window);
	zmem_head(path, 4096, &head, &e);
	buf_free(&head);
	e = (struct err){ 0 };
	f = zmem_feed_start(path, fifo, &e);
	if (f) {
		rd = open(fifo, O_RDONLY | O_CLOEXEC);
		if (rd >= 0) {
			while (read(rd, rbuf, sizeof(rbuf)) > 0)
				;
			close(rd);
		}
		zmem_feed_finish(f, NULL, &e);
	}
	close(fd);
	return 0;
}
