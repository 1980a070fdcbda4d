/*
 * Fuzz harness: a qcow2 volume's header as the qcow2 backend reads it
 * (storage/qcow2.c qcow2_header_parse: the virtual size, the backing
 * file's offset and length), then the backing file's name, where the
 * header says it is, bounded as qcow2_vol_parent bounds it (under
 * PATH_MAX), through qcow2_backing_volume (is it a volume of the pool?).
 * A volume's file is written by its machine's QEMU, that is by the guest.
 * The input is the file's start.
 */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "storage/qcow2.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct qcow2_header q;
	char backing[PATH_MAX], parent[256];

	if (qcow2_header_parse(data, size, &q) < 0 || q.backing_offset == 0 ||
	    q.backing_len == 0)
		return 0;
	if (q.backing_len >= sizeof(backing) || q.backing_offset >= size ||
	    size - q.backing_offset < q.backing_len)
		return 0;
	memcpy(backing, data + q.backing_offset, q.backing_len);
	backing[q.backing_len] = '\0';
	qcow2_backing_volume("/var/lib/berth/volumes", backing, parent, sizeof(parent));
	return 0;
}
