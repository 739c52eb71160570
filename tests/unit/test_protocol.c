/*
 * test_protocol.c - agent control messages: round trips of every field type,
 * builder limits, strict decoding of malformed frames, the bounds on an
 * agent's numbers, typed requests (gs_request) through their frames, and a
 * mutation fuzz
 * that must never crash or read out of bounds (run it under ASan too).
 */
#include <math.h>
#include <stdlib.h>

#include "core/protocol.h"
#include "test.h"

static uint64_t rng_state = 0xda942042e4dd58b5ULL;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* A copy of m's frame (caller frees). */
static uint8_t *frame_of(struct gs_msg *m, size_t *len)
{
	const void *f;
	struct gs_err err = { 0 };
	if (gs_msg_finish(m, &f, len, &err))
		return NULL;
	uint8_t *copy = malloc(*len);
	memcpy(copy, f, *len);
	return copy;
}

static void build_rich(struct gs_msg *m)
{
	gs_msg_init(m, GS_MSG_RESULT);
	gs_msg_add_u64(m, GS_F_CODE, 0);
	gs_msg_add_str(m, GS_F_MESSAGE, "suspended 8.00 GiB in 0.21 s");
	gs_msg_add_named_f64(m, GS_F_TIMING, "quiesce", 0.0125);
	gs_msg_add_named_f64(m, GS_F_TIMING, "copy_out", 0.19);
	gs_msg_add_named_u64(m, GS_F_COUNTER, "bytes_copied", 8ULL << 30);
	gs_msg_add_u64(m, 999, 7); /* a tag from the future */
	gs_msg_add_bytes(m, 1000, "\0\1\2", 3);
	gs_msg_add_str(m, GS_F_DIR, "");
	gs_msg_add_f64(m, GS_F_TIMEOUT, -0.0);
	gs_msg_add_bytes(m, 1001, NULL, 0);
	gs_msg_add_u64(m, GS_F_CODE, 5); /* a repeated tag: getters see the first */
}

static void test_round_trip(void)
{
	struct gs_msg m, d;
	struct gs_err err = { 0 };
	build_rich(&m);
	size_t len;
	uint8_t *f = frame_of(&m, &len);
	CHECK(f != NULL);
	/* header: magic, version, type, payload length */
	CHECK(f[0] == 'G' && f[1] == 'S' && f[2] == 'N' && f[3] == 'P');
	CHECK(f[4] == GS_PROTO_VERSION && f[5] == 0 && f[6] == GS_MSG_RESULT && f[7] == 0);
	CHECK((size_t)(f[8] | f[9] << 8 | f[10] << 16 | f[11] << 24) == len - GS_MSG_HEADER_SIZE);

	CHECK_INT(gs_msg_decode(f, len, GS_PEER_AGENT, &d, &err), 0);
	CHECK_INT(d.type, GS_MSG_RESULT);
	CHECK_INT(gs_msg_field_count(&d), 11);
	uint64_t u;
	double x;
	const void *b;
	size_t blen;
	CHECK(gs_msg_get_u64(&d, GS_F_CODE, &u) && u == 0);
	CHECK_STR(gs_msg_get_str(&d, GS_F_MESSAGE), "suspended 8.00 GiB in 0.21 s");
	CHECK_STR(gs_msg_get_str(&d, GS_F_DIR), "");
	CHECK(gs_msg_get_named_f64(&d, GS_F_TIMING, "copy_out", &x) && x == 0.19);
	CHECK(gs_msg_get_named_f64(&d, GS_F_TIMING, "quiesce", &x) && x == 0.0125);
	CHECK(!gs_msg_get_named_f64(&d, GS_F_TIMING, "copy", &x));
	CHECK(gs_msg_get_named_u64(&d, GS_F_COUNTER, "bytes_copied", &u) && u == 8ULL << 30);
	CHECK(!gs_msg_get_named_u64(&d, GS_F_TIMING, "quiesce", &u)); /* wrong type */
	CHECK(gs_msg_get_u64(&d, 999, &u) && u == 7);
	CHECK(gs_msg_get_bytes(&d, 1000, &b, &blen) && blen == 3 && !memcmp(b, "\0\1\2", 3));
	CHECK(gs_msg_get_bytes(&d, 1001, &b, &blen) && blen == 0);
	CHECK(gs_msg_get_f64(&d, GS_F_TIMEOUT, &x) && x == 0 && signbit(x));
	CHECK(!gs_msg_get_str(&d, GS_F_VERSION));
	CHECK(!gs_msg_get_u64(&d, GS_F_MESSAGE, &u)); /* a string is not a number */
	/* iteration lists every timing in order */
	int timings = 0;
	struct gs_msg_field fld;
	for (size_t i = 0; gs_msg_field_at(&d, i, &fld); i++)
		if (fld.tag == GS_F_TIMING) {
			CHECK_STR(fld.name, timings ? "copy_out" : "quiesce");
			timings++;
		}
	CHECK_INT(timings, 2);
	CHECK_INT(gs_msg_result_code(&d, &err), GS_OK);
	/* re-encoding the decoded message gives the same bytes */
	size_t len2;
	uint8_t *f2 = frame_of(&d, &len2);
	CHECK(len2 == len && !memcmp(f, f2, len));
	free(f2);
	free(f);
	gs_msg_free(&d);
	gs_msg_free(&m);

	/* a message without fields */
	gs_msg_init(&m, GS_MSG_STATUS);
	f = frame_of(&m, &len);
	CHECK_INT(len, GS_MSG_HEADER_SIZE);
	CHECK_INT(gs_msg_decode(f, len, GS_PEER_CLI, &d, &err), 0);
	CHECK_INT(d.type, GS_MSG_STATUS);
	CHECK_INT(gs_msg_field_count(&d), 0);
	free(f);
	gs_msg_free(&d);
	gs_msg_free(&m);
}

static void test_results_and_names(void)
{
	struct gs_msg m;
	struct gs_err err = { 0 };
	gs_msg_init(&m, GS_MSG_RESULT);
	gs_msg_set_result(&m, GS_E_TIMEOUT, "quiesce took longer than %.1f s", 5.0);
	CHECK_INT(gs_msg_result_code(&m, &err), GS_E_TIMEOUT);
	CHECK_STR(err.msg, "quiesce took longer than 5.0 s");
	gs_msg_free(&m);
	gs_msg_init(&m, GS_MSG_INFO);
	CHECK_INT(gs_msg_result_code(&m, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "info message without a result code");
	gs_msg_free(&m);
	CHECK_STR(gs_msg_type_name(GS_MSG_SUSPEND), "suspend");
	CHECK_STR(gs_msg_type_name(77), "unknown");
	CHECK_STR(gs_agent_state_name(GS_AGENT_DATA_RELEASED), "data-released");
	CHECK_STR(gs_agent_state_name(GS_AGENT_GATED), "gated");
	CHECK_STR(gs_msg_type_name(GS_MSG_GATE), "gate");
	CHECK_STR(gs_msg_type_name(GS_MSG_OPEN), "open");
	CHECK_STR(gs_msg_type_name(GS_MSG_PREPARE), "prepare");
}

static void test_builder_limits(void)
{
	struct gs_msg m;
	struct gs_err err = { 0 };
	const void *f;
	size_t len;
	gs_msg_init(&m, GS_MSG_RESULT);
	gs_msg_add_named_f64(&m, GS_F_TIMING, "Copy Out", 1.0);
	CHECK_INT(gs_msg_finish(&m, &f, &len, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "invalid field name");
	gs_msg_free(&m);

	gs_msg_init(&m, GS_MSG_RESULT);
	char name[80];
	memset(name, 'a', sizeof(name));
	name[GS_MSG_MAX_NAME] = '\0';
	gs_msg_add_named_u64(&m, GS_F_COUNTER, name, 1); /* 63 characters: fine */
	CHECK_INT(gs_msg_finish(&m, &f, &len, &err), 0);
	name[GS_MSG_MAX_NAME] = 'a';
	name[GS_MSG_MAX_NAME + 1] = '\0';
	gs_msg_add_named_u64(&m, GS_F_COUNTER, name, 1); /* 64: too long */
	CHECK_INT(gs_msg_finish(&m, &f, &len, &err), GS_E_FAILURE);
	gs_msg_free(&m);

	gs_msg_init(&m, GS_MSG_INFO);
	size_t big = GS_MSG_MAX_PAYLOAD - 8 - 16;
	char *data = calloc(1, GS_MSG_MAX_PAYLOAD + 1);
	gs_msg_add_bytes(&m, GS_F_UNMANAGED_DETAIL, data, big);
	gs_msg_add_u64(&m, GS_F_PID, 1); /* exactly at the limit */
	CHECK_INT(gs_msg_finish(&m, &f, &len, &err), 0);
	CHECK(len == GS_MSG_HEADER_SIZE + GS_MSG_MAX_PAYLOAD);
	struct gs_msg d;
	CHECK_INT(gs_msg_decode(f, len, GS_PEER_AGENT, &d, &err), 0);
	gs_msg_free(&d);
	gs_msg_add_u64(&m, GS_F_PID, 1); /* one field too many */
	CHECK_INT(gs_msg_finish(&m, &f, &len, &err), GS_E_FAILURE);
	CHECK_CONTAINS(err.msg, "larger than the protocol allows");
	gs_msg_free(&m);
	gs_msg_init(&m, GS_MSG_INFO);
	gs_msg_add_bytes(&m, 1, data, GS_MSG_MAX_PAYLOAD + 1);
	CHECK_INT(gs_msg_finish(&m, &f, &len, &err), GS_E_FAILURE);
	gs_msg_free(&m);
	free(data);
}

/* Little-endian helpers to forge frames. */
static void w16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void w32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }

/* A frame with one field of the given type and raw value. */
static size_t forge(uint8_t *buf, uint8_t type, const void *value, uint32_t vlen, uint32_t claimed)
{
	w32(buf, GS_PROTO_MAGIC);
	w16(buf + 4, GS_PROTO_VERSION);
	w16(buf + 6, GS_MSG_RESULT);
	w32(buf + 8, 8 + vlen);
	w32(buf + 12, 0);
	w16(buf + 16, 14);
	buf[18] = type;
	buf[19] = 0;
	w32(buf + 20, claimed);
	memcpy(buf + 24, value, vlen);
	return 24 + vlen;
}

static void test_malformed(void)
{
	struct gs_msg d;
	struct gs_err err = { 0 };
	uint8_t buf[256] = { 0 };
	size_t n;

	CHECK_INT(gs_msg_decode(buf, 10, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "truncated message (10 bytes)");

	n = forge(buf, GS_FT_U64, "12345678", 8, 8);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), 0);
	gs_msg_free(&d);

	buf[0] = 'X';
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "not a gpusnap message");
	buf[0] = 'G';

	w16(buf + 4, 2);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	CHECK_STR(err.msg, "agent speaks protocol 2, gpusnap speaks 1");
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_CLI, &d, &err), GS_E_AGENT);
	CHECK_STR(err.msg, "gpusnap speaks protocol 2, agent speaks 1");
	w16(buf + 4, GS_PROTO_VERSION);

	w32(buf + 8, 0xffffffffu);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "more than the");
	uint32_t plen;
	CHECK_INT(gs_msg_parse_header(buf, GS_PEER_AGENT, &plen, &err), GS_E_AGENT);
	w32(buf + 8, 9);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "whose header says 9");
	CHECK_INT(gs_msg_parse_header(buf, GS_PEER_AGENT, &plen, &err), 0);
	CHECK_INT(plen, 9);

	/* a field running past the end, a truncated field header */
	n = forge(buf, GS_FT_BYTES, "abc", 3, 4);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "past its end");
	n = forge(buf, GS_FT_BYTES, "abc", 3, 3);
	w32(buf + 8, 8 + 3 + 5);
	memset(buf + n, 0, 5);
	CHECK_INT(gs_msg_decode(buf, n + 5, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "truncated field");
	/* values that break their type's rules */
	n = forge(buf, GS_FT_U64, "1234", 4, 4);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "wrong size");
	n = forge(buf, GS_FT_STR, "abc", 3, 3);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "unterminated");
	n = forge(buf, GS_FT_STR, "a\0b", 4, 4);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "embedded NUL");
	n = forge(buf, GS_FT_STR, "", 0, 0);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	n = forge(buf, GS_FT_NAMED_F64, "Xy\0" "12345678", 11, 11);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	n = forge(buf, GS_FT_NAMED_F64, "xy" "12345678", 10, 10);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	n = forge(buf, GS_FT_NAMED_F64, "\0" "12345678", 9, 9);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	n = forge(buf, GS_FT_NAMED_F64, "x\0" "1234567", 9, 9);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), GS_E_AGENT);
	n = forge(buf, GS_FT_NAMED_U64, "x\0" "\x01\0\0\0\0\0\0\0", 10, 10);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), 0);
	gs_msg_free(&d);
	/* an unknown field type is skipped whatever it holds */
	n = forge(buf, 42, "\xff\0\xff", 3, 3);
	CHECK_INT(gs_msg_decode(buf, n, GS_PEER_AGENT, &d, &err), 0);
	CHECK_INT(gs_msg_field_count(&d), 1);
	CHECK(!gs_msg_get_str(&d, 14));
	gs_msg_free(&d);
}

/* msg encoded, then decoded as the agent's (rc returned, message in err) and as gpusnap's (always accepted). */
static int decode_from_agent(struct gs_msg *m, struct gs_err *err)
{
	size_t len;
	uint8_t *f = frame_of(m, &len);
	struct gs_msg d;
	int rc = gs_msg_decode(f, len, GS_PEER_AGENT, &d, err);
	gs_msg_free(&d);
	struct gs_err e = { 0 };
	CHECK_INT(gs_msg_decode(f, len, GS_PEER_CLI, &d, &e), 0);
	gs_msg_free(&d);
	free(f);
	gs_msg_free(m);
	return rc;
}

/* Absurd numbers from an agent (negative times, 2^64-1 byte counts, PID 0) are a malformed message. */
static void test_agent_numbers_bounded(void)
{
	struct gs_msg m;
	struct gs_err err = { 0 };
	/* in bounds, to the limit */
	gs_msg_init(&m, GS_MSG_RESULT);
	gs_msg_add_u64(&m, GS_F_CODE, 0);
	gs_msg_add_named_f64(&m, GS_F_TIMING, "copy_out", 0);
	gs_msg_add_named_f64(&m, GS_F_TIMING, "quiesce", GS_MSG_MAX_SECONDS);
	gs_msg_add_named_u64(&m, GS_F_COUNTER, "bytes", GS_MSG_MAX_AMOUNT);
	gs_msg_add_u64(&m, GS_F_STATE, 77); /* a state of a later version: named "unknown", not refused */
	CHECK_INT(decode_from_agent(&m, &err), 0);
	gs_msg_init(&m, GS_MSG_INFO);
	gs_msg_add_u64(&m, GS_F_PID, GS_MSG_MAX_PID);
	gs_msg_add_u64(&m, GS_F_ALLOC_COUNT, 3);
	gs_msg_add_u64(&m, GS_F_ALLOC_BYTES, GS_MSG_MAX_AMOUNT);
	CHECK_INT(decode_from_agent(&m, &err), 0);

	static const double bad_times[] = { -1.0, -1e-9, 1e8, INFINITY, -INFINITY, NAN };
	for (size_t i = 0; i < sizeof(bad_times) / sizeof(bad_times[0]); i++) {
		gs_msg_init(&m, GS_MSG_RESULT);
		gs_msg_add_u64(&m, GS_F_CODE, 0);
		gs_msg_add_named_f64(&m, GS_F_TIMING, "copy_out", bad_times[i]);
		CHECK_INT(decode_from_agent(&m, &err), GS_E_AGENT);
		CHECK_CONTAINS(err.msg, "agent sent a result message with a bad field 15: 'copy_out' is ");
		CHECK_CONTAINS(err.msg, "not a time from 0 to 1e+07 s");
	}
	gs_msg_init(&m, GS_MSG_RESULT);
	gs_msg_add_f64(&m, 77, -3); /* any time, whatever its tag */
	CHECK_INT(decode_from_agent(&m, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "-3 s, not a time");

	gs_msg_init(&m, GS_MSG_RESULT);
	gs_msg_add_named_u64(&m, GS_F_COUNTER, "bytes", UINT64_MAX);
	CHECK_INT(decode_from_agent(&m, &err), GS_E_AGENT);
	CHECK_STR(err.msg, "agent sent a result message with a bad field 16: 'bytes' is 18446744073709551615, more than a "
		  "process can hold (2^57)");
	static const uint16_t amounts[] = { GS_F_ALLOC_COUNT, GS_F_ALLOC_BYTES, GS_F_UNMANAGED_COUNT, GS_F_UNMANAGED_BYTES };
	for (size_t i = 0; i < sizeof(amounts) / sizeof(amounts[0]); i++) {
		gs_msg_init(&m, GS_MSG_INFO);
		gs_msg_add_u64(&m, amounts[i], GS_MSG_MAX_AMOUNT + 1);
		CHECK_INT(decode_from_agent(&m, &err), GS_E_AGENT);
		CHECK_CONTAINS(err.msg, "more than a process can hold");
	}
	gs_msg_init(&m, GS_MSG_INFO);
	gs_msg_add_u64(&m, GS_F_PID, 0);
	CHECK_INT(decode_from_agent(&m, &err), GS_E_AGENT);
	CHECK_CONTAINS(err.msg, "process id 0, not one from 1 to 4194304");
	gs_msg_init(&m, GS_MSG_INFO);
	gs_msg_add_u64(&m, GS_F_PID, (uint64_t)GS_MSG_MAX_PID + 1);
	CHECK_INT(decode_from_agent(&m, &err), GS_E_AGENT);
	/* a tag this version does not bound (the code is checked where it is read) */
	gs_msg_init(&m, GS_MSG_RESULT);
	gs_msg_add_u64(&m, GS_F_CODE, UINT64_MAX);
	CHECK_INT(decode_from_agent(&m, &err), 0);
}

/* Reads every field of a decoded message the way a consumer would. */
static void touch_all(const struct gs_msg *d)
{
	struct gs_msg_field f;
	volatile size_t sum = 0;
	for (size_t i = 0; gs_msg_field_at(d, i, &f); i++) {
		if (f.str)
			sum += strlen(f.str);
		if (f.name)
			sum += strlen(f.name);
		for (size_t k = 0; k < f.len; k++)
			sum += ((const uint8_t *)f.data)[k];
	}
	(void)sum;
}

static void test_fuzz(void)
{
	struct gs_msg m, d;
	struct gs_err err = { 0 };
	build_rich(&m);
	size_t len;
	uint8_t *good = frame_of(&m, &len);
	gs_msg_free(&m);
	uint8_t *buf = malloc(len + 64);
	int accepted = 0;
	for (int iter = 0; iter < 100000; iter++) {
		memcpy(buf, good, len);
		size_t n = len;
		int edits = 1 + (int)(rnd() % 4);
		for (int e = 0; e < edits; e++) {
			switch (rnd() % 5) {
			case 0: if (n) buf[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8)); break;
			case 1: if (n) buf[rnd() % n] = (uint8_t)rnd(); break;
			case 2: n = rnd() % (n + 1); break;
			case 3: /* a field length or the payload length set to something big */
				w32(buf + (rnd() % 2 ? 8 : 20 + 8 * (rnd() % 4)) % (n > 4 ? n - 4 : 1),
				    (uint32_t)(rnd() % 3 ? rnd() % 100 : rnd()));
				break;
			default: /* grow with junk, payload length kept consistent half the time */
				if (n + 16 <= len + 64) {
					for (int k = 0; k < 16; k++)
						buf[n + k] = (uint8_t)rnd();
					n += 16;
					if (rnd() % 2 && n >= GS_MSG_HEADER_SIZE)
						w32(buf + 8, (uint32_t)(n - GS_MSG_HEADER_SIZE));
				}
			}
		}
		/* a decoder reading past n would be caught by ASan: give it an exact-size copy */
		uint8_t *exact = malloc(n ? n : 1);
		memcpy(exact, buf, n);
		int rc = gs_msg_decode(exact, n, GS_PEER_AGENT, &d, &err);
		if (rc == 0) {
			accepted++;
			touch_all(&d);
		} else {
			CHECK(err.msg[0] != '\0');
		}
		gs_msg_free(&d);
		free(exact);
	}
	/* pure noise behind a valid header */
	for (int iter = 0; iter < 20000; iter++) {
		size_t n = GS_MSG_HEADER_SIZE + rnd() % 48;
		for (size_t k = 0; k < n; k++)
			buf[k] = (uint8_t)rnd();
		w32(buf, GS_PROTO_MAGIC);
		w16(buf + 4, GS_PROTO_VERSION);
		w32(buf + 8, (uint32_t)(n - GS_MSG_HEADER_SIZE));
		uint8_t *exact = malloc(n);
		memcpy(exact, buf, n);
		if (gs_msg_decode(exact, n, GS_PEER_CLI, &d, &err) == 0) {
			accepted++;
			touch_all(&d);
		}
		gs_msg_free(&d);
		free(exact);
	}
	printf("     fuzz: %d of 120000 mutated frames accepted, none crashed\n", accepted);
	free(buf);
	free(good);
}

/* A request through its frame: encoded, checked as the agent checks it, decoded back. */
static void request_trip(const struct gs_request *in, struct gs_request *out, uint64_t *flags, struct gs_msg *d)
{
	struct gs_msg m;
	gs_request_encode(in, &m);
	size_t len = 0;
	uint8_t *f = frame_of(&m, &len);
	CHECK(f != NULL);
	struct gs_err err = { 0 };
	CHECK_INT(gs_msg_decode(f, len, GS_PEER_CLI, d, &err), 0);
	CHECK_INT(gs_msg_check_request(d, &err), 0);
	*flags = 0;
	CHECK(gs_msg_get_u64(d, GS_F_FLAGS, flags));
	gs_request_decode(d, out);
	free(f);
	gs_msg_free(&m);
}

static void test_requests(void)
{
	struct gs_request out;
	uint64_t flags;
	struct gs_msg d;
	/* the dump options are the DUMP's flags, each its own bit, and come back as they went */
	struct gs_request dump = { .type = GS_MSG_DUMP, .timeout_s = 12.5, .dir = "/img/gpu",
				   .dump = { .running = true, .cached = true } };
	request_trip(&dump, &out, &flags, &d);
	CHECK_INT(flags, GS_DUMP_RUNNING | GS_DUMP_CACHED);
	CHECK_INT(out.type, GS_MSG_DUMP);
	CHECK(out.timeout_s == 12.5);
	CHECK_STR(out.dir, "/img/gpu");
	CHECK(out.dump.running && out.dump.cached && !out.dump.drop_staging);
	CHECK(!out.keep_context && !out.stay_gated);
	gs_msg_free(&d);
	struct gs_request save = { .type = GS_MSG_DUMP, .dir = "d", .dump = { .drop_staging = true } };
	request_trip(&save, &out, &flags, &d);
	CHECK_INT(flags, GS_DUMP_DROP_STAGING);
	CHECK(!out.dump.running && !out.dump.cached && out.dump.drop_staging);
	gs_msg_free(&d);
	/* a member of another type is not sent: a SUSPEND's flags are its own */
	struct gs_request sus = { .type = GS_MSG_SUSPEND, .keep_context = true, .stay_gated = true,
				  .dump = { .running = true } };
	request_trip(&sus, &out, &flags, &d);
	CHECK_INT(flags, GS_SUSPEND_KEEP_CONTEXT);
	CHECK(out.keep_context && !out.stay_gated && !out.dump.running);
	CHECK(out.dir == NULL);
	gs_msg_free(&d);
	struct gs_request res = { .type = GS_MSG_RESUME_FD, .stay_gated = true };
	request_trip(&res, &out, &flags, &d);
	CHECK_INT(flags, GS_RESUME_STAY_GATED);
	CHECK(out.stay_gated);
	gs_msg_free(&d);
	/* a lease only when there is one; a request without a timeout gets the default */
	struct gs_request gate = { .type = GS_MSG_GATE, .timeout_s = 3, .lease_s = 7 };
	request_trip(&gate, &out, &flags, &d);
	CHECK(out.lease_s == 7 && out.timeout_s == 3);
	gs_msg_free(&d);
	struct gs_msg bare;
	gs_msg_init(&bare, GS_MSG_OPEN);
	gs_request_decode(&bare, &out);
	CHECK(out.type == GS_MSG_OPEN && out.timeout_s == GS_REQUEST_DEFAULT_TIMEOUT_S && out.lease_s == 0);
	CHECK(out.dir == NULL && !out.dump.running);
	gs_msg_free(&bare);
}

int main(void)
{
	RUN(test_round_trip);
	RUN(test_results_and_names);
	RUN(test_builder_limits);
	RUN(test_malformed);
	RUN(test_agent_numbers_bounded);
	RUN(test_fuzz);
	RUN(test_requests);
	return TEST_SUMMARY();
}
