/* The commands of `berth`, as main.c dispatches them.  Each takes the
 * client of hostd (state directory, --json) and its words, ARGV[0] being
 * the command's name (global options already taken out), and returns the
 * exit status: 0 done, 1 failed (hostd refused, or could not be reached),
 * 2 bad arguments; it has said why on stderr. */
#ifndef BERTH_CLI_COMMANDS_H
#define BERTH_CLI_COMMANDS_H

#include "cli/client.h"

/* info.c: `berth info`. */
int cmd_info(struct client *c, int argc, char **argv);
int cmd_quota(struct client *c, int argc, char **argv);
/* machine.c: `berth ls`, `berth create`, `berth exec`. */
int cmd_ls(struct client *c, int argc, char **argv);
int cmd_create(struct client *c, int argc, char **argv);
/* exec's status is the command's in the machine (255: it could not run). */
int cmd_exec(struct client *c, int argc, char **argv);
int cmd_egress(struct client *c, int argc, char **argv);
/* machine.c: the verbs on one machine, rows of one table: show, set, start,
 * stop, suspend, resume, restart, rm (delete), checkpoints, checkpoint,
 * checkpoint rm, restore, fork, desktop. */
struct verb;
/* The verb of the command ARGV, or NULL when it is none. */
const struct verb *verb_find(int argc, char **argv);
/* Run V (verb_find's answer for ARGV) on ARGV, as a command. */
int verb_run(struct client *c, const struct verb *v, int argc, char **argv);
/* key.c: `berth key add|ls|rm`. */
int cmd_key(struct client *c, int argc, char **argv);
/* up.c: `berth up`, `berth down`. */
int cmd_up(struct client *c, int argc, char **argv);
int cmd_down(struct client *c, int argc, char **argv);
/* image.c: `berth image ls|build|rm|import|export`. */
int cmd_image(struct client *c, int argc, char **argv);
/* template.c: `berth template create|ls|show|rm`. */
int cmd_template(struct client *c, int argc, char **argv);
/* cp.c: `berth cp FILE MACHINE:PATH`, `berth cp MACHINE:PATH FILE`. */
int cmd_cp(struct client *c, int argc, char **argv);
/* usage.c: `berth usage`. */
int cmd_usage(struct client *c, int argc, char **argv);
/* token.c: `berth token create|ls|rm`. */
int cmd_token(struct client *c, int argc, char **argv);
/* secret.c: `berth secret add|ls|rm|log`. */
int cmd_secret(struct client *c, int argc, char **argv);
/* preview.c: `berth preview NAME PORT [--public] | ls | rm NAME PORT`. */
int cmd_preview(struct client *c, int argc, char **argv);
/* events.c: `berth events [MACHINE] [--all] [--follow]`. */
int cmd_events(struct client *c, int argc, char **argv);
/* webhook.c: `berth webhook add|ls|rm|log`. */
int cmd_webhook(struct client *c, int argc, char **argv);
/* mcp.c: `berth mcp`, an MCP server on stdin and stdout. */
int cmd_mcp(struct client *c, int argc, char **argv);

#endif
