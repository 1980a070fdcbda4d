#include "hostd/gwkey.h"

#include <errno.h>
#include <libssh/libssh.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/util.h"
#include "common/banned.h"

static int generate(const char *priv, const char *pub, struct err *e)
{
	ssh_key key = NULL;
	char *b64 = NULL, tmp[PATH_MAX];
	struct buf line = BUF_INIT;
	int rc = -1;

	if (ssh_pki_generate(SSH_KEYTYPE_ED25519, 0, &key) != SSH_OK) {
		err_set(e, 500, "internal", "cannot generate the gateway key");
		goto out;
	}
	xsnprintf(tmp, sizeof(tmp), "%s.tmp", priv);
	unlink(tmp);
	mode_t old = umask(077);
	int erc = ssh_pki_export_privkey_file(key, NULL, NULL, NULL, tmp);
	umask(old);
	if (erc != SSH_OK || chmod(tmp, 0600) < 0) {
		err_set(e, 500, "internal", "cannot write %s", tmp);
		goto out;
	}
	if (ssh_pki_export_pubkey_base64(key, &b64) != SSH_OK) {
		err_set(e, 500, "internal", "cannot export the gateway public key");
		goto out;
	}
	buf_printf(&line, "ssh-ed25519 %s berth-gateway\n", b64);
	if (file_write_atomic(pub, line.data, line.len, 0644, e) < 0)
		goto out;
	if (rename(tmp, priv) < 0) {
		err_errno(e, errno, "rename %s", tmp);
		goto out;
	}
	log_info("generated gateway key %s", priv);
	rc = 0;
out:
	if (rc < 0)
		unlink(tmp);
	ssh_string_free_char(b64);
	ssh_key_free(key);
	buf_free(&line);
	return rc;
}

/* Write PUB from the private key PRIV (when only the .pub was lost). */
static int derive_public(const char *priv, const char *pub, struct err *e)
{
	ssh_key key = NULL;
	char *b64 = NULL;
	struct buf line = BUF_INIT;
	int rc = -1;

	if (ssh_pki_import_privkey_file(priv, NULL, NULL, NULL, &key) != SSH_OK ||
	    ssh_pki_export_pubkey_base64(key, &b64) != SSH_OK) {
		err_set(e, 500, "internal", "cannot read the gateway key %s", priv);
		goto out;
	}
	buf_printf(&line, "%s %s berth-gateway\n", ssh_key_type_to_char(ssh_key_type(key)), b64);
	if (file_write_atomic(pub, line.data, line.len, 0644, e) < 0)
		goto out;
	log_warn("gateway public key %s was missing; derived it from %s", pub, priv);
	rc = 0;
out:
	ssh_string_free_char(b64);
	ssh_key_free(key);
	buf_free(&line);
	return rc;
}

int gwkey_load_or_create(const char *dir, struct gateway_key *k, struct err *e)
{
	char priv[PATH_MAX], pub[PATH_MAX];

	memset(k, 0, sizeof(*k));
	if (mkdir_p(dir, 0700) < 0)
		return err_errno(e, errno, "create %s", dir);
	snprintf(priv, sizeof(priv), "%s/gateway", dir);
	snprintf(pub, sizeof(pub), "%s/gateway.pub", dir);
	if (access(priv, F_OK) < 0) {
		if (generate(priv, pub, e) < 0)
			return -1;
	} else if (access(pub, F_OK) < 0 && derive_public(priv, pub, e) < 0) {
		/* Never a new private key: every machine's seed trusts this one. */
		return -1;
	}
	k->private_pem = file_read_trusted(priv, 65536, e);
	k->public_line = k->private_pem ? file_read_trusted(pub, 65536, e) : NULL;
	if (!k->private_pem || !k->public_line) {
		gwkey_free(k);
		return -1;
	}
	/* One line, no trailing newline. */
	k->public_line[strcspn(k->public_line, "\r\n")] = '\0';
	return 0;
}

void gwkey_free(struct gateway_key *k)
{
	free(k->private_pem);
	free(k->public_line);
	k->private_pem = k->public_line = NULL;
}
