#include "hostd/userkeys.h"

#include <libssh/libssh.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "common/banned.h"

#define LINE_MAX_BYTES 16384
#define RSA_MIN_BITS 2048
#define RSA_MAX_BITS 16384   /* OpenSSH's own limit */

static const struct {
	const char *name;
	enum ssh_keytypes_e type;
} accepted[] = {
	{ "ssh-ed25519", SSH_KEYTYPE_ED25519 },
	{ "ssh-rsa", SSH_KEYTYPE_RSA },
	{ "ecdsa-sha2-nistp256", SSH_KEYTYPE_ECDSA_P256 },
	{ "ecdsa-sha2-nistp384", SSH_KEYTYPE_ECDSA_P384 },
	{ "ecdsa-sha2-nistp521", SSH_KEYTYPE_ECDSA_P521 },
	{ "sk-ssh-ed25519@openssh.com", SSH_KEYTYPE_SK_ED25519 },
	{ "sk-ecdsa-sha2-nistp256@openssh.com", SSH_KEYTYPE_SK_ECDSA },
};

static const char accepted_list[] =
	"ssh-ed25519, ssh-rsa (2048 bits or more), ecdsa-sha2-nistp256/384/521, "
	"sk-ssh-ed25519@openssh.com, sk-ecdsa-sha2-nistp256@openssh.com";

static int accepted_index(const char *name)
{
	for (size_t i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++)
		if (strcmp(accepted[i].name, name) == 0)
			return (int)i;
	return -1;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A name OpenSSH uses for a key type, accepted here or not (ssh-dss,
 * certificates): tells an options prefix from a misspelt type. */
static bool looks_like_type(const char *s)
{
	return accepted_index(s) >= 0 || strcmp(s, "ssh-dss") == 0 ||
	       ends_with(s, "-cert-v01@openssh.com") || strncmp(s, "ecdsa-sha2-", 11) == 0 ||
	       (strncmp(s, "sk-", 3) == 0 && ends_with(s, "@openssh.com"));
}

static int b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

/* Decode padded standard base64 S (LEN characters) into OUT, which holds
 * at least LEN / 4 * 3 bytes.  The number of bytes, or -1 when S is not
 * base64. */
static long b64_decode(const char *s, size_t len, unsigned char *out)
{
	size_t n = 0;

	if (len == 0 || len % 4 != 0)
		return -1;
	for (size_t i = 0; i < len; i += 4) {
		int v[4], pad = 0;
		for (int j = 0; j < 4; j++) {
			if (s[i + j] == '=') {
				/* Padding: only the last one or two characters. */
				if (i + 4 != len || j < 2)
					return -1;
				pad++;
				v[j] = 0;
				continue;
			}
			if (pad)
				return -1;
			v[j] = b64_value((unsigned char)s[i + j]);
			if (v[j] < 0)
				return -1;
		}
		uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 |
			     (uint32_t)v[2] << 6 | (uint32_t)v[3];
		out[n++] = (unsigned char)(w >> 16);
		if (pad < 2)
			out[n++] = (unsigned char)(w >> 8);
		if (pad < 1)
			out[n++] = (unsigned char)w;
	}
	return (long)n;
}

/* Base64 of IN (LEN bytes) into OUT, which holds 4 * ((LEN + 2) / 3) + 1
 * bytes; padded with '=' when PAD (OpenSSH's fingerprints are not). */
static void b64_encode(const unsigned char *in, size_t len, bool pad, char *out)
{
	static const char abc[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n = 0;

	for (size_t i = 0; i < len; i += 3) {
		uint32_t w = (uint32_t)in[i] << 16;
		if (i + 1 < len)
			w |= (uint32_t)in[i + 1] << 8;
		if (i + 2 < len)
			w |= in[i + 2];
		out[n++] = abc[w >> 18 & 63];
		out[n++] = abc[w >> 12 & 63];
		if (i + 1 < len)
			out[n++] = abc[w >> 6 & 63];
		else if (pad)
			out[n++] = '=';
		if (i + 2 < len)
			out[n++] = abc[w & 63];
		else if (pad)
			out[n++] = '=';
	}
	out[n] = '\0';
}

/* The SSH wire string at *POS of BLOB (LEN bytes) into *S, *SLEN;
 * advances *POS.  false when it runs past the end. */
static bool wire_string(const unsigned char *blob, size_t len, size_t *pos,
			const unsigned char **s, size_t *slen)
{
	uint32_t n;

	if (len - *pos < 4)
		return false;
	n = (uint32_t)blob[*pos] << 24 | (uint32_t)blob[*pos + 1] << 16 |
	    (uint32_t)blob[*pos + 2] << 8 | blob[*pos + 3];
	*pos += 4;
	if (len - *pos < n)
		return false;
	*s = blob + *pos;
	*slen = n;
	*pos += n;
	return true;
}

/* Bits of the modulus of the ssh-rsa blob BLOB (e, then n), or -1. */
static int rsa_bits(const unsigned char *blob, size_t len)
{
	const unsigned char *s;
	size_t pos = 0, n;
	int bits;

	if (!wire_string(blob, len, &pos, &s, &n) ||   /* "ssh-rsa" */
	    !wire_string(blob, len, &pos, &s, &n) ||   /* e */
	    !wire_string(blob, len, &pos, &s, &n))     /* n */
		return -1;
	while (n > 0 && *s == 0)
		s++, n--;
	if (n == 0)
		return -1;
	bits = (int)(n - 1) * 8;
	for (unsigned char top = *s; top; top >>= 1)
		bits++;
	return bits;
}

/* Check that S is UTF-8 of printable characters (no C0 or C1 controls,
 * no DEL), at most MAX of them. */
static int comment_check(const char *s, size_t max, struct err *e)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t chars = 0;

	while (*p) {
		uint32_t cp;
		int n;
		if (*p < 0x80) {
			cp = *p;
			n = 1;
		} else if ((*p & 0xe0) == 0xc0 && *p >= 0xc2) {
			cp = *p & 0x1f;
			n = 2;
		} else if ((*p & 0xf0) == 0xe0) {
			cp = *p & 0x0f;
			n = 3;
		} else if ((*p & 0xf8) == 0xf0 && *p <= 0xf4) {
			cp = *p & 0x07;
			n = 4;
		} else {
			return err_set(e, 400, "invalid_key", "the key's comment is not UTF-8");
		}
		for (int i = 1; i < n; i++) {
			if ((p[i] & 0xc0) != 0x80)
				return err_set(e, 400, "invalid_key",
					       "the key's comment is not UTF-8");
			cp = cp << 6 | (p[i] & 0x3f);
		}
		if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
		    (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
			return err_set(e, 400, "invalid_key", "the key's comment is not UTF-8");
		if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f))
			return err_set(e, 400, "invalid_key", "the key's comment has a control "
				       "character (U+%04X): only printable text is allowed",
				       (unsigned)cp);
		p += n;
		chars++;
	}
	if (chars > max)
		return err_set(e, 400, "invalid_key", "the key's comment has %zu characters: "
			       "at most %zu are allowed", chars, max);
	return 0;
}

/* Import K->blob (canonical base64) with libssh, which checks the data
 * (curve points, sizes), and fill K->fingerprint.  TYPE is the key's index
 * in accepted[]. */
static int libssh_check(struct userkey *k, int type, struct err *e)
{
	ssh_key key = NULL;
	char *b64 = NULL;
	unsigned char *hash = NULL;
	size_t hlen = 0;
	char fp[64];
	int rc = -1;

	if (ssh_pki_import_pubkey_base64(k->blob, accepted[type].type, &key) != SSH_OK) {
		err_set(e, 400, "invalid_key", "the key data is not a valid %s key", k->type);
		goto out;
	}
	/* What libssh writes back must be what was given: no trailing bytes,
	 * and the fingerprint below hashes the very blob OpenSSH hashes. */
	if (ssh_pki_export_pubkey_base64(key, &b64) != SSH_OK || strcmp(b64, k->blob) != 0) {
		err_set(e, 400, "invalid_key", "the key data is not a valid %s key "
			"(unexpected bytes in it)", k->type);
		goto out;
	}
	if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hlen) != 0 ||
	    hlen != 32) {
		err_set(e, 500, "internal", "cannot compute the fingerprint of a %s key", k->type);
		goto out;
	}
	b64_encode(hash, hlen, false, fp);
	xsnprintf(k->fingerprint, sizeof(k->fingerprint), "SHA256:%s", fp);
	rc = 0;
out:
	if (hash)
		ssh_clean_pubkey_hash(&hash);
	ssh_string_free_char(b64);
	ssh_key_free(key);
	return rc;
}

int userkey_parse(const char *line, struct userkey *k, struct err *e)
{
	char *copy = NULL, *p, *type, *data, *comment, *end;
	unsigned char *blob = NULL;
	const unsigned char *inner;
	size_t len, inner_len, pos = 0;
	long blob_len;
	int t, rc = -1;

	memset(k, 0, sizeof(*k));
	len = strlen(line);
	if (len > LINE_MAX_BYTES)
		return err_set(e, 400, "invalid_key", "the key line has %zu bytes: at most %d",
			       len, LINE_MAX_BYTES);
	copy = strdup(line);
	if (!copy)
		abort();
	p = copy + strspn(copy, " \t");
	end = p + strlen(p);
	while (end > p && strchr(" \t\r\n", end[-1]))
		*--end = '\0';
	if (*p == '\0') {
		err_set(e, 400, "invalid_key", "the key line is empty");
		goto out;
	}
	if (strpbrk(p, "\r\n")) {
		err_set(e, 400, "invalid_key", "the key text has several lines: give one key "
			"line, 'TYPE BASE64 [COMMENT]'");
		goto out;
	}
	type = p;
	p += strcspn(p, " \t");
	if (*p)
		*p++ = '\0';
	p += strspn(p, " \t");
	data = p;
	p += strcspn(p, " \t");
	if (*p)
		*p++ = '\0';
	comment = p + strspn(p, " \t");

	t = accepted_index(type);
	if (t < 0) {
		/* authorized_keys puts options before the type: look for a
		 * type further on. */
		char *rest = strdup(line), *save = NULL, *tok;
		bool options = false;
		if (!rest)
			abort();
		tok = strtok_r(rest, " \t\r\n", &save);
		while (!options && !looks_like_type(type) &&
		       (tok = strtok_r(NULL, " \t\r\n", &save)))
			options = looks_like_type(tok);
		free(rest);
		if (options)
			err_set(e, 400, "invalid_key", "the key line starts with options ('%.40s'): "
				"give the public key alone, 'TYPE BASE64 [COMMENT]' as in a .pub "
				"file", type);
		else if (looks_like_type(type))
			err_set(e, 400, "invalid_key", "key type '%.60s' is not accepted: use %s",
				type, accepted_list);
		else
			err_set(e, 400, "invalid_key", "unknown key type '%.60s': expected "
				"'TYPE BASE64 [COMMENT]' with TYPE one of %s", type, accepted_list);
		goto out;
	}
	snprintf(k->type, sizeof(k->type), "%s", type);
	if (*data == '\0') {
		err_set(e, 400, "invalid_key", "the key line has no key data after '%s'", type);
		goto out;
	}
	len = strlen(data);
	if (len >= sizeof(k->blob)) {
		err_set(e, 400, "invalid_key", "the key data is too long (%zu characters, at most "
			"%zu)", len, sizeof(k->blob) - 1);
		goto out;
	}
	blob = malloc(len / 4 * 3 + 3);
	if (!blob)
		abort();
	blob_len = b64_decode(data, len, blob);
	if (blob_len < 0) {
		err_set(e, 400, "invalid_key", "the key data is not base64");
		goto out;
	}
	if (!wire_string(blob, (size_t)blob_len, &pos, &inner, &inner_len)) {
		err_set(e, 400, "invalid_key", "the key data is not an SSH public key");
		goto out;
	}
	if (inner_len != strlen(type) || memcmp(inner, type, inner_len) != 0) {
		char what[64];
		size_t i;
		for (i = 0; i < inner_len && i < sizeof(what) - 1; i++)
			what[i] = inner[i] >= 0x20 && inner[i] < 0x7f ? (char)inner[i] : '?';
		what[i] = '\0';
		err_set(e, 400, "invalid_key", "the line says %s but the key data is of type "
			"'%s'", type, what);
		goto out;
	}
	if (accepted[t].type == SSH_KEYTYPE_RSA) {
		int bits = rsa_bits(blob, (size_t)blob_len);
		if (bits < 0) {
			err_set(e, 400, "invalid_key", "the key data is not a valid ssh-rsa key");
			goto out;
		}
		if (bits < RSA_MIN_BITS || bits > RSA_MAX_BITS) {
			err_set(e, 400, "invalid_key", "the RSA key has %d bits: %d to %d are "
				"accepted", bits, RSA_MIN_BITS, RSA_MAX_BITS);
			goto out;
		}
	}
	/* Canonical base64: one key, one text, whoever sends it. */
	b64_encode(blob, (size_t)blob_len, true, k->blob);
	if (comment_check(comment, USERKEY_COMMENT_CHARS, e) < 0)
		goto out;
	snprintf(k->comment, sizeof(k->comment), "%s", comment);
	rc = libssh_check(k, t, e);
out:
	if (rc < 0)
		memset(k, 0, sizeof(*k));
	free(blob);
	free(copy);
	return rc;
}

json_t *userkey_json(const struct userkey *k)
{
	return json_pack("{s:I, s:s, s:s, s:s, s:I}", "id", (json_int_t)k->id, "type", k->type,
			 "fingerprint", k->fingerprint, "comment", k->comment,
			 "created", (json_int_t)k->created);
}
