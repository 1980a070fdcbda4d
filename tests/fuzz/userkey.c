/*
 * Fuzz harness: an SSH public key line as a user adds it (POST /v1/keys,
 * `berth key add`): hostd/userkeys.c userkey_parse (type, base64, the
 * blob's wire format, RSA bits, libssh's check, the comment, the
 * fingerprint), then userkey_json of what it accepted.  The input is the
 * line (a NUL ends it, as in the JSON string it arrives in).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "hostd/userkeys.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *line = malloc(size + 1);
	struct userkey k;
	struct err e = { 0 };

	if (!line)
		return 0;
	memcpy(line, data, size);
	line[size] = '\0';
	if (userkey_parse(line, &k, &e) == 0)
		json_decref(userkey_json(&k));
	free(line);
	return 0;
}
