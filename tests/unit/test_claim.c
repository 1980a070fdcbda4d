/* storage_claim: a qcow2 pool belongs to one hostd instance. */
#include <stdio.h>
#include <string.h>

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
	tmpdir_remove(dir);
	return tap_done("test_claim");
}
