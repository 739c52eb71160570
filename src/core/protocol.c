/*
 * protocol.c - encoding and strict decoding of agent control messages (see
 * protocol.h). Values are written byte by byte in little-endian order, so the
 * wire format does not depend on the host's endianness or alignment.
 */
#include "core/protocol.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIELD_HEADER_SIZE 8

struct gs_msg_slot {
	uint16_t tag;
	uint8_t type;
	uint32_t off; /* value offset in buf */
	uint32_t len; /* value length */
};

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t f64_bits(double d)
{
	uint64_t v;
	memcpy(&v, &d, sizeof(v));
	return v;
}

static double bits_f64(uint64_t v)
{
	double d;
	memcpy(&d, &v, sizeof(d));
	return d;
}

static bool valid_name(const char *s, size_t len)
{
	if (len == 0 || len > GS_MSG_MAX_NAME)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
			return false;
	}
	return true;
}

void gs_msg_init(struct gs_msg *m, uint16_t type)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
	m->version = GS_PROTO_VERSION;
}

void gs_msg_free(struct gs_msg *m)
{
	free(m->buf);
	free(m->slots);
	memset(m, 0, sizeof(*m));
}

static bool reserve(struct gs_msg *m, size_t more)
{
	if (m->failed)
		return false;
	size_t need = (m->len ? m->len : GS_MSG_HEADER_SIZE) + more;
	if (need - GS_MSG_HEADER_SIZE > GS_MSG_MAX_PAYLOAD) {
		m->failed = "message larger than the protocol allows";
		return false;
	}
	if (need > m->cap) {
		size_t cap = m->cap ? m->cap : 256;
		while (cap < need)
			cap *= 2;
		uint8_t *b = realloc(m->buf, cap);
		if (!b) {
			m->failed = "out of memory building a message";
			return false;
		}
		m->buf = b;
		m->cap = cap;
	}
	if (!m->len) {
		memset(m->buf, 0, GS_MSG_HEADER_SIZE);
		m->len = GS_MSG_HEADER_SIZE;
	}
	if (m->nslots == m->slots_cap) {
		size_t n = m->slots_cap ? 2 * m->slots_cap : 16;
		struct gs_msg_slot *s = realloc(m->slots, n * sizeof(*s));
		if (!s) {
			m->failed = "out of memory building a message";
			return false;
		}
		m->slots = s;
		m->slots_cap = n;
	}
	return true;
}

/* Appends a field header and returns where its value goes, or NULL on failure. */
static uint8_t *add_field(struct gs_msg *m, uint16_t tag, uint8_t type, size_t len)
{
	if (len > GS_MSG_MAX_PAYLOAD) {
		if (!m->failed)
			m->failed = "message larger than the protocol allows";
		return NULL;
	}
	if (!reserve(m, FIELD_HEADER_SIZE + len))
		return NULL;
	uint8_t *p = m->buf + m->len;
	put16(p, tag);
	p[2] = type;
	p[3] = 0;
	put32(p + 4, (uint32_t)len);
	m->slots[m->nslots++] = (struct gs_msg_slot){ tag, type, (uint32_t)(m->len + FIELD_HEADER_SIZE), (uint32_t)len };
	m->len += FIELD_HEADER_SIZE + len;
	return p + FIELD_HEADER_SIZE;
}

void gs_msg_add_u64(struct gs_msg *m, uint16_t tag, uint64_t v)
{
	uint8_t *p = add_field(m, tag, GS_FT_U64, 8);
	if (p)
		put64(p, v);
}

void gs_msg_add_f64(struct gs_msg *m, uint16_t tag, double v)
{
	uint8_t *p = add_field(m, tag, GS_FT_F64, 8);
	if (p)
		put64(p, f64_bits(v));
}

void gs_msg_add_str(struct gs_msg *m, uint16_t tag, const char *s)
{
	size_t n = strlen(s);
	uint8_t *p = add_field(m, tag, GS_FT_STR, n + 1);
	if (p)
		memcpy(p, s, n + 1);
}

void gs_msg_add_bytes(struct gs_msg *m, uint16_t tag, const void *data, size_t len)
{
	uint8_t *p = add_field(m, tag, GS_FT_BYTES, len);
	if (p && len)
		memcpy(p, data, len);
}

static void add_named(struct gs_msg *m, uint16_t tag, uint8_t type, const char *name, uint64_t bits)
{
	size_t n = strlen(name);
	if (!valid_name(name, n)) {
		if (!m->failed)
			m->failed = "invalid field name in a message";
		return;
	}
	uint8_t *p = add_field(m, tag, type, n + 1 + 8);
	if (p) {
		memcpy(p, name, n + 1);
		put64(p + n + 1, bits);
	}
}

void gs_msg_add_named_u64(struct gs_msg *m, uint16_t tag, const char *name, uint64_t v)
{
	add_named(m, tag, GS_FT_NAMED_U64, name, v);
}

void gs_msg_add_named_f64(struct gs_msg *m, uint16_t tag, const char *name, double v)
{
	add_named(m, tag, GS_FT_NAMED_F64, name, f64_bits(v));
}

void gs_msg_set_result(struct gs_msg *m, int code, const char *fmt, ...)
{
	char text[GS_ERR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	m->type = GS_MSG_RESULT;
	gs_msg_add_u64(m, GS_F_CODE, (uint64_t)code);
	gs_msg_add_str(m, GS_F_MESSAGE, text);
}

int gs_msg_finish(struct gs_msg *m, const void **frame, size_t *len, struct gs_err *err)
{
	if (!m->failed && !m->len) {
		/* no fields: reserve() makes room for the header alone */
		if (reserve(m, 0))
			m->len = GS_MSG_HEADER_SIZE;
	}
	if (m->failed)
		return gs_fail(err, GS_E_FAILURE, "cannot build a %s message: %s", gs_msg_type_name(m->type), m->failed);
	put32(m->buf, GS_PROTO_MAGIC);
	put16(m->buf + 4, m->version);
	put16(m->buf + 6, m->type);
	put32(m->buf + 8, (uint32_t)(m->len - GS_MSG_HEADER_SIZE));
	put32(m->buf + 12, 0);
	*frame = m->buf;
	*len = m->len;
	return 0;
}

static const char *side(enum gs_peer p)
{
	return p == GS_PEER_AGENT ? "agent" : "gpusnap";
}

int gs_msg_parse_header(const void *header, enum gs_peer from, uint32_t *payload_len, struct gs_err *err)
{
	const uint8_t *h = header;
	if (get32(h) != GS_PROTO_MAGIC)
		return gs_fail(err, GS_E_AGENT, "%s sent something that is not a gpusnap message (magic 0x%08x)",
			       side(from), get32(h));
	uint32_t n = get32(h + 8);
	if (n > GS_MSG_MAX_PAYLOAD)
		return gs_fail(err, GS_E_AGENT, "%s sent a %u byte message, more than the %u allowed", side(from), n,
			       GS_MSG_MAX_PAYLOAD);
	*payload_len = n;
	return 0;
}

/* Checks a known field type's value. NULL if fine, else what is wrong. */
static const char *check_value(uint8_t type, const uint8_t *v, uint32_t len)
{
	switch (type) {
	case GS_FT_U64:
	case GS_FT_F64:
		return len == 8 ? NULL : "number field of the wrong size";
	case GS_FT_STR:
		if (len == 0 || v[len - 1] != '\0')
			return "unterminated string";
		if (memchr(v, '\0', len - 1))
			return "string with an embedded NUL";
		return NULL;
	case GS_FT_NAMED_U64:
	case GS_FT_NAMED_F64: {
		const uint8_t *nul = len > 8 ? memchr(v, '\0', len - 8) : NULL;
		if (!nul || (size_t)(nul - v) != len - 9 || !valid_name((const char *)v, len - 9))
			return "bad named number";
		return NULL;
	}
	default:
		return NULL; /* BYTES and types added later: any content */
	}
}

/*
 * A number an agent reports out of its bounds (protocol.h): what is wrong in
 * why, else false. v holds a value check_value accepted.
 */
static bool agent_number_bad(uint16_t tag, uint8_t type, const uint8_t *v, uint32_t len, char *why, size_t n)
{
	bool named = type == GS_FT_NAMED_U64 || type == GS_FT_NAMED_F64;
	if (!named && type != GS_FT_U64 && type != GS_FT_F64)
		return false; /* strings, bytes and types of later versions carry no number */
	const char *name = named ? (const char *)v : NULL;
	uint64_t u = named ? get64(v + len - 8) : get64(v);
	if (type == GS_FT_F64 || type == GS_FT_NAMED_F64) {
		double d = bits_f64(u);
		if (isfinite(d) && d >= 0 && d <= GS_MSG_MAX_SECONDS)
			return false;
		snprintf(why, n, "%s%s%s%g s, not a time from 0 to %g s", name ? "'" : "", name ? name : "",
			 name ? "' is " : "", d, GS_MSG_MAX_SECONDS);
		return true;
	}
	bool amount = type == GS_FT_NAMED_U64 || (type == GS_FT_U64 && (tag == GS_F_ALLOC_COUNT || tag == GS_F_ALLOC_BYTES ||
									  tag == GS_F_UNMANAGED_COUNT ||
									  tag == GS_F_UNMANAGED_BYTES));
	if (amount && u > GS_MSG_MAX_AMOUNT) {
		snprintf(why, n, "%s%s%s%llu, more than a process can hold (2^%d)", name ? "'" : "", name ? name : "",
			 name ? "' is " : "", (unsigned long long)u, GS_MSG_MAX_AMOUNT_BITS);
		return true;
	}
	if (type == GS_FT_U64 && tag == GS_F_PID && (u == 0 || u > GS_MSG_MAX_PID)) {
		snprintf(why, n, "process id %llu, not one from 1 to %d", (unsigned long long)u, GS_MSG_MAX_PID);
		return true;
	}
	return false;
}

int gs_msg_decode(const void *frame, size_t len, enum gs_peer from, struct gs_msg *m, struct gs_err *err)
{
	const uint8_t *f = frame;
	uint32_t plen;
	gs_msg_init(m, 0);
	if (len < GS_MSG_HEADER_SIZE)
		return gs_fail(err, GS_E_AGENT, "%s sent a truncated message (%zu bytes)", side(from), len);
	int rc = gs_msg_parse_header(f, from, &plen, err);
	if (rc)
		return rc;
	uint16_t version = get16(f + 4);
	if (version != GS_PROTO_VERSION)
		return gs_fail(err, GS_E_AGENT, "%s speaks protocol %u, %s speaks %u", side(from), version,
			       side(from == GS_PEER_AGENT ? GS_PEER_CLI : GS_PEER_AGENT), GS_PROTO_VERSION);
	if ((size_t)plen != len - GS_MSG_HEADER_SIZE)
		return gs_fail(err, GS_E_AGENT, "%s sent a message of %zu bytes whose header says %u", side(from),
			       len - GS_MSG_HEADER_SIZE, plen);

	m->type = get16(f + 6);
	m->buf = malloc(len);
	if (!m->buf)
		return gs_fail(err, GS_E_FAILURE, "out of memory reading a message");
	memcpy(m->buf, f, len);
	m->len = m->cap = len;
	size_t pos = GS_MSG_HEADER_SIZE;
	while (pos < len) {
		if (len - pos < FIELD_HEADER_SIZE) {
			rc = gs_fail(err, GS_E_AGENT, "%s sent a %s message with a truncated field at byte %zu",
				     side(from), gs_msg_type_name(m->type), pos);
			goto fail;
		}
		const uint8_t *p = m->buf + pos;
		uint16_t tag = get16(p);
		uint8_t type = p[2];
		uint32_t vlen = get32(p + 4);
		if (vlen > len - pos - FIELD_HEADER_SIZE) {
			rc = gs_fail(err, GS_E_AGENT, "%s sent a %s message whose field %u claims %u bytes past its end",
				     side(from), gs_msg_type_name(m->type), tag, vlen);
			goto fail;
		}
		const char *why = check_value(type, p + FIELD_HEADER_SIZE, vlen);
		if (why) {
			rc = gs_fail(err, GS_E_AGENT, "%s sent a %s message with a bad field %u: %s", side(from),
				     gs_msg_type_name(m->type), tag, why);
			goto fail;
		}
		char bad[160];
		if (from == GS_PEER_AGENT && agent_number_bad(tag, type, p + FIELD_HEADER_SIZE, vlen, bad, sizeof(bad))) {
			rc = gs_fail(err, GS_E_AGENT, "agent sent a %s message with a bad field %u: %s",
				     gs_msg_type_name(m->type), tag, bad);
			goto fail;
		}
		if (m->nslots == m->slots_cap) {
			size_t n = m->slots_cap ? 2 * m->slots_cap : 16;
			struct gs_msg_slot *s = realloc(m->slots, n * sizeof(*s));
			if (!s) {
				rc = gs_fail(err, GS_E_FAILURE, "out of memory reading a message");
				goto fail;
			}
			m->slots = s;
			m->slots_cap = n;
		}
		m->slots[m->nslots++] = (struct gs_msg_slot){ tag, type, (uint32_t)(pos + FIELD_HEADER_SIZE), vlen };
		pos += FIELD_HEADER_SIZE + vlen;
	}
	return 0;
fail:
	gs_msg_free(m);
	return rc;
}

bool gs_msg_field_at(const struct gs_msg *m, size_t i, struct gs_msg_field *f)
{
	if (i >= m->nslots)
		return false;
	const struct gs_msg_slot *s = &m->slots[i];
	const uint8_t *v = m->buf + s->off;
	memset(f, 0, sizeof(*f));
	f->tag = s->tag;
	f->type = s->type;
	f->data = v;
	f->len = s->len;
	switch (s->type) {
	case GS_FT_U64:
		f->u64 = get64(v);
		break;
	case GS_FT_F64:
		f->f64 = bits_f64(get64(v));
		break;
	case GS_FT_STR:
		f->str = (const char *)v;
		f->len = s->len - 1;
		break;
	case GS_FT_NAMED_U64:
	case GS_FT_NAMED_F64:
		f->name = (const char *)v;
		f->u64 = get64(v + s->len - 8);
		f->f64 = bits_f64(f->u64);
		if (s->type == GS_FT_NAMED_F64)
			f->u64 = 0;
		else
			f->f64 = 0;
		break;
	default:
		break;
	}
	return true;
}

size_t gs_msg_field_count(const struct gs_msg *m)
{
	return m->nslots;
}

static bool find(const struct gs_msg *m, uint16_t tag, uint8_t type, const char *name, struct gs_msg_field *f)
{
	for (size_t i = 0; i < m->nslots; i++) {
		if (m->slots[i].tag != tag || m->slots[i].type != type)
			continue;
		gs_msg_field_at(m, i, f);
		if (!name || !strcmp(f->name, name))
			return true;
	}
	return false;
}

bool gs_msg_get_u64(const struct gs_msg *m, uint16_t tag, uint64_t *v)
{
	struct gs_msg_field f;
	if (!find(m, tag, GS_FT_U64, NULL, &f))
		return false;
	*v = f.u64;
	return true;
}

bool gs_msg_get_f64(const struct gs_msg *m, uint16_t tag, double *v)
{
	struct gs_msg_field f;
	if (!find(m, tag, GS_FT_F64, NULL, &f))
		return false;
	*v = f.f64;
	return true;
}

const char *gs_msg_get_str(const struct gs_msg *m, uint16_t tag)
{
	struct gs_msg_field f;
	return find(m, tag, GS_FT_STR, NULL, &f) ? f.str : NULL;
}

bool gs_msg_get_bytes(const struct gs_msg *m, uint16_t tag, const void **data, size_t *len)
{
	struct gs_msg_field f;
	if (!find(m, tag, GS_FT_BYTES, NULL, &f))
		return false;
	*data = f.data;
	*len = f.len;
	return true;
}

bool gs_msg_get_named_u64(const struct gs_msg *m, uint16_t tag, const char *name, uint64_t *v)
{
	struct gs_msg_field f;
	if (!find(m, tag, GS_FT_NAMED_U64, name, &f))
		return false;
	*v = f.u64;
	return true;
}

bool gs_msg_get_named_f64(const struct gs_msg *m, uint16_t tag, const char *name, double *v)
{
	struct gs_msg_field f;
	if (!find(m, tag, GS_FT_NAMED_F64, name, &f))
		return false;
	*v = f.f64;
	return true;
}

int gs_msg_result_code(const struct gs_msg *m, struct gs_err *err)
{
	uint64_t code;
	if (m->type != GS_MSG_RESULT || !gs_msg_get_u64(m, GS_F_CODE, &code) || code > 255)
		return gs_fail(err, GS_E_AGENT, "agent sent a %s message without a result code", gs_msg_type_name(m->type));
	if (code == GS_OK)
		return GS_OK;
	const char *text = gs_msg_get_str(m, GS_F_MESSAGE);
	return gs_fail(err, (int)code, "%s", text && *text ? text : "agent failed without a message");
}

/* The flags a request type may carry; UINT64_MAX for a type this version does not know. */
static uint64_t known_flags(uint16_t type)
{
	switch (type) {
	case GS_MSG_HELLO:
	case GS_MSG_STATUS:
	case GS_MSG_PREPARE:
	case GS_MSG_GATE:
	case GS_MSG_OPEN:
		return 0;
	case GS_MSG_SUSPEND:
		return GS_SUSPEND_FLAGS_KNOWN;
	case GS_MSG_SUSPEND_FD:
		return GS_SUSPEND_FD_FLAGS_KNOWN;
	case GS_MSG_DUMP:
	case GS_MSG_DUMP_FD:
		return GS_DUMP_FLAGS_KNOWN;
	case GS_MSG_RESUME:
	case GS_MSG_RESUME_FD:
		return GS_RESUME_FLAGS_KNOWN;
	case GS_MSG_SHARES:
	case GS_MSG_SHARE_LINK:
	case GS_MSG_SHARE_EXPORT:
	case GS_MSG_SHARE_IMPORT:
		return 0;
	case GS_MSG_SHARE_RELEASE:
		return GS_SHARE_RELEASE_CLOSE;
	default:
		return UINT64_MAX;
	}
}

int gs_msg_check_request(const struct gs_msg *req, struct gs_err *err)
{
	uint64_t known = known_flags(req->type), flags = 0;
	if (known == UINT64_MAX)
		return 0;
	const char *name = gs_msg_type_name(req->type);
	if (gs_msg_get_u64(req, GS_F_FLAGS, &flags) && (flags & ~known))
		return gs_fail(err, GS_E_USAGE, "%s request with unknown flags %#llx (this agent knows %#llx)", name,
			       (unsigned long long)(flags & ~known), (unsigned long long)known);
	double t = 0;
	if (gs_msg_get_f64(req, GS_F_TIMEOUT, &t) && !(isfinite(t) && t >= 0))
		return gs_fail(err, GS_E_USAGE, "%s request with timeout %g: not a number of seconds >= 0", name, t);
	if (gs_msg_get_f64(req, GS_F_LEASE, &t) && !(isfinite(t) && t >= 0))
		return gs_fail(err, GS_E_USAGE, "%s request with lease %g: not a number of seconds >= 0", name, t);
	return 0;
}

void gs_request_decode(const struct gs_msg *m, struct gs_request *r)
{
	uint64_t flags = 0;
	*r = (struct gs_request){ .type = m->type, .timeout_s = GS_REQUEST_DEFAULT_TIMEOUT_S };
	gs_msg_get_u64(m, GS_F_FLAGS, &flags);
	gs_msg_get_f64(m, GS_F_TIMEOUT, &r->timeout_s);
	gs_msg_get_f64(m, GS_F_LEASE, &r->lease_s);
	r->dir = gs_msg_get_str(m, GS_F_DIR);
	/* the bits of each type are distinct, and gs_msg_check_request let only the type's own through */
	r->keep_context = (flags & GS_SUSPEND_KEEP_CONTEXT) != 0;
	r->stay_gated = (flags & GS_RESUME_STAY_GATED) != 0;
	r->spill_only = (flags & GS_SUSPEND_SPILL_ONLY) != 0;
	r->verify_gpu = (flags & GS_RESUME_VERIFY_GPU) != 0;
	r->dump.running = (flags & GS_DUMP_RUNNING) != 0;
	r->dump.cached = (flags & GS_DUMP_CACHED) != 0;
	r->dump.drop_staging = (flags & GS_DUMP_DROP_STAGING) != 0;
	uint64_t compress = 0;
	if (gs_msg_get_u64(m, GS_F_COMPRESS, &compress)) {
		r->dump.compress_codec = (uint8_t)(compress & 0xff);
		r->dump.compress_level = (int)((compress >> 8) & 0xff);
	}
	r->dump.parent = gs_msg_get_str(m, GS_F_PARENT);
	r->dump.parent_rec = gs_msg_get_str(m, GS_F_PARENT_REC);
	r->dump.store = gs_msg_get_str(m, GS_F_STORE);
	r->dump.store_rec = gs_msg_get_str(m, GS_F_STORE_REC);
	r->dump.store_ref = gs_msg_get_str(m, GS_F_STORE_REF);
}

void gs_request_encode(const struct gs_request *r, struct gs_msg *m)
{
	uint64_t flags = 0;
	switch (r->type) {
	case GS_MSG_SUSPEND:
		flags = r->keep_context ? GS_SUSPEND_KEEP_CONTEXT : 0;
		break;
	case GS_MSG_SUSPEND_FD:
		flags = (r->keep_context ? GS_SUSPEND_KEEP_CONTEXT : 0) | (r->spill_only ? GS_SUSPEND_SPILL_ONLY : 0);
		break;
	case GS_MSG_RESUME:
	case GS_MSG_RESUME_FD:
		flags = (r->stay_gated ? GS_RESUME_STAY_GATED : 0) | (r->verify_gpu ? GS_RESUME_VERIFY_GPU : 0);
		break;
	case GS_MSG_DUMP:
	case GS_MSG_DUMP_FD:
		flags = (r->dump.running ? GS_DUMP_RUNNING : 0) | (r->dump.cached ? GS_DUMP_CACHED : 0) |
			(r->dump.drop_staging ? GS_DUMP_DROP_STAGING : 0);
		break;
	default:
		break;
	}
	gs_msg_init(m, r->type);
	gs_msg_add_f64(m, GS_F_TIMEOUT, r->timeout_s);
	gs_msg_add_u64(m, GS_F_FLAGS, flags);
	if (r->dir)
		gs_msg_add_str(m, GS_F_DIR, r->dir);
	if (r->lease_s > 0)
		gs_msg_add_f64(m, GS_F_LEASE, r->lease_s);
	if ((r->type == GS_MSG_DUMP || r->type == GS_MSG_DUMP_FD) && r->dump.compress_codec)
		gs_msg_add_u64(m, GS_F_COMPRESS, r->dump.compress_codec | (uint64_t)(r->dump.compress_level & 0xff) << 8);
	if ((r->type == GS_MSG_DUMP || r->type == GS_MSG_DUMP_FD) && r->dump.parent) {
		gs_msg_add_str(m, GS_F_PARENT, r->dump.parent);
		if (r->dump.parent_rec)
			gs_msg_add_str(m, GS_F_PARENT_REC, r->dump.parent_rec);
	}
	if ((r->type == GS_MSG_DUMP || r->type == GS_MSG_DUMP_FD) && r->dump.store) {
		gs_msg_add_str(m, GS_F_STORE, r->dump.store);
		if (r->dump.store_rec)
			gs_msg_add_str(m, GS_F_STORE_REC, r->dump.store_rec);
		if (r->dump.store_ref)
			gs_msg_add_str(m, GS_F_STORE_REF, r->dump.store_ref);
	}
}

bool gs_msg_is_operation(uint16_t type)
{
	return type == GS_MSG_SUSPEND || type == GS_MSG_RESUME || type == GS_MSG_DUMP || type == GS_MSG_PREPARE ||
	       type == GS_MSG_GATE || type == GS_MSG_OPEN || type == GS_MSG_SHARE_LINK || type == GS_MSG_SHARE_EXPORT ||
	       type == GS_MSG_SHARE_IMPORT || type == GS_MSG_SHARE_RELEASE || type == GS_MSG_DUMP_FD ||
	       type == GS_MSG_RESUME_FD || type == GS_MSG_SUSPEND_FD;
}

const char *gs_msg_type_name(uint16_t type)
{
	switch (type) {
	case GS_MSG_HELLO: return "hello";
	case GS_MSG_INFO: return "info";
	case GS_MSG_SUSPEND: return "suspend";
	case GS_MSG_RESUME: return "resume";
	case GS_MSG_STATUS: return "status";
	case GS_MSG_DUMP: return "dump";
	case GS_MSG_RESULT: return "result";
	case GS_MSG_PREPARE: return "prepare";
	case GS_MSG_GATE: return "gate";
	case GS_MSG_OPEN: return "open";
	case GS_MSG_DUMP_FD: return "dump";
	case GS_MSG_RESUME_FD: return "resume";
	case GS_MSG_SUSPEND_FD: return "suspend";
	case GS_MSG_SHARES: return "shares";
	case GS_MSG_SHARE_LINK: return "share-link";
	case GS_MSG_SHARE_EXPORT: return "share-export";
	case GS_MSG_SHARE_IMPORT: return "share-import";
	case GS_MSG_SHARE_RELEASE: return "share-release";
	default: return "unknown";
	}
}

const char *gs_agent_state_name(uint64_t state)
{
	switch (state) {
	case GS_AGENT_RUNNING: return "running";
	case GS_AGENT_SUSPENDED: return "suspended";
	case GS_AGENT_DATA_RELEASED: return "data-released";
	case GS_AGENT_BUSY: return "busy";
	case GS_AGENT_GATED: return "gated";
	default: return "unknown";
	}
}
