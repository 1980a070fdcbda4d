/* The qcow2 backend's parsers of what a volume file says (exposed for the
 * fuzz harness; the backend itself is storage_qcow2, storage.h). */
#ifndef BERTH_QCOW2_H
#define BERTH_QCOW2_H

#include <stddef.h>
#include <stdint.h>

/* The bytes of a qcow2 header the backend reads (version 2 and 3 alike). */
#define QCOW2_HEADER_MIN 32

struct qcow2_header {
	uint64_t backing_offset;   /* of the backing file's name; 0: none */
	uint32_t backing_len;      /* its length in bytes */
	uint64_t size;             /* the virtual disk's size in bytes */
};

/* The N bytes at H, a file's start: 0 with *Q filled when they are a qcow2
 * header (magic QFI\xfb, at least QCOW2_HEADER_MIN bytes), else -1 with *Q
 * cleared.  Nothing is checked beyond the magic: the caller checks the
 * backing name's offset and length against what it reads. */
int qcow2_header_parse(const unsigned char *h, size_t n, struct qcow2_header *q);

/* The volume BACKING (a backing file name, NUL-terminated) names when it is
 * DIR/NAME.qcow2 or DIR/NAME.raw (canonically, when the file exists): NAME
 * into PARENT (LEN bytes, truncated); "" when it is anything else. */
void qcow2_backing_volume(const char *dir, const char *backing, char *parent, size_t len);

#endif
