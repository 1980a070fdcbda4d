/* berth info: the host's hypervisor, storage, network and versions. */
#include <stdio.h>

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
	printf("berth:      %s (state %s, instance %s)\n", cli_jstr(r, "version"),
	       cli_jstr(r, "state_dir"), cli_jstr(r, "instance"));
}

int cmd_info(struct client *c, int argc, char **argv)
{
	(void)argc, (void)argv;
	return cli_call_print(c, "GET", "/v1/info", NULL, print_info, NULL);
}
