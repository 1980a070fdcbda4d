/*
 * Unit tests of the MCP server's pure parts: berth-web's Origin rule for
 * /mcp (web/mcp.h, against DNS rebinding), and common/mcp.h's JSON-RPC
 * methods that call no hostd (initialize's version, ping, tools/list,
 * the errors), plus tools whose arguments are refused before any call and
 * one whose hostd cannot be reached (a socket path with nothing there).
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "common/mcp.h"
#include "web/mcp.h"
#include "tests/unit/tap.h"

static void test_origin(void)
{
	check(webmcp_origin_ok("http://127.0.0.1:8080", "127.0.0.1:8080", false, NULL),
	      "the server's own origin, an IPv4 address");
	check(webmcp_origin_ok("http://[::1]:8080", "[::1]:8080", false, NULL), "  an IPv6 one");
	check(webmcp_origin_ok("http://LOCALHOST:8080", "localhost:8080", false, NULL),
	      "  localhost, in any case");
	check(webmcp_origin_ok("https://berth.example:443", "berth.example:443", true,
			       "berth.example"), "  the preview domain, with TLS");
	check(webmcp_origin_ok("http://127.0.0.1", "127.0.0.1", false, NULL), "  without a port");
	check(!webmcp_origin_ok("http://evil.example:8080", "evil.example:8080", false, NULL),
	      "a rebound name in Origin and Host: refused");
	check(!webmcp_origin_ok("http://evil.example:8080", "evil.example:8080", false,
				"berth.example"), "  also with a preview domain");
	check(!webmcp_origin_ok("http://evil.example", "127.0.0.1:8080", false, NULL),
	      "another site's page: refused");
	check(!webmcp_origin_ok("https://127.0.0.1:8080", "127.0.0.1:8080", false, NULL),
	      "https for an http server: refused");
	check(!webmcp_origin_ok("http://127.0.0.1:8080", "127.0.0.1:8080", true, NULL),
	      "http for an https server: refused");
	check(!webmcp_origin_ok("null", "127.0.0.1:8080", false, NULL), "Origin null: refused");
	check(!webmcp_origin_ok("http://127.0.0.1:8081", "127.0.0.1:8080", false, NULL),
	      "another port: refused");
	check(!webmcp_origin_ok("http://127.0.0.1:8080", NULL, false, NULL), "no Host: refused");
	check(!webmcp_origin_ok("http://127.0.0.1:80x", "127.0.0.1:80x", false, NULL),
	      "a port that is no number: refused");
	check(!webmcp_origin_ok("http://[::1", "[::1", false, NULL), "a broken [v6]: refused");
	check(!webmcp_origin_ok("http://1.2.3.4.evil:80", "1.2.3.4.evil:80", false, NULL),
	      "a name that begins like an address: refused");
}

/* The answer to the JSON text MSG (NULL: none), as compact JSON into OUT. */
static void answer(const struct mcp_host *h, const char *msg, char *out, size_t len)
{
	json_t *m = json_loads(msg, 0, NULL), *a = mcp_answer(h, m);
	char *s = a ? json_dumps(a, JSON_COMPACT | JSON_SORT_KEYS) : NULL;

	snprintf(out, len, "%s", s ? s : "(none)");
	free(s);
	json_decref(a);
	json_decref(m);
}

static void test_methods(void)
{
	struct mcp_host h = { .sock = "/nonexistent/berth-test.sock" };
	char out[65536];

	answer(&h, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
		   "{\"protocolVersion\":\"2025-06-18\"}}", out, sizeof(out));
	check(strstr(out, "\"protocolVersion\":\"2025-06-18\"") != NULL,
	      "initialize: the version the client asked for");
	answer(&h, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":"
		   "{\"protocolVersion\":\"1999-01-01\"}}", out, sizeof(out));
	check(strstr(out, "\"protocolVersion\":\"2025-11-25\"") != NULL,
	      "  one it does not speak: its newest");
	check(mcp_version_known("2025-06-18") && mcp_version_known("2024-11-05") &&
	      !mcp_version_known("2025-06-19") && !mcp_version_known(NULL),
	      "mcp_version_known: the four versions, nothing else");
	answer(&h, "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}", out, sizeof(out));
	check(!strcmp(out, "{\"id\":\"p\",\"jsonrpc\":\"2.0\",\"result\":{}}"), "ping: {}");
	answer(&h, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}", out, sizeof(out));
	int n = 0;
	for (const char *p = out; (p = strstr(p, "\"inputSchema\"")); p++)
		n++;
	check(n == 14, "tools/list: 14 tools, each with a schema");
	answer(&h, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", out,
	       sizeof(out));
	check(!strcmp(out, "(none)"), "a notification: no answer");
	answer(&h, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}", out, sizeof(out));
	check(!strcmp(out, "(none)"), "a client's answer: none");
	answer(&h, "[{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}]", out, sizeof(out));
	check(strstr(out, "\"code\":-32600") && strstr(out, "\"id\":null"),
	      "a batch: -32600, id null");
	answer(&h, "{\"jsonrpc\":\"2.0\",\"id\":5}", out, sizeof(out));
	check(strstr(out, "\"code\":-32600") && strstr(out, "\"id\":5"), "no method: -32600");
	answer(&h, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"resources/list\"}", out,
	       sizeof(out));
	check(strstr(out, "\"code\":-32601") != NULL, "an unknown method: -32601");
	answer(&h, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":"
		   "{\"name\":\"format_disk\"}}", out, sizeof(out));
	check(strstr(out, "\"code\":-32602") && strstr(out, "no tool 'format_disk'"),
	      "an unknown tool: -32602 naming it");
	answer(&h, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":"
		   "{\"name\":\"exec\",\"arguments\":[]}}", out, sizeof(out));
	check(strstr(out, "\"code\":-32602") != NULL, "arguments not an object: -32602");
	answer(&h, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":"
		   "{\"name\":\"exec\",\"arguments\":{\"machine\":\"Bad_Name\",\"command\":\"true\"}}}",
	       out, sizeof(out));
	check(strstr(out, "\"isError\":true") && strstr(out, "not a machine's name"),
	      "exec in a bad name: an error result, before any call");
	answer(&h, "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tools/call\",\"params\":"
		   "{\"name\":\"list_machines\"}}", out, sizeof(out));
	check(strstr(out, "\"isError\":true") && strstr(out, "cannot reach berth-hostd"),
	      "no hostd: an error result saying so");
}

int main(void)
{
	test_origin();
	test_methods();
	return tap_done("test_web_mcp");
}
