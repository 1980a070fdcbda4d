#include "hostd/tokens.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "common/banned.h"

/* HEX (65 bytes) = the sha256 of S, in lower-case hex. */
static int sha256_hex(const char *s, char hex[65], struct err *e)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;

	if (!EVP_Digest(s, strlen(s), md, &len, EVP_sha256(), NULL) || len != 32)
		return err_set(e, 500, "internal", "sha256 of a token failed");
	for (unsigned int i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return 0;
}

/* 1 to 63 bytes, no control characters (UTF-8 is fine). */
static bool token_name_valid(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > 63)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

int token_create(struct hostd *h, const char *owner, const char *name, struct token *t,
		 char *secret, size_t secretlen, struct err *e)
{
	unsigned char r[32];
	char hash[65];
	size_t off;

	memset(t, 0, sizeof(*t));
	if (!name || !*name)
		name = "token";
	if (!token_name_valid(name))
		return err_set(e, 400, "invalid_token_name", "invalid token name '%.80s': 1 to 63 "
			       "bytes without control characters", name);
	if (secretlen < TOKEN_SECRET_LEN + 1)
		return err_set(e, 500, "internal", "token buffer too small");
	if (random_bytes(r, sizeof(r)) < 0)
		return err_errno(e, errno, "random bytes for a token");
	off = (size_t)snprintf(secret, secretlen, "%s", TOKEN_PREFIX);
	for (size_t i = 0; i < sizeof(r); i++)
		snprintf(secret + off + 2 * i, 3, "%02x", r[i]);
	snprintf(t->owner, sizeof(t->owner), "%s", owner);
	snprintf(t->name, sizeof(t->name), "%s", name);
	if (sha256_hex(secret, hash, e) < 0 ||
	    db_token_insert(h->db, t, hash, TOKEN_MAX_PER_USER, e) < 0) {
		memset(secret, 0, secretlen);
		return -1;
	}
	log_info("token %lld (%s) of %s created", (long long)t->id, t->name, owner);
	return 0;
}

int token_check(struct hostd *h, const char *secret, struct token *t, struct err *e)
{
	char hash[65];
	size_t plen = strlen(TOKEN_PREFIX);
	int64_t now = now_s();

	memset(t, 0, sizeof(*t));
	/* Only what token_create makes is worth a database lookup. */
	if (strlen(secret) != TOKEN_SECRET_LEN || strncmp(secret, TOKEN_PREFIX, plen) != 0 ||
	    strspn(secret + plen, "0123456789abcdef") != TOKEN_SECRET_LEN - plen)
		return err_set(e, 401, "invalid_token", "invalid or revoked token");
	if (sha256_hex(secret, hash, e) < 0 || db_token_find(h->db, hash, t, e) < 0)
		return -1;
	if (now - t->last_used >= 60) {
		struct err ignored = { 0 };
		if (db_token_touch(h->db, t->id, now, &ignored) == 0)
			t->last_used = now;
		else
			log_warn("token %lld: cannot record its use: %s", (long long)t->id,
				 ignored.msg);
	}
	return 0;
}

json_t *token_json(const struct token *t)
{
	return json_pack("{s:I, s:s, s:I, s:o}", "id", (json_int_t)t->id, "name", t->name,
			 "created", (json_int_t)t->created,
			 "last_used", t->last_used ? json_integer(t->last_used) : json_null());
}
