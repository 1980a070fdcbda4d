/*
 * sshexec: run one command in a VM over SSH (libssh), streaming its stdin,
 * stdout and stderr, and report its exit status.  Used by `berth exec` and
 * by whatever waits for a booting VM's sshd.
 *
 * The server must present the host key hostd pinned for the machine
 * (sshexec_target.host_key); the client authenticates with the private key
 * it is given and never reads ~/.ssh or any ssh_config.
 */
#ifndef BERTH_SSHEXEC_H
#define BERTH_SSHEXEC_H

#include <stdbool.h>
#include <stddef.h>

struct ssh_session_struct;	/* libssh's ssh_session */

struct sshexec_target {
	const char *host;	/* numeric address or name, e.g. "127.0.0.1" */
	int port;
	const char *user;	/* e.g. "root" */
	/* The private key as OpenSSH PEM text ("-----BEGIN OPENSSH PRIVATE
	 * KEY-----..."), unencrypted; read with ssh_pki_import_privkey_base64. */
	const char *key_b64;
	/* Bound on TCP connect + SSH handshake + authentication + opening the
	 * channel and starting the command; <= 0 means 10000. */
	int connect_timeout_ms;
	/* The host key the server must present, "TYPE BASE64" (a public key
	 * line, comment ignored): any other is refused before authentication,
	 * "host key mismatch: ...".  NULL or "": not checked (the first
	 * answer of a machine whose image ignored the seed's key, which
	 * hostd then pins: sshexec_host_key). */
	const char *host_key;
};

/*
 * Quote ARGV (NULL-terminated) into one command line for the remote POSIX
 * shell: every argument single-quoted ('...', with ' written as '\''),
 * joined by single spaces, so the remote shell sees exactly ARGV.  An empty
 * ARGV gives "".  Returns a malloc'd string the caller frees, or NULL when
 * memory runs out.
 */
char *sshexec_quote(char *const argv[]);

/*
 * Run CMD (a shell command line, e.g. from sshexec_quote) on T and wait for
 * it to end.  While it runs:
 *  - FD_IN is copied to the remote stdin until EOF, then EOF is sent; no more
 *    is read than the channel window allows, so a command that never reads
 *    its stdin stalls the copy, not the run.  FD_IN may be -1: no stdin.
 *  - the remote stdout goes to FD_OUT and the remote stderr to FD_ERR as it
 *    arrives (memory use does not grow with the output).  Writes block while
 *    a pipe is full, which in turn holds the remote back.
 *  - if FD_OUT or FD_ERR fails with EPIPE (nobody reads any more), the
 *    channel is closed and the run ends at once, like a local pipeline:
 *    *STATUS is then the exit status if it already arrived, otherwise 141
 *    (128 + SIGPIPE).
 * FD_OUT or FD_ERR may be -1 to discard that stream.  The descriptors stay
 * open and keep their flags; any may be nonblocking.  The caller must ignore
 * SIGPIPE (writes to a closed pipe must fail with EPIPE, not kill it).
 *
 * Returns 0 once the command has ended and all its output is written, with
 * *STATUS set to its exit status, or 128+N when it died of signal N (255 for
 * a signal name this module does not know).  Returns -1 when the key cannot
 * be read, on failure to connect, authenticate, open the channel or start
 * the command, when the connection is lost, when FD_IN or a write fails
 * other than with EPIPE, or when the server closes without an exit status;
 * then ERR (ERRLEN bytes, may be 0) holds a message naming host:port and the
 * cause, e.g. "127.0.0.1:2201: connection refused" or
 * "127.0.0.1:2201: authentication failed", and *STATUS is left unchanged.
 */
int sshexec_run(const struct sshexec_target *t, const char *cmd,
		int fd_in, int fd_out, int fd_err, int *status,
		char *err, size_t errlen);

/* What sshexec_run_io is given and reports. */
struct sshexec_io {
	int in, out, err;	/* as sshexec_run's FD_IN, FD_OUT, FD_ERR */
	/* -1, or a descriptor (a pipe's read end) read while the command
	 * runs: each byte a signal number (SIGTERM...) sent to the command
	 * (an SSH "signal" request; OpenSSH and dropbear deliver it to the
	 * process they started), SSHEXEC_CTL_RESIZE and 4 bytes (columns and
	 * rows, 16 bits each, big-endian: the terminal's new size),
	 * SSHEXEC_CTL_END, or the writer closing it, the end of the run: the
	 * channel is closed and -1 returned ("ended before the command did")
	 * unless the command had ended. */
	int ctl;
	/* > 0: the command runs on a terminal of this size (its stderr is
	 * then its stdout), TERM its type ("": xterm-256color). */
	int pty_cols, pty_rows;
	char term[32];
	int status;		/* out: as sshexec_run's *STATUS */
	char signal[16];	/* out: "TERM" when it died of a signal, else "" */
	bool started;		/* out: the server took the command (a run that
				   failed before is safe to try again) */
};
#define SSHEXEC_CTL_END 0
#define SSHEXEC_CTL_RESIZE 0xff

/* sshexec_run with IO's descriptors, a control descriptor and the signal
 * reported by name.  Returns as sshexec_run does. */
int sshexec_run_io(const struct sshexec_target *t, const char *cmd, struct sshexec_io *io,
		   char *err, size_t errlen);

/* sshexec_run_io on SESSION (from sshexec_connect, authenticated as T
 * says), which stays open for the next run: the channel is opened and the
 * command started before DEADLINE (sshexec_now_ms's clock).  A session
 * kept for reuse may have died meanwhile: then this fails with
 * IO->started false, and a new session may be tried. */
int sshexec_run_session(struct ssh_session_struct *session, const struct sshexec_target *t,
			const char *cmd, struct sshexec_io *io, long long deadline,
			char *err, size_t errlen);

/* The number of signal NAME ("TERM" or "SIGTERM"), 0 when unknown; and
 * the name of number NUM ("TERM"), NULL when unknown. */
int sshexec_signal_number(const char *name);
const char *sshexec_signal_name(int num);

/*
 * Connect to T and authenticate with its key before DEADLINE (milliseconds
 * of CLOCK_MONOTONIC, see sshexec_now_ms): the first half of sshexec_run,
 * for callers that drive channels themselves (the SSH gateway).  Returns a
 * session in libssh's blocking mode whose timeout is what is left until
 * DEADLINE, or NULL with ERR set as sshexec_run sets it.  Free it with
 * sshexec_disconnect.
 */
struct ssh_session_struct *sshexec_connect(const struct sshexec_target *t, long long deadline,
					   char *err, size_t errlen);
/* True when SESSION, kept for reuse with no channel open, is connected and
 * nothing arrived on it: what arrives on such a session can only be its
 * end (or a keepalive, rare enough to cost one handshake). */
bool sshexec_session_quiet(struct ssh_session_struct *session);
/* Disconnect and free SESSION (may be NULL), closing its socket. */
void sshexec_disconnect(struct ssh_session_struct *session);
/* Now, in milliseconds of CLOCK_MONOTONIC. */
long long sshexec_now_ms(void);

/*
 * The host key the SSH server at HOST:PORT presents, as "TYPE BASE64" into
 * OUT (OUTLEN bytes), preferring type PREFER ("ssh-ed25519"; NULL: libssh's
 * order), within TIMEOUT_MS: a key exchange and nothing more.  0, or -1
 * with ERR as sshexec_run sets it.
 */
int sshexec_host_key(const char *host, int port, const char *prefer, int timeout_ms,
		     char *out, size_t outlen, char *err, size_t errlen);

/*
 * Whether the public key lines A and B ("TYPE BASE64 [COMMENT]") are the
 * same key (type and key data; comments ignored).  False when either does
 * not parse.
 */
bool sshexec_key_equal(const char *a, const char *b);

/*
 * True when something at HOST:PORT accepts a TCP connection and sends the
 * first bytes of an SSH version banner ("SSH-") within TIMEOUT_MS in all;
 * false on refusal, silence, a short or other reply, or any error.  A
 * connect alone proves nothing: QEMU user networking accepts connections
 * before the guest's sshd listens.
 */
bool sshexec_banner_ready(const char *host, int port, int timeout_ms);

#endif
