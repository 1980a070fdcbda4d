/* berth: the command line of berth.  It talks to berth-hostd's JSON API on
 * STATE/hostd.sock; STATE comes from --state, $BERTH_STATE or
 * /var/lib/berth.  With --url or $BERTH_URL it talks to berth-web there
 * instead, as the user of the API token in $BERTH_TOKEN or --token-file
 * (never on the command line, where other users would see it).  Every
 * listing takes --json. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/hostapi.h"
#include "common/util.h"
#include "common/banned.h"

static const char usage_text[] =
	"usage: berth [--state DIR | --url URL [--token-file F]] [--json] COMMAND [ARGS]\n"
	"\n"
	"  up [--detach]                  start libvirtd (if none), hostd, the tiny image, a demo machine\n"
	"  down                           stop the machines and what `up` started\n"
	"  info                           hypervisor (kvm|tcg), storage backend, versions\n"
	"  quota                          your quotas: each limit and what you use\n"
	"  ls                             list machines\n"
	"  show NAME                      one machine, with its SSH endpoint\n"
	"  create NAME --template T       a running machine from template T, with no boot\n"
	"  create NAME [--image I] [--cpus N] [--memory 512M] [--disk 4G] [--idle 15m|never]\n"
	"         [--egress open|none|RULES]\n"
	"         [--no-start] [--no-wait]\n"
	"  set NAME --idle 30m|never|default  suspend it after that long quiet (the idle policy)\n"
	"  set NAME --egress open|none|RULES|default  what its guest may reach: RULES are\n"
	"         domains, CIDRs and ports, e.g. github.com,*.npmjs.org:443,198.51.100.0/24\n"
	"  egress log NAME                  its policy, and what it reached and was refused\n"
	"  start|stop|suspend|resume|restart NAME [--no-wait] [--timeout S]\n"
	"  rm NAME                        delete a machine and its disk\n"
	"  exec NAME [--no-wake] [--connect-timeout S] -- CMD...\n"
	"                                 run CMD in the machine; exits with its status\n"
	"                                 (S: seconds to connect and log in, 15 by default)\n"
	"  cp FILE NAME:PATH | cp NAME:PATH FILE|DIR|-   a file into or out of a machine\n"
	"  checkpoint NAME [CKPT] [--memory] | checkpoints NAME | checkpoint rm NAME CKPT\n"
	"  restore NAME CKPT [--no-wait]      return the machine to a checkpoint\n"
	"  fork NAME NEW [--from CKPT | --live] [--no-start] [--no-wait]\n"
	"  image ls | image build RECIPE [--name N] | image rm NAME\n"
	"  image import NAME FILE [--sha256 H] [--format raw|qcow2] [--like IMAGE] [--user U]\n"
	"  image export MACHINE[@CHECKPOINT] FILE.zst [--force]\n"
	"  image save MACHINE IMAGE [--checkpoint C]   an image of your machine, yours alone\n"
	"  image publish NAME | image unpublish NAME   (root) open an image to every user, or not\n"
	"  template create NAME --image I [--run 'CMD'] [--vcpus N] [--memory M] [--public]\n"
	"                                 boot I once, run CMD, keep its disk and memory\n"
	"  template ls | template show NAME | template rm NAME\n"
	"  usage [--since T] [--all] [--csv]  cost per machine and per user (T: epoch, 24h, 7d, 2026-11-01)\n"
	"  key add FILE|- | key ls | key rm ID   your SSH public keys (for ssh NAME@host)\n"
	"  token create [--name N] | token ls | token rm ID   API tokens (the dashboard's login)\n"
	"  secret add NAME --url https://... --header 'Name: value'|--header Name (value on stdin)\n"
	"  secret ls | secret rm NAME | secret log [NAME] [--machine M] [--limit N]\n"
	"                                 credentials the broker attaches for machines, never inside\n"
	"  set NAME --secret S | --no-secret S   let the machine use secret S (S_BASE_URL in it), or no more\n"
	"  desktop NAME                       a one-time URL of the machine's screen (browser)\n"
	"  desktop NAME --revoke              cut the machine's viewers, void its desktop URLs\n"
	"  preview NAME PORT [--public]   reach PORT of the machine at PORT-NAME-USER.DOMAIN:\n"
	"                                 a one-time link for your browser, or open to anyone\n"
	"  preview ls [--all] | preview rm NAME PORT\n"
	"  events [MACHINE] [--all] [--limit N] [--after ID] [--follow]\n"
	"                                 what happened to your machines, and why\n"
	"  webhook add URL [--events K,K] [--machine M] | webhook ls | webhook rm ID\n"
	"  webhook log ID [--limit N]     POST those events to URL, signed (the secret is\n"
	"                                 printed once); the deliveries' log\n"
	"  mcp                            an MCP server on stdin and stdout (for Claude Code, Codex)\n"
	"\n"
	"  --state DIR   state directory of the hostd to talk to (default $BERTH_STATE or /var/lib/berth)\n"
	"  --url URL     berth-web's address instead (default $BERTH_URL), e.g. https://host:8080,\n"
	"                acting as the user of the API token in $BERTH_TOKEN or --token-file F\n"
	"  --json        machine-readable output\n";

/* The commands, by the name that runs them; the verbs on one machine are
 * machine.c's (verb_find). */
static const struct command {
	const char *name;
	int (*run)(struct client *c, int argc, char **argv);
} commands[] = {
	{ "up", cmd_up },
	{ "down", cmd_down },
	{ "info", cmd_info },
	{ "quota", cmd_quota },
	{ "ls", cmd_ls },
	{ "list", cmd_ls },
	{ "create", cmd_create },
	{ "exec", cmd_exec },
	{ "cp", cmd_cp },
	{ "egress", cmd_egress },
	{ "image", cmd_image },
	{ "template", cmd_template },
	{ "key", cmd_key },
	{ "usage", cmd_usage },
	{ "token", cmd_token },
	{ "secret", cmd_secret },
	{ "preview", cmd_preview },
	{ "events", cmd_events },
	{ "webhook", cmd_webhook },
	{ "mcp", cmd_mcp },
};

/* Whether URL (http:// or https://) names this machine: 127.0.0.0/8,
 * localhost, [::1]. */
static bool url_loopback(const char *url)
{
	const char *h = strstr(url, "://") + 3;
	size_t n = h[0] == '[' ? strcspn(h, "]") + 1 : strcspn(h, ":/");

	return (n >= 4 && !strncmp(h, "127.", 4)) || (n == 9 && !strncmp(h, "localhost", 9)) ||
	       (n == 5 && !strncmp(h, "[::1]", 5));
}

/* Through berth-web at URL with the token in $BERTH_TOKEN or FILE (its
 * first line) into C.  0, or -1 having said why. */
static int use_url(struct client *c, const char *url, const char *file)
{
	const char *tok = getenv("BERTH_TOKEN");
	char line[256] = "";
	size_t n;

	if (!hostapi_is_url(url) || strlen(url) >= sizeof(c->sock)) {
		fprintf(stderr, "berth: --url '%s' is not http://HOST[:PORT] or https://HOST[:PORT]\n",
			url);
		return -1;
	}
	snprintf(c->sock, sizeof(c->sock), "%s", url);
	for (n = strlen(c->sock); n > 0 && c->sock[n - 1] == '/'; n--)
		c->sock[n - 1] = '\0';
	if (file) {
		FILE *f = fopen(file, "re");
		if (!f || !fgets(line, sizeof(line), f)) {
			fprintf(stderr, "berth: --token-file %s: %s\n", file,
				f ? "empty" : strerror(errno));
			if (f)
				fclose(f);
			return -1;
		}
		fclose(f);
		line[strcspn(line, "\r\n")] = '\0';
		tok = line;
	}
	if (!tok || !*tok) {
		fprintf(stderr, "berth: %s needs an API token: set BERTH_TOKEN or pass --token-file "
			"(berth token create makes one)\n", c->sock);
		return -1;
	}
	if (strlen(tok) >= sizeof(c->token) || strspn(tok, "abcdefghijklmnopqrstuvwxyz"
						       "0123456789_") != strlen(tok)) {
		fprintf(stderr, "berth: the API token is not one (berth_ and 64 hex digits)\n");
		return -1;
	}
	memcpy(c->token, tok, strlen(tok) + 1);	/* its length checked above */
	if (!strncmp(url, "http://", 7) && !url_loopback(url))
		fprintf(stderr, "berth: warning: %s is plain HTTP: the API token crosses the "
			"network in clear (https:// with tls_cert and tls_key in berth.conf)\n", url);
	return 0;
}

int main(int argc, char **argv)
{
	struct client c = { 0 };
	const char *state = getenv("BERTH_STATE");
	const char *url = getenv("BERTH_URL"), *token_file = NULL;
	bool state_opt = false;
	int i;

	for (i = 1; i < argc; i++) {
		const char *v;
		if ((v = cli_optval(argc, argv, &i, "--state"))) {
			state = v;
			state_opt = true;
		} else if ((v = cli_optval(argc, argv, &i, "--url")))
			url = v;
		else if ((v = cli_optval(argc, argv, &i, "--token-file")))
			token_file = v;
		else if (!strcmp(argv[i], "--json"))
			c.json = true;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			fputs(usage_text, stdout);
			return 0;
		} else
			break;
	}
	if (i >= argc) {
		fputs(usage_text, stderr);
		return 2;
	}
	/* --state and --json may also follow the command (up to "--");
	 * --url and --token-file only precede it: after it they are the
	 * command's own (berth secret add NAME --url URL). */
	int n = 0;
	char **args = argv + i;
	int nargs = argc - i;
	for (int j = 0; j < nargs; j++) {
		const char *v;
		if (!strcmp(args[j], "--")) {
			for (; j < nargs; j++)
				args[n++] = args[j];
			break;
		}
		if (!strcmp(args[j], "--json"))
			c.json = true;
		else if ((v = cli_optval(nargs, args, &j, "--state"))) {
			state = v;
			state_opt = true;
		} else
			args[n++] = args[j];
	}
	nargs = n;
	if (nargs == 0) {
		fputs(usage_text, stderr);
		return 2;
	}
	if (!state || !*state)
		state = "/var/lib/berth";
	int len;
	if (state[0] != '/') {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof(cwd)))
			return 1;
		len = snprintf(c.state, sizeof(c.state), "%s/%s", cwd, state);
	} else {
		len = snprintf(c.state, sizeof(c.state), "%s", state);
	}
	/* berth-hostd's limit: paths under it must fit a UNIX socket's
	 * address. */
	if (len < 0 || len > 80) {
		fprintf(stderr, "berth: the state directory's path is longer than 80 bytes: %s\n",
			state);
		return 2;
	}
	xsnprintf(c.sock, sizeof(c.sock), "%s/hostd.sock", c.state);
	if (token_file && !(url && *url)) {
		fprintf(stderr, "berth: --token-file goes with --url (or BERTH_URL)\n");
		return 2;
	}
	/* Two hosts named: which one was meant is not for berth to guess
	 * (up and down, this host's own, say so themselves). */
	if (state_opt && url && *url && strcmp(args[0], "up") && strcmp(args[0], "down")) {
		fprintf(stderr, "berth: --state names a local berth-hostd and %s berth-web at "
			"%s: give one of them%s\n", getenv("BERTH_URL") == url ? "BERTH_URL" :
			"--url", url, getenv("BERTH_URL") == url ? " (unset BERTH_URL)" : "");
		return 2;
	}
	if (url && *url && use_url(&c, url, token_file) < 0)
		return 2;
	const char *cmd = args[0];

	for (size_t k = 0; k < sizeof(commands) / sizeof(commands[0]); k++)
		if (!strcmp(cmd, commands[k].name))
			return commands[k].run(&c, nargs, args);
	const struct verb *v = verb_find(nargs, args);
	if (v)
		return verb_run(&c, v, nargs, args);
	fprintf(stderr, "berth: unknown command '%s'\n\n%s", cmd, usage_text);
	return 2;
}
