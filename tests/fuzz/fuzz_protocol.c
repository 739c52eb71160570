/*
 * fuzz_protocol.c - libFuzzer harness for the control protocol's decoder
 * (src/core/protocol.c: gs_msg_parse_header, gs_msg_decode and the getters),
 * what gpusnap and the agent run on every frame the other side sends.
 *
 * Input: one flags byte, then a frame. Flag bit 0 picks the peer the frame
 * is from; bit 1 repairs the header (magic, version, payload length) after
 * mutation, so the fuzzer spends its time on the fields rather than on a
 * length that no longer matches.
 *
 * Properties: a refused frame gets GS_E_AGENT and a message; an accepted one
 * yields fields inside the frame whose getters agree with the field list,
 * and, when every field is of a known type, the builders turn those fields
 * back into the same bytes (reserved bytes aside): the encoder and the
 * decoder agree on the format.
 */
#include <math.h>
#include <string.h>

#include "core/protocol.h"
#include "fuzz.h"

#define FLAG_FROM_CLI 0x1u
#define FLAG_FIX_HEADER 0x2u

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static int same_f64(double a, double b)
{
	return !memcmp(&a, &b, sizeof(a));
}

/* Every getter's answer matches the first field of that tag and type in the list. */
static void check_getters(const struct gs_msg *m)
{
	size_t n = gs_msg_field_count(m);
	for (size_t i = 0; i < n; i++) {
		struct gs_msg_field f;
		FUZZ_ASSERT(gs_msg_field_at(m, i, &f));
		FUZZ_ASSERT((const uint8_t *)f.data >= m->buf + GS_MSG_HEADER_SIZE &&
			    (const uint8_t *)f.data + f.len <= m->buf + m->len);
		struct gs_msg_field first;
		size_t k = 0;
		for (;; k++) {
			FUZZ_ASSERT(gs_msg_field_at(m, k, &first));
			if (first.tag == f.tag && first.type == f.type)
				break;
		}
		uint64_t u;
		double d;
		const void *data;
		size_t len;
		switch (f.type) {
		case GS_FT_U64:
			FUZZ_ASSERT(gs_msg_get_u64(m, f.tag, &u) && u == first.u64);
			break;
		case GS_FT_F64:
			FUZZ_ASSERT(gs_msg_get_f64(m, f.tag, &d) && same_f64(d, first.f64));
			break;
		case GS_FT_STR:
			FUZZ_ASSERT(gs_msg_get_str(m, f.tag) == first.str && strlen(f.str) == f.len);
			break;
		case GS_FT_BYTES:
			FUZZ_ASSERT(gs_msg_get_bytes(m, f.tag, &data, &len) && data == first.data && len == first.len);
			break;
		case GS_FT_NAMED_U64:
			FUZZ_ASSERT(f.name && strlen(f.name) >= 1 && strlen(f.name) <= GS_MSG_MAX_NAME);
			FUZZ_ASSERT(gs_msg_get_named_u64(m, f.tag, f.name, &u));
			break;
		case GS_FT_NAMED_F64:
			FUZZ_ASSERT(f.name && strlen(f.name) >= 1 && strlen(f.name) <= GS_MSG_MAX_NAME);
			FUZZ_ASSERT(gs_msg_get_named_f64(m, f.tag, f.name, &d));
			break;
		default:
			break;
		}
	}
	FUZZ_ASSERT(!gs_msg_field_at(m, n, &(struct gs_msg_field){ 0 }));
	/* What the CLI does with any reply. */
	struct gs_err err = { 0 };
	int code = gs_msg_result_code(m, &err);
	FUZZ_ASSERT(code >= 0 && code <= 255);
	if (code)
		FUZZ_ASSERT(err.msg[0] != '\0');
	FUZZ_ASSERT(gs_msg_type_name(m->type) != NULL);
	uint64_t u;
	if (gs_msg_get_u64(m, GS_F_STATE, &u))
		FUZZ_ASSERT(gs_agent_state_name(u) != NULL);
}

/* Rebuilds the message from its fields; the frame must be the input's, reserved bytes zeroed. */
static void check_rebuild(const struct gs_msg *m, const uint8_t *frame, size_t len)
{
	struct gs_msg b;
	gs_msg_init(&b, m->type);
	for (size_t i = 0; i < gs_msg_field_count(m); i++) {
		struct gs_msg_field f;
		gs_msg_field_at(m, i, &f);
		switch (f.type) {
		case GS_FT_U64: gs_msg_add_u64(&b, f.tag, f.u64); break;
		case GS_FT_F64: gs_msg_add_f64(&b, f.tag, f.f64); break;
		case GS_FT_STR: gs_msg_add_str(&b, f.tag, f.str); break;
		case GS_FT_BYTES: gs_msg_add_bytes(&b, f.tag, f.data, f.len); break;
		case GS_FT_NAMED_U64: gs_msg_add_named_u64(&b, f.tag, f.name, f.u64); break;
		case GS_FT_NAMED_F64: gs_msg_add_named_f64(&b, f.tag, f.name, f.f64); break;
		default:
			gs_msg_free(&b);
			return; /* a type from the future: the builders cannot write it */
		}
	}
	const void *out;
	size_t out_len;
	struct gs_err err = { 0 };
	FUZZ_ASSERT(gs_msg_finish(&b, &out, &out_len, &err) == 0);
	FUZZ_ASSERT(out_len == len);
	uint8_t *expect = malloc(len);
	FUZZ_ASSERT(expect);
	memcpy(expect, frame, len);
	memset(expect + 12, 0, 4); /* header's reserved word */
	for (size_t pos = GS_MSG_HEADER_SIZE; pos < len;) {
		expect[pos + 3] = 0; /* field's reserved byte */
		uint32_t vlen = (uint32_t)expect[pos + 4] | (uint32_t)expect[pos + 5] << 8 |
				(uint32_t)expect[pos + 6] << 16 | (uint32_t)expect[pos + 7] << 24;
		pos += 8 + vlen;
	}
	FUZZ_ASSERT(!memcmp(out, expect, len));
	free(expect);
	gs_msg_free(&b);
}

void fuzz_one(uint8_t flags, const uint8_t *rest, size_t len)
{
	uint8_t *frame = fuzz_copy(rest, len);
	if ((flags & FLAG_FIX_HEADER) && len >= GS_MSG_HEADER_SIZE) {
		put32(frame, GS_PROTO_MAGIC);
		frame[4] = GS_PROTO_VERSION & 0xff;
		frame[5] = GS_PROTO_VERSION >> 8;
		put32(frame + 8, (uint32_t)(len - GS_MSG_HEADER_SIZE));
	}
	enum gs_peer from = (flags & FLAG_FROM_CLI) ? GS_PEER_CLI : GS_PEER_AGENT;
	struct gs_err err = { 0 };
	if (len >= GS_MSG_HEADER_SIZE) {
		uint32_t plen = 0;
		if (gs_msg_parse_header(frame, from, &plen, &err) == 0)
			FUZZ_ASSERT(plen <= GS_MSG_MAX_PAYLOAD);
		else
			FUZZ_ASSERT(err.code == GS_E_AGENT && err.msg[0]);
	}
	struct gs_msg m;
	if (gs_msg_decode(frame, len, from, &m, &err) == 0) {
		FUZZ_ASSERT(m.len == len);
		check_getters(&m);
		check_rebuild(&m, frame, len);
	} else {
		FUZZ_ASSERT((err.code == GS_E_AGENT || err.code == GS_E_FAILURE) && err.msg[0]);
	}
	gs_msg_free(&m);
	free(frame);
}
