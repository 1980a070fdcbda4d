/*
 * Unit tests for what the daemons trust on disk (common/util.h): the state
 * directory and every directory above it (dir_check_trusted, like sshd's
 * StrictModes) and the files they read their configuration and keys from
 * (file_open_trusted, through config_load for berth.conf).
 *
 * Runs as root (it makes files owned by another uid); as anyone else it
 * says so and skips.  Built by the Makefile as
 * build/default/tests/test_trusted.
 */
#include "hostd/config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/util.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

#define OTHER_UID 65534  /* nobody */

static char dir[64];

static void sub(char *out, size_t outlen, const char *rel)
{
	snprintf(out, outlen, "%s/%s", dir, rel);
}

static void test_dirs(void)
{
	char parent[128], state[128], sticky[128], below[128], leaf[128];
	struct err e = { 0 };

	sub(parent, sizeof(parent), "p");
	sub(state, sizeof(state), "p/state");
	mkdir(parent, 0755);
	mkdir(state, 0711);
	check(dir_check_trusted(state, "state directory", &e) == 0,
	      "a root-owned state directory under a sticky /tmp is trusted");
	if (e.msg[0])
		diag("%s", e.msg);

	err_clear(&e);
	chmod(parent, 0775);
	check(dir_check_trusted(state, "state directory", &e) < 0,
	      "a state directory whose parent is group-writable is refused");
	check_has(e.msg, parent, "the message names the parent");
	check_has(e.msg, "mode 0775", "and its mode");
	check_has(e.msg, "owned by uid 0", "and its owner");
	check_has(e.msg, "chmod go-w", "and what to do");
	check_str(e.code, "untrusted_dir", "code untrusted_dir");

	err_clear(&e);
	chmod(parent, 0755);
	if (chown(parent, OTHER_UID, OTHER_UID) < 0)
		diag("chown %s: %s", parent, strerror(errno));
	check(dir_check_trusted(state, "state directory", &e) < 0,
	      "a parent owned by another user is refused");
	check_has(e.msg, "owned by uid 65534", "the message names its owner");

	err_clear(&e);
	if (chown(parent, 0, 0) < 0)
		diag("chown %s: %s", parent, strerror(errno));
	chmod(state, 0733);
	check(dir_check_trusted(state, "state directory", &e) < 0,
	      "a state directory writable by others is refused");
	chmod(state, 01777);
	err_clear(&e);
	check(dir_check_trusted(state, "state directory", &e) < 0,
	      "a sticky world-writable state directory is refused (it is the leaf)");
	chmod(state, 0711);

	/* A sticky world-writable directory is fine above a trusted one, not
	 * above another writable one. */
	sub(sticky, sizeof(sticky), "s");
	sub(below, sizeof(below), "s/b");
	sub(leaf, sizeof(leaf), "s/b/state");
	mkdir(sticky, 0755);
	chmod(sticky, 01777);
	mkdir(below, 0755);
	mkdir(leaf, 0711);
	err_clear(&e);
	check(dir_check_trusted(leaf, "state directory", &e) == 0,
	      "a sticky world-writable directory above a trusted one is fine");
	chmod(below, 01777);
	err_clear(&e);
	check(dir_check_trusted(leaf, "state directory", &e) < 0,
	      "a sticky world-writable directory right under another is refused");
	check_has(e.msg, below, "the message names the inner one");

	err_clear(&e);
	sub(leaf, sizeof(leaf), "not-there/state");
	check(dir_check_trusted(leaf, "state directory", &e) == 0,
	      "a state directory not made yet is not refused here");
}

static void test_config_file(void)
{
	char good[128], link[128], theirs[128], open_to_all[128], fifo[128];
	struct config c;
	struct err e = { 0 };
	int fd;

	sub(good, sizeof(good), "good.conf");
	sub(link, sizeof(link), "link.conf");
	sub(theirs, sizeof(theirs), "theirs.conf");
	sub(open_to_all, sizeof(open_to_all), "open.conf");
	sub(fifo, sizeof(fifo), "fifo.conf");
	write_file(good, "max_vcpus = 3\n", 14);
	chmod(good, 0644);
	config_defaults(&c, dir);
	check(config_load(&c, good, 1, &e) == 0 && c.max_vcpus == 3,
	      "a root-owned berth.conf, mode 0644, is read");
	if (e.msg[0])
		diag("%s", e.msg);

	if (symlink(good, link) < 0)
		diag("symlink: %s", strerror(errno));
	err_clear(&e);
	config_defaults(&c, dir);
	check(config_load(&c, link, 0, &e) < 0 && c.max_vcpus != 3,
	      "a berth.conf that is a symbolic link is refused (also when optional)");
	check_has(e.msg, "symbolic link", "the message says it is a link");
	check_has(e.msg, link, "and names it");

	write_file(theirs, "max_vcpus = 3\n", 14);
	if (chown(theirs, OTHER_UID, OTHER_UID) < 0)
		diag("chown: %s", strerror(errno));
	err_clear(&e);
	config_defaults(&c, dir);
	check(config_load(&c, theirs, 1, &e) < 0 && c.max_vcpus != 3,
	      "a berth.conf owned by another user is refused");
	check_has(e.msg, "owned by uid 65534", "the message names the owner");
	check_has(e.msg, "chown root", "and what to do");

	write_file(open_to_all, "max_vcpus = 3\n", 14);
	chmod(open_to_all, 0666);
	err_clear(&e);
	config_defaults(&c, dir);
	check(config_load(&c, open_to_all, 1, &e) < 0,
	      "a berth.conf writable by every user is refused");
	check_has(e.msg, "mode 0666", "the message names the mode");

	mkfifo(fifo, 0600);
	err_clear(&e);
	config_defaults(&c, dir);
	check(config_load(&c, fifo, 1, &e) < 0, "a FIFO is refused (without blocking)");

	err_clear(&e);
	fd = file_open_trusted(good, &e);
	check(fd >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC) &&
	      !(fcntl(fd, F_GETFL) & O_NONBLOCK),
	      "file_open_trusted gives a blocking close-on-exec descriptor");
	if (fd >= 0)
		close(fd);
}

/* file_read_trusted_link refuses PATH (check WHAT), saying HAS. */
static void link_refused(const char *path, const char *what, const char *has)
{
	struct err e = { 0 };
	char *s = file_read_trusted_link(path, 1024, &e), said[160];

	check(s == NULL, "%s", what);
	snprintf(said, sizeof(said), "  saying '%s'", has);
	check_has(e.msg, has, said);
	free(s);
}

/* TLS files through a symbolic link, as certbot lays them out: live/NAME
 * -> ../archive/NAME1 (file_read_trusted_link). */
static void test_link(void)
{
	char live[128], archive[128], target[128], link[128], theirs[128], open_dir[128],
		loose[128], loose_link[128];
	struct err e = { 0 };
	char *s;

	sub(live, sizeof(live), "live");
	sub(archive, sizeof(archive), "archive");
	sub(target, sizeof(target), "archive/key1.pem");
	sub(link, sizeof(link), "live/key.pem");
	sub(theirs, sizeof(theirs), "live/theirs.pem");
	mkdir(live, 0700);
	mkdir(archive, 0700);
	write_file(target, "KEY\n", 4);
	if (symlink("../archive/key1.pem", link) < 0)
		diag("symlink: %s", strerror(errno));
	s = file_read_trusted_link(link, 1024, &e);
	check(s && strcmp(s, "KEY\n") == 0,
	      "a root's link into a root's directory (certbot's live/ into archive/) is read");
	if (e.msg[0])
		diag("%s", e.msg);
	free(s);
	err_clear(&e);
	check(file_read_trusted(link, 1024, &e) == NULL,
	      "  while file_read_trusted (berth.conf, the gateway key) still refuses it");

	if (symlink("../archive/key1.pem", theirs) < 0 ||
	    lchown(theirs, OTHER_UID, OTHER_UID) < 0)
		diag("symlink/lchown: %s", strerror(errno));
	link_refused(theirs, "a link owned by another user is refused",
		     "symbolic link owned by uid 65534");

	/* A link to a link: the second one chooses the file. */
	char twice[128];
	sub(twice, sizeof(twice), "live/twice.pem");
	if (symlink("key.pem", twice) < 0)
		diag("symlink: %s", strerror(errno));
	link_refused(twice, "a link to a link is refused", "is a symbolic link: refused");

	/* The file it names is in a directory every user may write to. */
	sub(open_dir, sizeof(open_dir), "open");
	sub(loose, sizeof(loose), "open/key.pem");
	sub(loose_link, sizeof(loose_link), "live/loose.pem");
	mkdir(open_dir, 0700);
	chmod(open_dir, 0777);
	write_file(loose, "KEY\n", 4);
	if (symlink(loose, loose_link) < 0)
		diag("symlink: %s", strerror(errno));
	link_refused(loose_link, "a link to a file in a directory writable by others is refused",
		     "mode 0777");

	/* The file it names belongs to another user. */
	if (chown(target, OTHER_UID, OTHER_UID) < 0)
		diag("chown: %s", strerror(errno));
	link_refused(link, "a link to another user's file is refused", "owned by uid 65534");
}

int main(void)
{
	if (geteuid() != 0) {
		skip("test_trusted", "needs root (files owned by another uid)");
		return tap_done("test_trusted");
	}
	if (!tmpdir_make(dir, sizeof(dir))) {
		check(false, "make a temporary directory");
		return tap_done("test_trusted");
	}
	chmod(dir, 0755);
	test_dirs();
	test_config_file();
	test_link();
	tmpdir_remove(dir);
	return tap_done("test_trusted");
}
