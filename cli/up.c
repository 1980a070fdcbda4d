/* `berth up` and `berth down`: the embedded default on one machine.
 *
 * up:   libvirtd (started here when none answers: these machines have no
 *       systemd), berth-hostd for the state directory, berth-sshgw on
 *       --ssh-port (default 2222, all addresses), berth-desktop on
 *       --desktop-port (6080, loopback), berth-web on berth.conf's
 *       http_listen (127.0.0.1:8080 by default), the tiny image when
 *       missing, and a running machine "demo".  Without --detach it stays in
 *       the foreground and runs `down` on Ctrl-C.
 * down: stops the running machines (their disks stay), the network daemons,
 *       hostd, and libvirtd
 *       if `up` started it (the pid it recorded is the one running) and no
 *       domain runs any more. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/run.h"
#include "common/sshexec.h"
#include "common/util.h"
#include "common/banned.h"

#define LIBVIRT_SOCK "/run/libvirt/libvirt-sock"

static bool unix_answers(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok;

	if (fd < 0)
		return false;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

static pid_t pid_from_file(const char *path)
{
	char buf[32] = "";
	FILE *f = fopen(path, "re");
	long pid = 0;

	if (!f)
		return 0;
	if (fgets(buf, sizeof(buf), f))
		pid = strtol(buf, NULL, 10);
	fclose(f);
	if (pid <= 1 || kill((pid_t)pid, 0) < 0)
		return 0;
	return (pid_t)pid;
}

static int ensure_libvirtd(struct client *c)
{
	char marker[PATH_MAX], pid[24];
	struct err e = { 0 };
	int n;

	xsnprintf(marker, sizeof(marker), "%s/libvirtd.started-by-up", c->state);
	if (unix_answers(LIBVIRT_SOCK)) {
		/* Someone else's: an earlier up's marker no longer holds. */
		unlink(marker);
		return 0;
	}
	fprintf(stderr, "starting libvirtd…\n");
	if (!pid_from_file("/run/virtlogd.pid")) {
		char *const argv[] = { "virtlogd", "-d", NULL };
		if (run_argv(argv, NULL, &e) < 0) {
			fprintf(stderr, "berth up: %s\n", e.msg);
			return -1;
		}
	}
	char *const argv[] = { "libvirtd", "-d", NULL };
	if (run_argv(argv, NULL, &e) < 0) {
		fprintf(stderr, "berth up: %s\n", e.msg);
		return -1;
	}
	for (int i = 0; i < 150 && !unix_answers(LIBVIRT_SOCK); i++)
		usleep(100 * 1000);
	if (!unix_answers(LIBVIRT_SOCK)) {
		fprintf(stderr, "berth up: libvirtd started but %s does not answer\n", LIBVIRT_SOCK);
		return -1;
	}
	/* Which libvirtd this up started: down stops that one, no other. */
	n = snprintf(pid, sizeof(pid), "%ld\n", (long)pid_from_file("/run/libvirtd.pid"));
	file_write_atomic(marker, pid, (size_t)n, 0600, NULL);
	return 0;
}

static void print_log_tail(const char *log)
{
	char *text = file_read(log, 1 << 20, NULL);
	size_t n;

	if (!text)
		return;
	n = strlen(text);
	fprintf(stderr, "--- last lines of %s ---\n%s", log, n > 2000 ? text + n - 2000 : text);
	free(text);
}

/* Start the program NAME beside this one with ARGV (ARGV[0] is NAME),
 * detached (its own session, reparented: nobody waits on it), stdin
 * /dev/null, stdout and stderr appended to LOG. */
static int spawn_daemon(const char *name, char *const argv[], const char *log)
{
	char bin[PATH_MAX], dir[PATH_MAX];
	pid_t pid;

	if (exe_dir(dir, sizeof(dir)) < 0)
		return -1;
	xsnprintf(bin, sizeof(bin), "%s/%s", dir, name);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
		setsid();
		if (fd < 0 || nul < 0)
			_exit(127);
		dup2(nul, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		if (fork() != 0)
			_exit(0);
		execv(bin, argv);
		dprintf(2, "cannot run %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	waitpid(pid, NULL, 0);
	return 0;
}

/* berth-hostd for this state, unless one answers.  DESKTOP_URL (NULL: the
 * configuration's) is where its desktop URLs point. */
static int ensure_hostd(struct client *c, const char *desktop_url)
{
	char log[PATH_MAX], url[256];
	char *argv[] = { "berth-hostd", "--state", c->state, NULL, NULL, NULL };

	if (client_alive(c))
		return 0;
	if (desktop_url) {
		snprintf(url, sizeof(url), "%s", desktop_url);
		argv[3] = "--desktop-url";
		argv[4] = url;
	}
	xsnprintf(log, sizeof(log), "%s/hostd.log", c->state);
	if (mkdir_p(c->state, 0700) < 0) {
		fprintf(stderr, "berth up: create %s: %s\n", c->state, strerror(errno));
		return -1;
	}
	fprintf(stderr, "starting berth-hostd (log %s)…\n", log);
	if (spawn_daemon("berth-hostd", argv, log) < 0)
		return -1;
	for (int i = 0; i < 300; i++) {
		if (client_alive(c))
			return 0;
		usleep(100 * 1000);
	}
	fprintf(stderr, "berth up: berth-hostd did not come up within 30 s\n");
	print_log_tail(log);
	return -1;
}

/* PID, when it is alive and runs the program NAME (a pid file can outlive
 * its process, and the pid be reused). */
static bool pid_is(pid_t pid, const char *name)
{
	char path[64], comm[64] = "";
	FILE *f;

	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%ld/comm", (long)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = '\0';
	fclose(f);
	comm[strcspn(comm, "\n")] = '\0';
	return strcmp(comm, name) == 0;
}

/* PROG (berth-sshgw, berth-desktop, berth-web) on LISTEN (ADDR:PORT; NULL:
 * where berth.conf says), unless one runs for this state: its pid file is
 * STATE/FILE.pid, its log STATE/FILE.log.  One it starts has 10 s until
 * READY(PORT) (NULL: until it wrote its pid file, which it does once it
 * listens).  0, or -1 having said why. */
static int ensure_daemon(struct client *c, const char *prog, const char *file,
			 const char *listen, int port, bool (*ready)(int port))
{
	char log[PATH_MAX], pidfile[PATH_MAX], lst[64];
	char *const argv[] = { (char *)prog, "--state", c->state, "--pidfile", pidfile,
			       listen ? "--listen" : NULL, lst, NULL };

	xsnprintf(pidfile, sizeof(pidfile), "%s/%s.pid", c->state, file);
	snprintf(lst, sizeof(lst), "%s", listen ? listen : "");
	if (pid_is(pid_from_file(pidfile), prog))
		return 0;
	xsnprintf(log, sizeof(log), "%s/%s.log", c->state, file);
	unlink(pidfile);
	fprintf(stderr, "starting %s on %s (log %s)…\n", prog, listen ? listen : "http_listen",
		log);
	if (spawn_daemon(prog, argv, log) < 0)
		return -1;
	for (int i = 0; i < 100; i++) {
		if (pid_is(pid_from_file(pidfile), prog) && (!ready || ready(port)))
			return 0;
		usleep(100 * 1000);
	}
	fprintf(stderr, "berth up: %s did not come up within 10 s\n", prog);
	print_log_tail(log);
	return -1;
}

/* Whether an SSH server's banner comes from 127.0.0.1:PORT. */
static bool banner_ready(int port)
{
	return sshexec_banner_ready("127.0.0.1", port, 1000);
}

/* Whether something accepts TCP connections on 127.0.0.1:PORT. */
static bool tcp_ready(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;

	if (fd >= 0)
		close(fd);
	return ok;
}

/* berth-sshgw on LISTEN (ADDR:PORT), unless one runs for this state. */
static int ensure_sshgw(struct client *c, const char *listen, int port)
{
	return ensure_daemon(c, "berth-sshgw", "sshgw", listen, port, banner_ready);
}

/* berth-desktop on 127.0.0.1:PORT (hostd's desktop_url must name it:
 * http://127.0.0.1:6080 by default), unless one runs for this state. */
static int ensure_desktop(struct client *c, int port)
{
	char listen[64];

	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	return ensure_daemon(c, "berth-desktop", "desktop", listen, port, tcp_ready);
}

/* berth-web on berth.conf's http_listen, unless one runs for this state. */
static int ensure_web(struct client *c)
{
	return ensure_daemon(c, "berth-web", "web", NULL, 0, NULL);
}

/* Whether hostd's desktop URLs reach the bridge on 127.0.0.1:PORT.  A
 * loopback URL with another port does not (hostd already running with
 * another desktop_url, or berth.conf naming one); any other URL is taken
 * as the operator's (a proxy in front, say).  0, or -1 with a message. */
static int check_desktop_url(struct client *c, int port)
{
	static const char *const loopback[] = { "http://127.0.0.1:", "http://localhost:",
						"http://[::1]:", NULL };
	json_t *info = NULL;
	const char *url;
	int rc = 0;

	if (cli_call(c, "GET", "/v1/info", NULL, &info) < 0)
		return -1;
	url = json_string_value(json_object_get(info, "desktop_url"));
	for (int i = 0; url && loopback[i]; i++) {
		size_t n = strlen(loopback[i]);
		if (strncmp(url, loopback[i], n) != 0)
			continue;
		char *end;
		long p = strtol(url + n, &end, 10);
		if (p != port || (*end && *end != '/')) {
			fprintf(stderr, "berth up: hostd's desktop URLs point at %s but the "
				"desktop is on port %d: stop hostd (berth down) and run berth up "
				"again, or set desktop_url in %s/berth.conf\n", url, port,
				c->state);
			rc = -1;
		}
		break;
	}
	json_decref(info);
	return rc;
}

static int ensure_image(struct client *c)
{
	json_t *r;
	long status;
	char err[512];

	if (client_call(c, "GET", "/v1/images/tiny", NULL, &status, &r, err, sizeof(err)) < 0) {
		fprintf(stderr, "berth up: %s\n", err);
		return -1;
	}
	json_decref(r);
	if (status == 200)
		return 0;
	fprintf(stderr, "building the tiny image (Debian kernel, busybox, dropbear)…\n");
	int64_t t0 = mono_ms();
	json_t *body = json_pack("{s:s}", "recipe", "tiny");
	int rc = cli_call(c, "POST", "/v1/images", body, &r);
	json_decref(body);
	if (rc < 0)
		return -1;
	fprintf(stderr, "tiny image built in %.1f s\n", (double)(mono_ms() - t0) / 1000.0);
	json_decref(r);
	return 0;
}

static int ensure_demo(struct client *c, json_t **machine)
{
	json_t *r, *body;
	long status;
	char err[512];
	int64_t t0 = mono_ms();

	if (client_call(c, "GET", "/v1/machines/demo", NULL, &status, &r, err, sizeof(err)) < 0) {
		fprintf(stderr, "berth up: %s\n", err);
		return -1;
	}
	json_decref(r);
	if (status == 404) {
		fprintf(stderr, "creating and booting machine demo…\n");
		body = json_pack("{s:s, s:s, s:b, s:b}", "name", "demo", "image", "tiny",
				 "start", 1, "wait", 1);
		status = cli_call(c, "POST", "/v1/machines", body, machine);
	} else {
		fprintf(stderr, "starting machine demo…\n");
		body = json_pack("{s:b}", "wait", 1);
		status = cli_call(c, "POST", "/v1/machines/demo/start", body, machine);
	}
	json_decref(body);
	if (status < 0)
		return -1;
	fprintf(stderr, "demo is ready (%.1f s)\n", (double)(mono_ms() - t0) / 1000.0);
	return 0;
}

static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
	got_signal = sig;
}

/* S, the value of option OPT, as a port into *PORT: 0, or -1 having said
 * why. */
static int port_arg(const char *opt, const char *s, int *port)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*end || v < 1 || v > 65535) {
		fprintf(stderr, "berth up: %s %s: expected 1 to 65535\n", opt, s);
		return -1;
	}
	*port = (int)v;
	return 0;
}

/* up and down start and stop this host's daemons: never a remote one's
 * machines through berth-web.  -1 having said so. */
static int local_only(const struct client *c, const char *cmd)
{
	if (!client_token(c))
		return 0;
	fprintf(stderr, "berth %s: starts and stops this host's berth; not with --url or "
		"BERTH_URL (%s): unset it\n", cmd, c->sock);
	return -1;
}

int cmd_up(struct client *c, int argc, char **argv)
{
	bool detach = false;
	json_t *m = NULL, *info = NULL;
	char pidfile[PATH_MAX], listen[64];
	int ssh_port = 2222, desktop_port = 6080;
	bool desktop_port_set = false;
	char desktop_url[64];

	if (local_only(c, "up") < 0)
		return 2;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--detach") || !strcmp(argv[i], "-d")) {
			detach = true;
		} else if (!strcmp(argv[i], "--ssh-port") && i + 1 < argc) {
			if (port_arg("--ssh-port", argv[++i], &ssh_port) < 0)
				return 2;
		} else if (!strcmp(argv[i], "--desktop-port") && i + 1 < argc) {
			if (port_arg("--desktop-port", argv[++i], &desktop_port) < 0)
				return 2;
			desktop_port_set = true;
		} else {
			fprintf(stderr, "usage: berth up [--state DIR] [--detach] [--ssh-port N] "
				"[--desktop-port N]\n");
			return 2;
		}
	}
	snprintf(listen, sizeof(listen), "0.0.0.0:%d", ssh_port);
	if (geteuid() != 0) {
		fprintf(stderr, "berth up: run as root (it starts libvirtd and the privileged hostd)\n");
		return 1;
	}
	/* --desktop-port names the port hostd's desktop URLs point at too
	 * (without it, berth.conf's desktop_url holds, default port 6080). */
	snprintf(desktop_url, sizeof(desktop_url), "http://127.0.0.1:%d", desktop_port);
	if (ensure_libvirtd(c) < 0 ||
	    ensure_hostd(c, desktop_port_set ? desktop_url : NULL) < 0 ||
	    check_desktop_url(c, desktop_port) < 0 || ensure_sshgw(c, listen, ssh_port) < 0)
		return 1;
	/* The desktop is not needed for the rest: without it (noVNC not
	 * installed, its port taken) berth runs on, and says so. */
	bool desktop_ok = ensure_desktop(c, desktop_port) == 0;
	if (!desktop_ok)
		fprintf(stderr, "berth up: going on without the desktop (berth desktop will "
			"not work)\n");
	/* Nor the dashboard (http_listen off or taken: another berth's).
	 * With http_listen off (hostd's info says no dashboard) berth-web
	 * has nothing to serve: not started, not waited for. */
	bool web_ok = false;
	if (cli_call(c, "GET", "/v1/info", NULL, &info) < 0)
		return 1;
	if (json_is_string(json_object_get(info, "dashboard")))
		web_ok = ensure_web(c) == 0;
	json_decref(info);
	info = NULL;
	if (ensure_image(c) < 0 || ensure_demo(c, &m) < 0 ||
	    cli_call(c, "GET", "/v1/info", NULL, &info) < 0) {
		json_decref(m);
		return 1;
	}
	json_t *ssh = json_object_get(m, "ssh");
	const char *host = json_string_value(json_object_get(ssh, "host"));
	long long port = (long long)json_integer_value(json_object_get(ssh, "port"));
	printf("\nberth is up: state %s, machines run under %s, storage %s.\n", c->state,
	       json_string_value(json_object_get(info, "hypervisor")),
	       json_string_value(json_object_get(json_object_get(info, "storage"), "backend")));
	printf("The machine 'demo' is running. Try:\n\n");
	printf("  bin/berth --state %s exec demo -- uname -a\n", c->state);
	printf("  bin/berth --state %s ls\n", c->state);
	printf("  bin/berth --state %s key add ~/.ssh/id_ed25519.pub   # once\n", c->state);
	printf("  ssh -p %d demo@localhost\n", ssh_port);
	if (desktop_ok)
		printf("  bin/berth --state %s desktop demo   # a one-time URL of its screen\n",
		       c->state);
	if (host)
		printf("  ssh -i %s/keys/gateway -p %lld -o StrictHostKeyChecking=no root@%s"
		       "   # straight to the VM\n", c->state, port, host);
	printf("  bin/berth --state %s down\n\n", c->state);
	const char *dash = json_string_value(json_object_get(info, "dashboard"));
	if (dash && web_ok)
		printf("Dashboard: %s  (log in with the token `bin/berth --state %s token create` "
		       "prints)\n\n", dash, c->state);
	else if (!dash)
		printf("No dashboard: http_listen is off in %s/berth.conf\n\n", c->state);
	else
		printf("No dashboard: berth-web could not serve %s (see %s/web.log)\n\n", dash,
		       c->state);
	json_decref(m);
	json_decref(info);
	if (detach)
		return 0;

	printf("Running in the foreground; Ctrl-C stops the machines and berth.\n");
	fflush(stdout);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	xsnprintf(pidfile, sizeof(pidfile), "%s/hostd.pid", c->state);
	while (!got_signal) {
		sleep(1);
		if (!pid_from_file(pidfile) && !client_alive(c)) {
			fprintf(stderr, "berth up: berth-hostd exited; see %s/hostd.log\n", c->state);
			return 1;
		}
	}
	fprintf(stderr, "\nstopping…\n");
	char *down[] = { "down", NULL };
	return cmd_down(c, 1, down);
}

static void stop_machines(struct client *c)
{
	json_t *r, *m;
	size_t i;

	if (cli_call(c, "GET", "/v1/machines", NULL, &r) < 0)
		return;
	json_array_foreach(json_object_get(r, "machines"), i, m) {
		const char *name = json_string_value(json_object_get(m, "name"));
		const char *state = json_string_value(json_object_get(m, "state"));
		char path[256];
		json_t *x;
		if (strcmp(state, "running") && strcmp(state, "paused"))
			continue;
		fprintf(stderr, "stopping %s…\n", name);
		snprintf(path, sizeof(path), "/v1/machines/%s/stop", name);
		if (cli_call(c, "POST", path, NULL, &x) == 0)
			json_decref(x);
	}
	json_decref(r);
}

static bool domains_running(void)
{
	struct buf out = BUF_INIT;
	char *const argv[] = { "virsh", "-q", "-c", "qemu:///system", "list", "--name", NULL };
	struct run_opts o = { .out = &out };
	bool any = true;

	if (run_argv(argv, &o, NULL) == 0)
		any = strspn(buf_str(&out), " \n") != out.len;
	buf_free(&out);
	return any;
}

/* True when a hostd holds STATE/hostd.lock (it does for its whole life). */
static bool hostd_holds_lock(const struct client *c)
{
	char path[PATH_MAX];
	int fd;
	bool held;

	xsnprintf(path, sizeof(path), "%s/hostd.lock", c->state);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return false;
	held = flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK;
	close(fd);
	return held;
}

static void stop_pid(const char *what, const char *pidfile)
{
	pid_t pid = pid_from_file(pidfile);

	if (!pid)
		return;
	fprintf(stderr, "stopping %s (pid %ld)…\n", what, (long)pid);
	kill(pid, SIGTERM);
	for (int i = 0; i < 100 && kill(pid, 0) == 0; i++)
		usleep(100 * 1000);
	if (kill(pid, 0) == 0)
		kill(pid, SIGKILL);
}

int cmd_down(struct client *c, int argc, char **argv)
{
	char path[PATH_MAX];

	(void)argv;
	if (local_only(c, "down") < 0)
		return 2;
	if (argc != 1) {
		fprintf(stderr, "usage: berth down [--state DIR]\n");
		return 2;
	}
	if (client_alive(c))
		stop_machines(c);
	/* A stale pid file must not make us kill whatever reused the pid. */
	xsnprintf(path, sizeof(path), "%s/sshgw.pid", c->state);
	if (pid_is(pid_from_file(path), "berth-sshgw"))
		stop_pid("berth-sshgw", path);
	xsnprintf(path, sizeof(path), "%s/desktop.pid", c->state);
	if (pid_is(pid_from_file(path), "berth-desktop"))
		stop_pid("berth-desktop", path);
	xsnprintf(path, sizeof(path), "%s/web.pid", c->state);
	if (pid_is(pid_from_file(path), "berth-web"))
		stop_pid("berth-web", path);
	xsnprintf(path, sizeof(path), "%s/hostd.pid", c->state);
	if (hostd_holds_lock(c))
		stop_pid("berth-hostd", path);
	xsnprintf(path, sizeof(path), "%s/libvirtd.started-by-up", c->state);
	if (access(path, F_OK) == 0) {
		pid_t ours = pid_from_file(path);
		if (!ours || ours != pid_from_file("/run/libvirtd.pid")) {
			fprintf(stderr, "leaving libvirtd running: berth up did not start this one\n");
		} else if (domains_running()) {
			fprintf(stderr, "leaving libvirtd running: other domains run on it\n");
		} else {
			stop_pid("libvirtd", "/run/libvirtd.pid");
			stop_pid("virtlogd", "/run/virtlogd.pid");
		}
		unlink(path);
	}
	printf("berth is down (state %s); machines keep their disks.\n", c->state);
	return 0;
}
