#include "hostd/keyproof.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/run.h"
#include "common/util.h"
#include "common/banned.h"

#define SLOTS 256
#define PER_OWNER 8

struct slot {
	char owner[64];
	char fingerprint[64]; /* of the key it is for */
	char text[KEYPROOF_CHALLENGE_MAX];
	int64_t expires_ms; /* monotonic; 0: free */
	int64_t made_ms;
};

struct keyproof {
	pthread_mutex_t lock;
	struct slot s[SLOTS];
};

struct keyproof *keyproof_new(void)
{
	struct keyproof *kp = calloc(1, sizeof(*kp));

	if (!kp)
		abort();
	pthread_mutex_init(&kp->lock, NULL);
	return kp;
}

void keyproof_free(struct keyproof *kp)
{
	if (!kp)
		return;
	pthread_mutex_destroy(&kp->lock);
	free(kp);
}

/* The slot a new challenge of OWNER goes to: OWNER's oldest when they
 * hold PER_OWNER live ones, else a free (or expired) one, else the oldest
 * of all. */
static struct slot *pick(struct keyproof *kp, const char *owner, int64_t now)
{
	struct slot *own_oldest = NULL, *oldest = NULL, *free_slot = NULL;
	int own = 0;

	for (int i = 0; i < SLOTS; i++) {
		struct slot *s = &kp->s[i];
		if (s->expires_ms <= now) {
			if (!free_slot)
				free_slot = s;
			continue;
		}
		if (!strcmp(s->owner, owner)) {
			own++;
			if (!own_oldest || s->made_ms < own_oldest->made_ms)
				own_oldest = s;
		}
		if (!oldest || s->made_ms < oldest->made_ms)
			oldest = s;
	}
	if (own >= PER_OWNER)
		return own_oldest;
	return free_slot ? free_slot : oldest;
}

int keyproof_challenge(struct keyproof *kp, const char *owner, const struct userkey *k,
		       char *out, size_t len, struct err *e)
{
	unsigned char raw[32];
	char hex[sizeof(raw) * 2 + 1];
	struct slot *s;
	int64_t now = mono_ms();

	if (random_bytes(raw, sizeof(raw)) < 0)
		return err_set(e, 500, "internal", "no randomness for a key challenge");
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	if ((size_t)snprintf(out, len, "berth key add for %s: %s", owner, hex) >= len)
		return err_set(e, 500, "internal", "key challenge does not fit");
	pthread_mutex_lock(&kp->lock);
	s = pick(kp, owner, now);
	snprintf(s->owner, sizeof(s->owner), "%s", owner);
	snprintf(s->fingerprint, sizeof(s->fingerprint), "%s", k->fingerprint);
	snprintf(s->text, sizeof(s->text), "%s", out);
	s->made_ms = now;
	s->expires_ms = now + KEYPROOF_TTL_S * 1000LL;
	pthread_mutex_unlock(&kp->lock);
	return 0;
}

/* Spend OWNER's live challenge TEXT: true when there was one, for the key
 * with FINGERPRINT (one for another key is spent too). */
static bool spend(struct keyproof *kp, const char *owner, const char *fingerprint,
		  const char *text)
{
	bool found = false;
	int64_t now = mono_ms();

	pthread_mutex_lock(&kp->lock);
	for (int i = 0; i < SLOTS; i++) {
		struct slot *s = &kp->s[i];
		if (s->expires_ms > now && !strcmp(s->owner, owner) && !strcmp(s->text, text)) {
			found = !strcmp(s->fingerprint, fingerprint);
			memset(s, 0, sizeof(*s));
			break;
		}
	}
	pthread_mutex_unlock(&kp->lock);
	return found;
}

int keyproof_refuse(const struct userkey *k, struct err *e)
{
	return err_set(e, 400, "invalid_key", "key %s: the signature does not prove that you "
		       "hold it (berth key add signs the challenge with the key file next to "
		       "the .pub, or through your agent)", k->fingerprint);
}

/* DIR/NAME (0644: ssh-keygen runs as nobody) holding DATA. */
static int write_file(const char *dir, const char *name, const char *data, char *path,
		      size_t plen, struct err *e)
{
	snprintf(path, plen, "%s/%s", dir, name);
	return file_write_atomic(path, data, strlen(data), 0644, e);
}

/* ssh-keygen -Y verify, as nobody, of SIGNATURE over MESSAGE by K. */
static int verify(const struct userkey *k, const char *message, const char *signature,
		  struct err *e)
{
	char dir[] = "/tmp/berth-keyproof.XXXXXX", allowed[64] = "", sig[64] = "", msg[64] = "";
	char line[8192];
	char *argv[] = { "ssh-keygen", "-Y", "verify", "-f", allowed, "-I", "berth", "-n",
			 KEYPROOF_NAMESPACE, "-s", sig, NULL };
	struct passwd pwb, *pw = NULL;
	char pwbuf[1024];
	struct run_opts o = { .stdin_path = msg, .timeout_s = 10, .drop = true,
			      .uid = 65534, .gid = 65534 };
	struct err why = { 0 };
	int rc = -1;

	if (getpwnam_r("nobody", &pwb, pwbuf, sizeof(pwbuf), &pw) == 0 && pw) {
		o.uid = pw->pw_uid;
		o.gid = pw->pw_gid;
	}
	if (!mkdtemp(dir))
		return err_errno(e, errno, "key proof: mkdtemp");
	snprintf(line, sizeof(line), "berth namespaces=\"%s\" %s %s\n", KEYPROOF_NAMESPACE,
		 k->type, k->blob);
	if (chmod(dir, 0711) < 0) {
		err_errno(e, errno, "key proof: chmod %s", dir);
	} else if (write_file(dir, "allowed", line, allowed, sizeof(allowed), e) == 0 &&
		   write_file(dir, "sig", signature, sig, sizeof(sig), e) == 0 &&
		   write_file(dir, "msg", message, msg, sizeof(msg), e) == 0) {
		if (run_argv(argv, &o, &why) == 0) {
			rc = 0;
		} else {
			log_info("key proof for %s refused: %s", k->fingerprint, why.msg);
			keyproof_refuse(k, e);
		}
	}
	/* What was written (a name stays "" until its file is made). */
	const char *made[] = { allowed, sig, msg };
	for (size_t i = 0; i < 3; i++)
		if (made[i][0])
			unlink(made[i]);
	rmdir(dir);
	return rc;
}

int keyproof_check(struct keyproof *kp, const char *owner, const char *challenge,
		   const struct userkey *k, const char *signature, struct err *e)
{
	if (!spend(kp, owner, k->fingerprint, challenge))
		return err_set(e, 400, "invalid_challenge", "the challenge is not one hostd gave "
			       "you for key %s in the last %d s, or it was used (each is good "
			       "once: ask for a new one)", k->fingerprint, KEYPROOF_TTL_S);
	if (strlen(signature) > KEYPROOF_SIGNATURE_MAX ||
	    strncmp(signature, "-----BEGIN SSH SIGNATURE-----", 29) != 0)
		return keyproof_refuse(k, e);
	return verify(k, challenge, signature, e);
}
