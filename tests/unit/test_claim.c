/* storage_claim: a qcow2 pool belongs to one hostd instance.  And a
 * volume's dependents are found however the pool's path is written. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/run.h"
#include "storage/storage.h"
#include "tests/unit/tap.h"
#include "common/banned.h"

int main(void)
{
	char dir[256];
	struct err e = { 0 };
	struct storage *st;

	if (!tmpdir_make(dir, sizeof(dir)))
		return 1;
	st = storage_open("qcow2", dir, &e);
	check(st != NULL, "open a fresh pool");
	check(st && storage_claim(st, "aaaa1111", &e) == 0, "the first instance claims it");
	check(st && storage_claim(st, "aaaa1111", &e) == 0, "and may claim it again");
	err_clear(&e);
	check(st && storage_claim(st, "bbbb2222", &e) < 0 && e.status == 409 &&
	      !strcmp(e.code, "pool_taken"), "another instance is refused (409 pool_taken)");
	check_has(e.msg, "belongs to berth instance aaaa1111", "naming the owner");
	storage_close(st);

	/* base <- child, made with the pool at DIR/p ... */
	char pool[300], raw[300], alias[300], link[300];
	snprintf(pool, sizeof(pool), "%s/p", dir);
	snprintf(raw, sizeof(raw), "%s/img.raw", dir);
	char *const mk[] = { "qemu-img", "create", "-q", "-f", "raw", raw, "1M", NULL };
	run_argv(mk, NULL, NULL);
	err_clear(&e);
	st = storage_open("qcow2", pool, &e);
	check(st && storage_base_import(st, "base-a", raw, "raw", &e) == 0 &&
	      storage_vol_create(st, "m-a", "base-a", 1 << 20, &e) == 0, "a base and a volume on it");
	storage_close(st);
	/* ... is still the base's dependent when the pool is DIR/p/ or a link. */
	snprintf(alias, sizeof(alias), "%s/p/", dir);
	snprintf(link, sizeof(link), "%s/link", dir);
	check(symlink(pool, link) == 0, "a symlink to the pool");
	const char *ways[] = { alias, link };
	for (int i = 0; i < 2; i++) {
		err_clear(&e);
		st = storage_open("qcow2", ways[i], &e);
		check(st && storage_vol_dependents(st, "base-a", &e) == 1,
		      "opened as %s: base-a still has its dependent", ways[i]);
		storage_close(st);
	}
	unlink(link);
	tmpdir_remove(dir);
	return tap_done("test_claim");
}
