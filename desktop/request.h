/* berth-desktop's reading of a viewer's HTTP request head (desktop/main.c
 * serves it): the request line, the /ws/USER/NAME path, the query's token
 * and resume key.  Pure: no I/O, no allocation; the strings are cut in
 * place.  The bytes are a stranger's: anything may come. */
#ifndef BERTH_DESKTOP_REQUEST_H
#define BERTH_DESKTOP_REQUEST_H

#include <stdbool.h>
#include <stddef.h>

/* HEAD (NUL-terminated) starts "GET TARGET VERSION": TARGET, ended in
 * place with a NUL.  NULL for another method or no second space. */
char *request_target(char *head);

/* Split REST, what follows "/ws/" in a target ("USER/NAME[?QUERY]"), in
 * place: *USER, *NAME and *QUERY (NULL when there is none).  False when
 * there is no NAME or USER or NAME is not valid (user_name_valid,
 * name_valid). */
bool request_ws_split(char *rest, char **user, char **name, char **query);

/* The value of the parameter KEY in QUERY ("a=1&b=2", may be NULL),
 * copied to OUT (OUTLEN bytes).  False when KEY is absent or its value
 * does not fit. */
bool request_query_get(const char *query, const char *key, char *out, size_t outlen);

/* Whether T looks like a token or resume key: 1 to 60 of a-z, A-Z, 0-9,
 * '-' and '_'. */
bool request_token_ok(const char *t);

#endif
