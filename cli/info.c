/* berth info: the host's hypervisor, storage, network and versions; berth
 * quota: the caller's quotas. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/banned.h"

static void print_info(json_t *r, void *data)
{
	json_t *st = json_object_get(r, "storage");
	char used[32], total[32];

	(void)data;
	cli_fmt_size(st, "used", used, sizeof(used));
	cli_fmt_size(st, "total", total, sizeof(total));
	if (*cli_jstr(r, "hypervisor_note"))
		printf("hypervisor: %s (%s)\n", cli_jstr(r, "hypervisor"),
		       cli_jstr(r, "hypervisor_note"));
	else
		printf("hypervisor: %s\n", cli_jstr(r, "hypervisor"));
	printf("storage:    %s at %s (%s of %s used)\n", cli_jstr(st, "backend"),
	       cli_jstr(st, "location"), used, total);
	printf("network:    %s\n", cli_jstr(r, "network"));
	printf("libvirt:    %s\n", cli_jstr(r, "libvirt"));
	printf("berth:      %s (database schema %lld, state %s, instance %s)\n",
	       cli_jstr(r, "version"), cli_jint(r, "schema"), cli_jstr(r, "state_dir"),
	       cli_jstr(r, "instance"));
}

int cmd_info(struct client *c, int argc, char **argv)
{
	(void)argc, (void)argv;
	return cli_call_print(c, "GET", "/v1/info", NULL, print_info, NULL);
}

static void print_quota(json_t *r, void *data)
{
	static const char *const sizes[] = { "max_running_memory", "max_total_disk", NULL };
	const char *k;
	json_t *q;

	(void)data;
	if (json_is_true(json_object_get(r, "exempt")))
		printf("root: no quota applies (the limits below are other users')\n");
	printf("%-24s %12s %12s\n", "QUOTA", "USED", "LIMIT");
	json_object_foreach(json_object_get(r, "quotas"), k, q) {
		char used[32], limit[32];
		bool size = false;
		for (size_t i = 0; sizes[i]; i++)
			size |= !strcmp(k, sizes[i]);
		if (size) {
			cli_fmt_size(q, "used", used, sizeof(used));
			cli_fmt_size(q, "limit", limit, sizeof(limit));
		} else {
			snprintf(used, sizeof(used), "%lld", cli_jint(q, "used"));
			snprintf(limit, sizeof(limit), "%lld", cli_jint(q, "limit"));
		}
		printf("%-24s %12s %12s\n", k, used, cli_jint(q, "limit") ? limit : "none");
	}
}

/* berth quota: the caller's quotas, their limits and what is used. */
int cmd_quota(struct client *c, int argc, char **argv)
{
	(void)argc, (void)argv;
	return cli_call_print(c, "GET", "/v1/quota", NULL, print_quota, NULL);
}
