/* Reading and writing a volume's guest-visible bytes, whatever its format:
 * qemu-nbd serves the file or block device (a qcow2 chain is read through
 * its backing files) and libnbd talks to it over a socket-activated
 * connection.  A raw regular file opened for writing (a new image base of
 * the qcow2 backend) is written directly with pwrite() instead, O_DIRECT
 * where the write is aligned.  Used to fill a new image base from a stream
 * and to export a machine's disk, in constant memory. */
#ifndef BERTH_VOLIO_H
#define BERTH_VOLIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct volio;

/* Serve PATH in FORMAT ("qcow2" or "raw") and connect.  WRITABLE for
 * filling a new base (then write-only when PATH is a raw regular file:
 * volio_read fails and volio_zero answers "not zero"); otherwise
 * read-only (a shared lock: a checkpoint under a running machine is a
 * backing file its QEMU only reads).  NULL with E set. */
struct volio *volio_open(const char *path, const char *format, bool writable,
			 struct err *e);
/* The volume's size in bytes. */
uint64_t volio_size(const struct volio *v);
/* Write LEN bytes of DATA at OFF.  Over NBD up to a few writes stay in
 * flight (the data is copied): a failure may be reported by a later call.
 * To a raw file the write is done on return; DATA aligned to 4096 bytes
 * where OFF is lets it bypass the page cache. */
int volio_write(struct volio *v, uint64_t off, const void *data, size_t len,
		struct err *e);
/* Whether volio_write may be called from several threads at once, for
 * different ranges (a raw file written directly); false over NBD. */
bool volio_parallel(const struct volio *v);
/* Wait for every write and flush them to stable storage. */
int volio_flush(struct volio *v, struct err *e);
/* Read LEN bytes at OFF into BUF. */
int volio_read(struct volio *v, uint64_t off, void *buf, size_t len, struct err *e);
/* Whether the LEN bytes at OFF are known to read as zeros; on return
 * *RUN is how many bytes from OFF share that answer (at least 1, at most
 * LEN).  A server that cannot tell answers "not zero". */
bool volio_zero(struct volio *v, uint64_t off, uint64_t len, uint64_t *run);
/* Disconnect and stop qemu-nbd; accepts NULL. */
void volio_close(struct volio *v);

#endif
