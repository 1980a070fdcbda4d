/*
 * Unit tests of hostd/keyproof.c: challenges bound to a user and a key,
 * spent by their first use, at most 8 live per user; signatures made by
 * the real ssh-keygen -Y sign and checked by hostd's ssh-keygen -Y verify
 * (run as nobody: the test runs as root, as the suite does).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/run.h"
#include "common/util.h"
#include "hostd/keyproof.h"
#include "hostd/userkeys.h"
#include "tests/unit/tap.h"

static char dir[] = "/tmp/berth-test-keyproof.XXXXXX";

/* A new ed25519 key NAME in DIR, parsed into *K. */
static bool make_key(const char *name, struct userkey *k)
{
	char path[128], *pub;
	struct err e = { 0 };
	char *argv[] = { "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", (char *)name, "-f",
			 path, NULL };

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (run_argv(argv, NULL, &e) < 0)
		return false;
	snprintf(path, sizeof(path), "%s/%s.pub", dir, name);
	pub = file_read(path, 4096, &e);
	if (!pub)
		return false;
	bool ok = userkey_parse(pub, k, &e) == 0;
	free(pub);
	return ok;
}

/* The armored signature of TEXT by key NAME in namespace NS, malloc'd. */
static char *sign(const char *name, const char *text, const char *ns)
{
	char key[128], msg[128], sig[140];
	struct err e = { 0 };
	char *argv[] = { "ssh-keygen", "-Y", "sign", "-n", (char *)ns, "-f", key, msg, NULL };
	char *out;

	snprintf(key, sizeof(key), "%s/%s", dir, name);
	snprintf(msg, sizeof(msg), "%s/msg", dir);
	snprintf(sig, sizeof(sig), "%s/msg.sig", dir);
	unlink(sig);
	if (file_write_atomic(msg, text, strlen(text), 0600, &e) < 0 || run_argv(argv, NULL, &e) < 0)
		return NULL;
	out = file_read(sig, 65536, &e);
	unlink(sig);
	return out;
}

/* A new challenge for OWNER and key K into CHAL, signed by key SIGNER in
 * namespace NS (malloc'd). */
static char *signed_challenge(struct keyproof *kp, const char *owner, const struct userkey *k,
			      const char *signer, const char *ns, char chal[KEYPROOF_CHALLENGE_MAX])
{
	struct err e = { 0 };

	if (keyproof_challenge(kp, owner, k, chal, KEYPROOF_CHALLENGE_MAX, &e) < 0)
		return NULL;
	return sign(signer, chal, ns);
}

static bool refused(int rc, const struct err *e, const char *code)
{
	return rc < 0 && e->status == 400 && strcmp(e->code, code) == 0;
}

int main(void)
{
	struct keyproof *kp = keyproof_new();
	struct userkey a, b;
	struct err e = { 0 };
	char chal[KEYPROOF_CHALLENGE_MAX], first[KEYPROOF_CHALLENGE_MAX], *sig;
	int rc;

	if (getuid() != 0 || !mkdtemp(dir)) {
		skip("the key proof with ssh-keygen", "needs root (ssh-keygen runs as nobody)");
		keyproof_free(kp);
		return tap_done("test_keyproof");
	}
	if (!check(make_key("a", &a) && make_key("b", &b), "ssh-keygen makes two keys")) {
		keyproof_free(kp);
		return tap_done("test_keyproof");
	}
	/* nobody reads what it verifies through DIR. */
	chmod(dir, 0711);

	check(keyproof_challenge(kp, "alice", &a, chal, sizeof(chal), &e) == 0 &&
	      strncmp(chal, "berth key add for alice: ", 25) == 0 && strlen(chal) == 25 + 64,
	      "a challenge names its user and 256 random bits");
	sig = sign("a", chal, KEYPROOF_NAMESPACE);
	check(sig && keyproof_check(kp, "alice", chal, &a, sig, &e) == 0,
	      "key a's signature of it proves a");
	err_clear(&e);
	rc = keyproof_check(kp, "alice", chal, &a, sig, &e);
	check(refused(rc, &e, "invalid_challenge"), "the same challenge again: invalid_challenge");
	free(sig);

	err_clear(&e);
	sig = signed_challenge(kp, "alice", &a, "a", KEYPROOF_NAMESPACE, chal);
	rc = keyproof_check(kp, "bob", chal, &a, sig, &e);
	check(refused(rc, &e, "invalid_challenge"), "alice's challenge used by bob: refused");
	err_clear(&e);
	check(keyproof_check(kp, "alice", chal, &a, sig, &e) == 0, "  and alice's still good");
	free(sig);

	err_clear(&e);
	sig = signed_challenge(kp, "alice", &a, "b", KEYPROOF_NAMESPACE, chal);
	rc = keyproof_check(kp, "alice", chal, &a, sig, &e);
	check(refused(rc, &e, "invalid_key") && strstr(e.msg, a.fingerprint),
	      "a's challenge signed by key b: invalid_key, naming a");
	err_clear(&e);
	rc = keyproof_check(kp, "alice", chal, &a, sig, &e);
	check(refused(rc, &e, "invalid_challenge"), "  the challenge is spent by that try");
	free(sig);

	err_clear(&e);
	sig = signed_challenge(kp, "alice", &a, "b", KEYPROOF_NAMESPACE, chal);
	rc = keyproof_check(kp, "alice", chal, &b, sig, &e);
	check(refused(rc, &e, "invalid_challenge"), "a challenge for key a, used for key b: refused");
	free(sig);

	err_clear(&e);
	sig = signed_challenge(kp, "alice", &a, "a", "git", chal);
	rc = keyproof_check(kp, "alice", chal, &a, sig, &e);
	check(refused(rc, &e, "invalid_key"), "a signature in another namespace (git's): refused");
	free(sig);

	err_clear(&e);
	keyproof_challenge(kp, "alice", &a, chal, sizeof(chal), &e);
	rc = keyproof_check(kp, "alice", chal, &a, "not a signature", &e);
	check(refused(rc, &e, "invalid_key"), "text that is no signature: refused");

	struct err r1 = { 0 };
	keyproof_refuse(&a, &r1);
	check(strcmp(r1.msg, e.msg) == 0, "keyproof_refuse's answer is the bad signature's");

	/* Eight live challenges per user: a ninth replaces the oldest. */
	err_clear(&e);
	keyproof_challenge(kp, "carol", &a, first, sizeof(first), &e);
	for (int i = 0; i < 8; i++)
		keyproof_challenge(kp, "carol", &a, chal, sizeof(chal), &e);
	sig = sign("a", first, KEYPROOF_NAMESPACE);
	rc = keyproof_check(kp, "carol", first, &a, sig, &e);
	check(refused(rc, &e, "invalid_challenge"), "a user's ninth challenge evicts her first");
	free(sig);
	err_clear(&e);
	sig = sign("a", chal, KEYPROOF_NAMESPACE);
	check(keyproof_check(kp, "carol", chal, &a, sig, &e) == 0, "  the newest is good");
	free(sig);

	keyproof_free(kp);
	keyproof_free(NULL);
	char *const rm[] = { "rm", "-rf", dir, NULL };
	run_argv(rm, NULL, NULL);
	return tap_done("test_keyproof");
}
