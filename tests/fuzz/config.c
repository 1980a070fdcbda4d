/*
 * Fuzz harness: hostd's configuration file (hostd/config.c config_parse:
 * the same line reader and key table as config_load, from memory), over
 * the defaults.  The input is the file's content.
 */
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "hostd/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct config c;
	struct err e = { 0 };

	config_defaults(&c, "/var/lib/berth");
	config_parse(&c, (const char *)data, size, "/etc/berth/berth.conf", &e);
	return 0;
}
