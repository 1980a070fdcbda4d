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
	fmt_size(st, "used", used, sizeof(used));
	fmt_size(st, "total", total, sizeof(total));
	if (*jstr(r, "hypervisor_note"))
		printf("hypervisor: %s (%s)\n", jstr(r, "hypervisor"), jstr(r, "hypervisor_note"));
	else
		printf("hypervisor: %s\n", jstr(r, "hypervisor"));
	printf("storage:    %s at %s (%s of %s used)\n", jstr(st, "backend"),
	       jstr(st, "location"), used, total);
	printf("network:    %s\n", jstr(r, "network"));
	printf("libvirt:    %s\n", jstr(r, "libvirt"));
	printf("berth:      %s (state %s, instance %s)\n", jstr(r, "version"),
	       jstr(r, "state_dir"), jstr(r, "instance"));
}

int cmd_info(struct client *c, int argc, char **argv)
{
	(void)argc, (void)argv;
	return cli_call_print(c, "GET", "/v1/info", NULL, print_info, NULL);
}
