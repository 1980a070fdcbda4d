/* What the gateway offers, and why.  The aim is what a hardened OpenSSH
 * offers (and what ssh-audit passes without a warning: t415), while every
 * client that reaches the gateway keeps a common algorithm: OpenSSH,
 * PuTTY 0.78, paramiko 2.12 and asyncssh 2.10 (Debian 12's), each checked
 * by t415.  libssh 0.10's own defaults add the NIST curves to the key
 * exchange and MACs that are not encrypt-then-MAC; those are what this
 * file takes away.
 *
 * Key exchange: Curve25519 first; then the 4096- and 8192-bit fixed
 * groups with SHA-512 (RFC 8268) for clients without it.  Not the NIST
 * curves (ecdh-sha2-nistp*: curves with unexplained constants, "weak
 * elliptic curves" to ssh-audit), not group14 (2048 bits) nor group
 * exchange (libssh handed ssh-audit a 2048-bit group), nothing with
 * SHA-1.  No post-quantum hybrid: libssh has sntrup761x25519-sha512 and
 * mlkem768x25519-sha256 from 0.12 on; 0.10.6 (Debian 12's) has neither,
 * in its headers or its library.  libssh adds kex-strict-s-v00@openssh.com
 * by itself (Terrapin, CVE-2023-48795).
 *
 * Ciphers: the AEAD ones, then AES-CTR, which paramiko 2.12 needs (it has
 * neither ChaCha20-Poly1305 nor AES-GCM); with CTR the MAC is
 * encrypt-then-MAC, below.  No CBC, 3DES or Blowfish.
 *
 * MACs: encrypt-then-MAC with SHA-2 only (the MAC covers the ciphertext,
 * so nothing is decrypted before it is checked); no hmac-sha1.
 *
 * Host key: the gateway has one, ed25519 (main.c).  RSA would be signed
 * with SHA-2 only, never ssh-rsa (SHA-1); no ECDSA.
 *
 * Users' keys: the types hostd registers (hostd/userkeys.c), RSA signed
 * with SHA-2 only, as OpenSSH since 8.8; no certificates (hostd takes
 * none).
 *
 * Compression: none (libssh 0.10 offers zlib@openssh.com, which starts
 * after authentication).  It is one more parser fed by the client,
 * compressed lengths tell about secrets mixed with attacker-chosen data,
 * and it buys little on links that carry mostly compressed or encrypted
 * data.
 * Clients that ask for compression (ssh -C) also offer none. */
#include "sshgw/algos.h"

#include <stdbool.h>

#include "common/log.h"
#include "common/banned.h"

#define KEX "curve25519-sha256,curve25519-sha256@libssh.org," \
	    "diffie-hellman-group16-sha512,diffie-hellman-group18-sha512"
#define CIPHERS "chacha20-poly1305@openssh.com,aes256-gcm@openssh.com," \
		"aes128-gcm@openssh.com,aes256-ctr,aes192-ctr,aes128-ctr"
#define MACS "hmac-sha2-256-etm@openssh.com,hmac-sha2-512-etm@openssh.com"
#define HOSTKEYS "ssh-ed25519,rsa-sha2-512,rsa-sha2-256"
#define USER_KEYS "ssh-ed25519,sk-ssh-ed25519@openssh.com," \
		  "ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,ecdsa-sha2-nistp521," \
		  "sk-ecdsa-sha2-nistp256@openssh.com,rsa-sha2-512,rsa-sha2-256"
#define COMPRESSION "none"

int algos_bind(ssh_bind bind)
{
	static const struct {
		enum ssh_bind_options_e opt;
		const char *what, *value;
	} lists[] = {
		{ SSH_BIND_OPTIONS_KEY_EXCHANGE, "key exchange", KEX },
		{ SSH_BIND_OPTIONS_CIPHERS_C_S, "ciphers", CIPHERS },
		{ SSH_BIND_OPTIONS_CIPHERS_S_C, "ciphers", CIPHERS },
		{ SSH_BIND_OPTIONS_HMAC_C_S, "MACs", MACS },
		{ SSH_BIND_OPTIONS_HMAC_S_C, "MACs", MACS },
		{ SSH_BIND_OPTIONS_HOSTKEY_ALGORITHMS, "host key algorithms", HOSTKEYS },
		{ SSH_BIND_OPTIONS_PUBKEY_ACCEPTED_KEY_TYPES, "user key algorithms", USER_KEYS },
	};
	bool no = false;

	/* A libssh_server.config would be read at the first accept and
	 * override the lists below (and could add host keys). */
	if (ssh_bind_options_set(bind, SSH_BIND_OPTIONS_PROCESS_CONFIG, &no) < 0) {
		log_error("libssh: cannot turn off its configuration files: %s",
			  ssh_get_error(bind));
		return -1;
	}
	for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
		if (ssh_bind_options_set(bind, lists[i].opt, lists[i].value) < 0) {
			log_error("libssh refuses the %s %s: %s", lists[i].what, lists[i].value,
				  ssh_get_error(bind));
			return -1;
		}
	}
	return 0;
}

int algos_session(ssh_session session)
{
	if (ssh_options_set(session, SSH_OPTIONS_COMPRESSION_C_S, COMPRESSION) < 0 ||
	    ssh_options_set(session, SSH_OPTIONS_COMPRESSION_S_C, COMPRESSION) < 0) {
		log_error("libssh refuses the compression %s: %s", COMPRESSION,
			  ssh_get_error(session));
		return -1;
	}
	return 0;
}
