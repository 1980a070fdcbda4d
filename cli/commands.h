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
/* machine.c: the machine commands. */
int cmd_ls(struct client *c, int argc, char **argv);
int cmd_show(struct client *c, int argc, char **argv);
int cmd_create(struct client *c, int argc, char **argv);
int cmd_set(struct client *c, int argc, char **argv);
/* `berth start|stop|suspend|resume|restart NAME` */
int cmd_action(struct client *c, int argc, char **argv);
int cmd_rm(struct client *c, int argc, char **argv);
int cmd_exec(struct client *c, int argc, char **argv);
/* `berth checkpoint ...` and `berth checkpoints NAME` */
int cmd_checkpoint(struct client *c, int argc, char **argv);
int cmd_restore(struct client *c, int argc, char **argv);
int cmd_fork(struct client *c, int argc, char **argv);
/* key.c: `berth key add|ls|rm`. */
int cmd_key(struct client *c, int argc, char **argv);
/* up.c: `berth up`, `berth down`. */
int cmd_up(struct client *c, int argc, char **argv);
int cmd_down(struct client *c, int argc, char **argv);
/* image.c: `berth image ls|build|rm|import|export`. */
int cmd_image(struct client *c, int argc, char **argv);
/* usage.c: `berth usage`. */
int cmd_usage(struct client *c, int argc, char **argv);
/* token.c: `berth token create|ls|rm`. */
int cmd_token(struct client *c, int argc, char **argv);
/* desktop.c: `berth desktop NAME`. */
int cmd_desktop(struct client *c, int argc, char **argv);

#endif
