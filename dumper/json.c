/* SPDX-License-Identifier: MIT */
/*
 * dumper/json.c — a tiny streaming JSON writer (see json.h).  Output is
 * compact but newline-separated at the top levels so a human can still
 * grep it.
 */
#include "json.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

void hs_json_init(struct hs_json *j, FILE *out)
{
	memset(j, 0, sizeof *j);
	j->out = out;
}

static void put_escaped(FILE *out, const unsigned char *s, size_t n);

static void prefix(struct hs_json *j, const char *key)
{
	if (j->depth > 0 && j->depth <= HS_JSON_DEPTH) {
		if (j->need_comma[j->depth - 1])
			fputc(',', j->out);
		j->need_comma[j->depth - 1] = true;
		if (j->depth <= 2)
			fputc('\n', j->out);
	}
	if (key) {
		put_escaped(j->out, (const unsigned char *)key, strlen(key));
		fputc(':', j->out);
	}
}

static void open_(struct hs_json *j, const char *key, char c)
{
	prefix(j, key);
	fputc(c, j->out);
	if (j->depth < HS_JSON_DEPTH)
		j->need_comma[j->depth] = false;
	j->depth++;
}

static void close_(struct hs_json *j, char c)
{
	if (j->depth > 0)
		j->depth--;
	fputc(c, j->out);
	if (j->depth == 0)
		fputc('\n', j->out);
}

void hs_json_object(struct hs_json *j, const char *key) { open_(j, key, '{'); }
void hs_json_array(struct hs_json *j, const char *key) { open_(j, key, '['); }
void hs_json_end_object(struct hs_json *j) { close_(j, '}'); }
void hs_json_end_array(struct hs_json *j) { close_(j, ']'); }

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t len;
	uint32_t cp;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

static void put_escaped(FILE *out, const unsigned char *s, size_t n)
{
	fputc('"', out);
	for (size_t i = 0; i < n;) {
		unsigned char c = s[i];
		size_t len;
		if (c == '"' || c == '\\') {
			fputc('\\', out), fputc(c, out), i++;
		} else if (c == '\n') {
			fputs("\\n", out), i++;
		} else if (c == '\t') {
			fputs("\\t", out), i++;
		} else if (c < 0x20 || c == 0x7f) {
			fprintf(out, "\\u%04x", c), i++;
		} else if ((len = utf8_len(s + i, n - i)) == 0) {
			fputs("\\ufffd", out), i++;
		} else {
			fwrite(s + i, 1, len, out), i += len;
		}
	}
	fputc('"', out);
}

void hs_json_strn(struct hs_json *j, const char *key, const char *s, size_t n)
{
	prefix(j, key);
	if (!s)
		fputs("null", j->out);
	else
		put_escaped(j->out, (const unsigned char *)s, n);
}

void hs_json_str(struct hs_json *j, const char *key, const char *s)
{
	hs_json_strn(j, key, s, s ? strlen(s) : 0);
}

void hs_json_int(struct hs_json *j, const char *key, int64_t v)
{
	prefix(j, key);
	fprintf(j->out, "%" PRId64, v);
}

void hs_json_uint(struct hs_json *j, const char *key, uint64_t v)
{
	prefix(j, key);
	fprintf(j->out, "%" PRIu64, v);
}

void hs_json_double(struct hs_json *j, const char *key, double v)
{
	prefix(j, key);
	if (isfinite(v))
		fprintf(j->out, "%.3f", v);
	else
		fputs("null", j->out);
}

void hs_json_bool(struct hs_json *j, const char *key, bool v)
{
	prefix(j, key);
	fputs(v ? "true" : "false", j->out);
}

void hs_json_null(struct hs_json *j, const char *key)
{
	prefix(j, key);
	fputs("null", j->out);
}

void hs_json_hex(struct hs_json *j, const char *key, uint64_t v)
{
	prefix(j, key);
	fprintf(j->out, "\"0x%" PRIx64 "\"", v);
}
