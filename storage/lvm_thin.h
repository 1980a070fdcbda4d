/* The lvm-thin backend's parsers of what LVM's tools print (exposed for
 * the fuzz harness; the backend itself is storage_lvm_thin, storage.h). */
#ifndef BERTH_LVM_THIN_H
#define BERTH_LVM_THIN_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* The LEN bytes of TEXT, `lvm lvs --reportformat json` output for TARGET
 * (named in the error): *ROWS gets its report[0].lv array (a new
 * reference).  -1 with 500 "lvm_report" and *ROWS NULL when TEXT is not
 * JSON or has no such array. */
int lvm_report_rows(const char *text, size_t len, const char *target, json_t **rows,
		    struct err *e);

/* In TEXT (NUL-terminated), `thin_ls -o DEV,MAPPED_BYTES,EXCLUSIVE_BYTES,
 * SHARED_BYTES` output (a header line, then one line per thin device), the
 * line of device ID: its exclusive and shared bytes.  -1 when none. */
int lvm_thin_ls_find(const char *text, long id, uint64_t *exclusive, uint64_t *shared);

#endif
