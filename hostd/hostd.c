/* hostd's shared context: the test crash points. */
#include "hostd/hostd.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "common/banned.h"

void hostd_crash_point(struct hostd *h, const char *point)
{
	const char *at = getenv("BERTH_TEST_CRASH_AT");
	char path[PATH_MAX];

	if (!at || strcmp(at, point) != 0)
		return;
	log_warn("test crash point %s reached; waiting to be killed", point);
	xsnprintf(path, sizeof(path), "%s/crash-point", h->cfg.state_dir);
	file_write_atomic(path, point, strlen(point), 0600, NULL);
	for (;;)
		pause();
}
