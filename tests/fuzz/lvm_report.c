/*
 * Fuzz harness: what the lvm-thin backend parses of LVM's tools' output
 * (storage/lvm_thin.c): `lvm lvs --reportformat json` through
 * lvm_report_rows, with the rows' fields read as the backend reads them
 * (strtoull, strtod), and `thin_ls` output through lvm_thin_ls_find for
 * devices 1 to 3.  The input is the tool's output.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/err.h"
#include "storage/lvm_thin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	struct err e = { 0 };
	json_t *rows = NULL, *row;
	size_t i;
	uint64_t ex, sh;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	if (lvm_report_rows(text, size, "berth/pool", &rows, &e) == 0) {
		json_array_foreach(rows, i, row) {
			const char *v = json_string_value(json_object_get(row, "lv_size"));
			if (v)
				strtoull(v, NULL, 10);
			v = json_string_value(json_object_get(row, "data_percent"));
			if (v && *v)
				strtod(v, NULL);
		}
		json_decref(rows);
	}
	for (long id = 1; id <= 3; id++)
		lvm_thin_ls_find(text, id, &ex, &sh);
	free(text);
	return 0;
}
