/* SPDX-License-Identifier: MIT */
/*
 * dumper/json.h — a tiny streaming JSON writer.
 *
 * Enough for one report: nested objects and arrays, commas placed for the
 * caller, strings escaped, and bytes that are not valid UTF-8 (argv and
 * paths come from shared memory) replaced by U+FFFD so the output always
 * parses.  key is NULL for values inside arrays.
 */
#ifndef HEISEN_DUMPER_JSON_H
#define HEISEN_DUMPER_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define HS_JSON_DEPTH 32

struct hs_json {
	FILE *out;
	int depth;
	bool need_comma[HS_JSON_DEPTH];
};

void hs_json_init(struct hs_json *j, FILE *out);
void hs_json_object(struct hs_json *j, const char *key);  /* opens { */
void hs_json_array(struct hs_json *j, const char *key);   /* opens [ */
void hs_json_end_object(struct hs_json *j);
void hs_json_end_array(struct hs_json *j);
void hs_json_str(struct hs_json *j, const char *key, const char *s);   /* NULL: null */
void hs_json_strn(struct hs_json *j, const char *key, const char *s, size_t n);
void hs_json_int(struct hs_json *j, const char *key, int64_t v);
void hs_json_uint(struct hs_json *j, const char *key, uint64_t v);
void hs_json_double(struct hs_json *j, const char *key, double v);    /* not finite: null */
void hs_json_bool(struct hs_json *j, const char *key, bool v);
void hs_json_null(struct hs_json *j, const char *key);
void hs_json_hex(struct hs_json *j, const char *key, uint64_t v);     /* "0x1f" */

#endif
