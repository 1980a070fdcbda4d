#include "hostd/sshkey.h"

#include <libssh/libssh.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/banned.h"

int sshkey_ed25519(char **priv, char **pub, struct err *e)
{
	ssh_key key = NULL;
	char *p = NULL, *b64 = NULL;
	struct buf line = BUF_INIT;
	int rc = -1;

	*priv = *pub = NULL;
	if (ssh_pki_generate(SSH_KEYTYPE_ED25519, 0, &key) != SSH_OK ||
	    ssh_pki_export_privkey_base64(key, NULL, NULL, NULL, &p) != SSH_OK ||
	    ssh_pki_export_pubkey_base64(key, &b64) != SSH_OK) {
		err_set(e, 500, "internal", "cannot make an ed25519 key");
		goto out;
	}
	buf_printf(&line, "ssh-ed25519 %s", b64);
	*priv = strdup(p);
	*pub = buf_detach(&line);
	if (!*priv)
		abort();
	rc = 0;
out:
	/* The private key's text is wiped before libssh frees it. */
	if (p)
		memset(p, 0, strlen(p));
	ssh_string_free_char(p);
	ssh_string_free_char(b64);
	ssh_key_free(key);
	buf_free(&line);
	return rc;
}
