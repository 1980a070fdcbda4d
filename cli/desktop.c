/* berth desktop NAME [--json]: a one-time URL of machine NAME's screen,
 * served by berth-desktop (docs/desktop.md). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/util.h"
#include "common/banned.h"

int cmd_desktop(struct client *c, int argc, char **argv)
{
	char path[256];
	json_t *r;

	if (argc != 2 || !name_valid(argv[1])) {
		fprintf(stderr, "usage: berth desktop NAME [--json]\n");
		return 2;
	}
	snprintf(path, sizeof(path), "/v1/machines/%s/desktop", argv[1]);
	if (cli_call(c, "POST", path, NULL, &r) < 0)
		return 1;
	if (c->json)
		print_json(r);
	else
		printf("%s\n", jstr(r, "url"));
	json_decref(r);
	return 0;
}
