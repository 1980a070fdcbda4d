/* berth key add FILE|- | ls | rm ID: the SSH public keys of the caller,
 * which the gateway accepts for `ssh NAME@host`. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/run.h"
#include "common/util.h"
#include "common/banned.h"

/* The signature of the challenge CHAL by the key of LINE, into *SIG
 * (malloc'd): ssh-keygen -Y sign with PRIV (the private key file beside
 * the .pub; it may ask for its passphrase on the terminal), or, without
 * PRIV, with the public key, which ssh-keygen finds in the agent.  0, or
 * -1 with MSG set. */
static int sign(const char *line, const char *priv, const char *chal, const char *ns,
		char **sig, char *msg, size_t len)
{
	const char *tmp = getenv("TMPDIR");
	char dir[4096], chal_path[4200], sig_path[4210], pub_path[4200], keyarg[4200];
	char *argv[] = { "ssh-keygen", "-Y", "sign", "-n", (char *)ns, "-f", keyarg,
			 chal_path, NULL };
	struct err e = { 0 };
	/* ssh-keygen may ask for the key's passphrase on the terminal: it
	 * stays in the terminal's process group. */
	struct run_opts o = { .terminal = true };
	int rc = -1;

	*sig = NULL;
	snprintf(dir, sizeof(dir), "%s/berth-key.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		snprintf(msg, len, "mkdtemp %.200s: %s", dir, strerror(errno));
		return -1;
	}
	snprintf(chal_path, sizeof(chal_path), "%s/challenge", dir);
	snprintf(sig_path, sizeof(sig_path), "%s.sig", chal_path);
	snprintf(pub_path, sizeof(pub_path), "%s/key.pub", dir);
	snprintf(keyarg, sizeof(keyarg), "%s", priv ? priv : pub_path);
	if (file_write_atomic(chal_path, chal, strlen(chal), 0600, &e) < 0 ||
	    (!priv && file_write_atomic(pub_path, line, strlen(line), 0600, &e) < 0)) {
		snprintf(msg, len, "%.500s", e.msg);
	} else if (run_argv(argv, &o, &e) < 0) {
		snprintf(msg, len, "could not sign with %.200s (%s): %.500s",
			 priv ? priv : "the key in your agent (SSH_AUTH_SOCK)",
			 priv ? "its private key" : "no private key file beside it", e.msg);
	} else if (!(*sig = file_read(sig_path, 65536, &e))) {
		snprintf(msg, len, "%.500s", e.msg);
	} else {
		rc = 0;
	}
	unlink(chal_path);
	unlink(sig_path);
	unlink(pub_path);
	rmdir(dir);
	return rc;
}

/* The private key beside FILE ("X.pub": X) when it exists, else NULL. */
static char *private_beside(const char *file)
{
	size_t n = strlen(file);
	char *priv;

	if (n <= 4 || strcmp(file + n - 4, ".pub") != 0)
		return NULL;
	priv = strndup(file, n - 4);
	if (!priv)
		abort();
	if (access(priv, R_OK) != 0) {
		free(priv);
		return NULL;
	}
	return priv;
}

/* Add key LINE, proving that the caller holds it: a challenge from hostd,
 * signed (PRIV or the agent).  Returns hostd's answer (*STATUS), or NULL
 * with MSG set. */
static json_t *add_one(struct client *c, const char *line, const char *priv, long *status,
		       char *msg, size_t len)
{
	json_t *r = NULL, *body = json_pack("{s:s}", "key", line);
	char *sig = NULL;
	const char *chal, *ns;
	int rc = client_call(c, "POST", "/v1/keys/challenge", body, status, &r, msg, len);

	json_decref(body);
	if (rc < 0)
		return NULL;
	chal = json_string_value(json_object_get(r, "challenge"));
	ns = json_string_value(json_object_get(r, "namespace"));
	if (*status != 201 || !chal || !ns)
		return r;	/* hostd's refusal, printed by the caller */
	if (sign(line, priv, chal, ns, &sig, msg, len) < 0) {
		json_decref(r);
		return NULL;
	}
	body = json_pack("{s:s, s:s, s:s}", "key", line, "challenge", chal, "signature", sig);
	free(sig);
	json_decref(r);
	r = NULL;
	if (client_call(c, "POST", "/v1/keys", body, status, &r, msg, len) < 0)
		r = NULL;
	json_decref(body);
	return r;
}

/* The key lines of F: comments and blank lines left out. */
static char **key_lines(FILE *f, int **linenos, size_t *n)
{
	char **v = NULL, *line = NULL;
	size_t cap = 0;
	int lineno = 0;

	*n = 0;
	*linenos = NULL;
	while (getline(&line, &cap, f) >= 0) {
		char *p = line + strspn(line, " \t");
		lineno++;
		p[strcspn(p, "\r\n")] = '\0';
		if (*p == '\0' || *p == '#')
			continue;
		v = realloc(v, (*n + 1) * sizeof(*v));
		*linenos = realloc(*linenos, (*n + 1) * sizeof(**linenos));
		if (!v || !*linenos || !(v[*n] = strdup(p)))
			abort();
		(*linenos)[(*n)++] = lineno;
	}
	free(line);
	return v;
}

/* berth key add FILE: every key line of FILE ("-": stdin), each added
 * on its own; a line that fails does not stop the others.  Each is
 * signed to prove the caller holds it: by the private key beside FILE
 * when FILE is "X.pub" with one key and X exists, otherwise through the
 * agent. */
static int key_add(struct client *c, const char *file)
{
	bool std = strcmp(file, "-") == 0;
	FILE *f = std ? stdin : fopen(file, "re");
	char **lines, *priv = NULL;
	int *linenos, added = 0, failed = 0;
	size_t n;
	json_t *out = json_pack("{s:[], s:[]}", "added", "failed");

	if (!f) {
		fprintf(stderr, "berth: cannot read %s: %s\n", file, strerror(errno));
		json_decref(out);
		return 1;
	}
	lines = key_lines(f, &linenos, &n);
	if (!std)
		fclose(f);
	if (!std && n == 1)
		priv = private_beside(file);
	for (size_t i = 0; i < n; i++) {
		char err[1024];
		long status = 0;
		json_t *r = add_one(c, lines[i], priv, &status, err, sizeof(err)), *msg;

		if (!r) {
			fprintf(stderr, "berth: %s:%d: %s\n", std ? "stdin" : file, linenos[i], err);
			json_array_append_new(json_object_get(out, "failed"),
					      json_pack("{s:i, s:{s:s}}", "line", linenos[i],
							"error", "message", err));
			failed++;
		} else if (status == 201) {
			added++;
			if (!c->json)
				printf("added key %lld: %s %s%s%s\n", cli_jint(r, "id"),
				       cli_jstr(r, "type"), cli_jstr(r, "fingerprint"),
				       *cli_jstr(r, "comment") ? " " : "", cli_jstr(r, "comment"));
			json_array_append(json_object_get(out, "added"), r);
		} else {
			failed++;
			msg = json_object_get(json_object_get(r, "error"), "message");
			fprintf(stderr, "berth: %s:%d: %s\n", std ? "stdin" : file, linenos[i],
				json_is_string(msg) ? json_string_value(msg)
						    : "unexpected answer from hostd");
			json_array_append_new(json_object_get(out, "failed"),
					      json_pack("{s:i, s:O*}", "line", linenos[i], "error",
							json_object_get(r, "error")));
		}
		json_decref(r);
		free(lines[i]);
	}
	free(lines);
	free(linenos);
	free(priv);
	if (n == 0)
		fprintf(stderr, "berth: no key line in %s (expected 'TYPE BASE64 [COMMENT]', "
			"as in ~/.ssh/id_ed25519.pub)\n", std ? "stdin" : file);
	if (c->json)
		cli_print_json(out);
	json_decref(out);
	return added > 0 && failed == 0 ? 0 : 1;
}

static void print_keys(json_t *r, void *data)
{
	json_t *k;
	size_t i;

	(void)data;
	printf("%-5s %-34s %-50s %s\n", "ID", "TYPE", "FINGERPRINT", "COMMENT");
	json_array_foreach(json_object_get(r, "keys"), i, k)
		printf("%-5lld %-34s %-50s %s\n", cli_jint(k, "id"), cli_jstr(k, "type"),
		       cli_jstr(k, "fingerprint"), cli_jstr(k, "comment"));
}

int cmd_key(struct client *c, int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "add"))
		return key_add(c, argv[2]);
	if (argc == 2 && (!strcmp(argv[1], "ls") || !strcmp(argv[1], "list")))
		return cli_call_print(c, "GET", "/v1/keys", NULL, print_keys, NULL);
	if (argc == 3 && !strcmp(argv[1], "rm"))
		return cli_delete_id(c, "key", "/v1/keys", argv[2], "deleted");
	fprintf(stderr, "usage: berth key add FILE|- | key ls | key rm ID\n");
	return 2;
}

