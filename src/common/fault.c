/*
 * fault.c - the fault-injection table (fault.h): parses GPUSNAP_FAULT once
 * and answers gs_fault() at the points the code asks about.
 */
#define LOG_PREFIX "fault: "

#include "common/fault.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/settings.h"

enum fault_action { ACT_FAIL, ACT_KILL, ACT_TERM, ACT_EXIT, ACT_HOLD };

struct fault_entry {
	bool set;
	bool from_nth_on; /* "@N+" */
	unsigned long nth;
	enum fault_action action;
	long arg;
	bool has_arg;
	unsigned long hits; /* atomic */
};

static const char *const point_names[] = {
#define GS_FAULT_NAME_(id, name, where) name,
	GS_FAULT_POINTS(GS_FAULT_NAME_)
#undef GS_FAULT_NAME_
};
static const char *const point_where[] = {
#define GS_FAULT_WHERE_(id, name, where) where,
	GS_FAULT_POINTS(GS_FAULT_WHERE_)
#undef GS_FAULT_WHERE_
};

static struct fault_entry table[GS_FI_COUNT_];
static bool any_set;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static const struct {
	const char *name;
	int value;
} errno_names[] = {
	{ "ENOSPC", ENOSPC }, { "EIO", EIO }, { "ENOMEM", ENOMEM }, { "EINTR", EINTR },
	{ "EDQUOT", EDQUOT }, { "EPIPE", EPIPE }, { "EACCES", EACCES },
};

static bool parse_long(const char *s, size_t n, long *out)
{
	if (!n || n > 18)
		return false;
	long v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return true;
}

static bool parse_arg(const char *s, size_t n, long *out)
{
	if (parse_long(s, n, out))
		return true;
	for (size_t i = 0; i < sizeof(errno_names) / sizeof(errno_names[0]); i++)
		if (strlen(errno_names[i].name) == n && !strncmp(s, errno_names[i].name, n)) {
			*out = errno_names[i].value;
			return true;
		}
	return false;
}

/* One "point[@N[+]][=ACTION[:ARG]]" of length n; false when it does not parse. */
static bool parse_entry(const char *s, size_t n)
{
	size_t name_len = strcspn(s, "@=");
	if (name_len > n)
		name_len = n;
	int point = -1;
	for (int i = 0; i < GS_FI_COUNT_; i++)
		if (strlen(point_names[i]) == name_len && !strncmp(s, point_names[i], name_len))
			point = i;
	if (point < 0)
		return false;
	struct fault_entry e = { .set = true, .nth = 1, .action = ACT_FAIL };
	size_t i = name_len;
	if (i < n && s[i] == '@') {
		size_t start = ++i;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
		long nth;
		if (!parse_long(s + start, i - start, &nth) || nth < 1)
			return false;
		e.nth = (unsigned long)nth;
		if (i < n && s[i] == '+') {
			e.from_nth_on = true;
			i++;
		}
	}
	if (i < n && s[i] == '=') {
		size_t start = ++i;
		while (i < n && s[i] != ':')
			i++;
		static const struct {
			const char *name;
			enum fault_action action;
		} actions[] = { { "fail", ACT_FAIL }, { "kill", ACT_KILL }, { "term", ACT_TERM },
				{ "exit", ACT_EXIT }, { "hold", ACT_HOLD } };
		bool found = false;
		for (size_t k = 0; k < sizeof(actions) / sizeof(actions[0]); k++)
			if (strlen(actions[k].name) == i - start && !strncmp(s + start, actions[k].name, i - start)) {
				e.action = actions[k].action;
				found = true;
			}
		if (!found)
			return false;
		if (i < n && s[i] == ':') {
			start = ++i;
			if (!parse_arg(s + start, n - start, &e.arg))
				return false;
			e.has_arg = true;
			i = n;
		}
	}
	if (i != n)
		return false;
	table[point] = e;
	return true;
}

static int parse_spec(const char *spec)
{
	memset(table, 0, sizeof(table));
	int bad = 0;
	bool any = false;
	while (spec && *spec) {
		size_t n = strcspn(spec, ",");
		if (n) {
			if (parse_entry(spec, n)) {
				any = true;
			} else {
				pr_warn("GPUSNAP_FAULT: cannot use '%.*s' (point[@N[+]][=fail|kill|term|exit|hold[:ARG]])",
					(int)n, spec);
				bad++;
			}
		}
		spec += n;
		if (*spec == ',')
			spec++;
	}
	__atomic_store_n(&any_set, any, __ATOMIC_RELEASE);
	return bad;
}

static void read_env(void)
{
	const char *spec = gs_setting_str(GS_S_FAULT);
	if (spec && *spec)
		parse_spec(spec);
}

int gs_fault_configure(const char *spec)
{
	pthread_once(&env_once, read_env);
	return parse_spec(spec);
}

bool gs_fault(enum gs_fault_point p)
{
	pthread_once(&env_once, read_env);
	if (!__atomic_load_n(&any_set, __ATOMIC_ACQUIRE) || (unsigned)p >= GS_FI_COUNT_ || !table[p].set)
		return false;
	struct fault_entry *e = &table[p];
	unsigned long hit = __atomic_add_fetch(&e->hits, 1, __ATOMIC_RELAXED);
	if (e->from_nth_on ? hit < e->nth : hit != e->nth)
		return false;
	pr_warn("injected at '%s' (hit %lu)", point_names[p], hit);
	switch (e->action) {
	case ACT_KILL:
		kill(getpid(), SIGKILL);
		for (;;)
			pause();
	case ACT_TERM:
		kill(getpid(), SIGTERM);
		return false;
	case ACT_EXIT:
		_exit(e->has_arg ? (int)e->arg : 1);
	case ACT_HOLD: {
		long s = e->has_arg ? e->arg : 5;
		struct timespec ts = { .tv_sec = s };
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
		return false;
	}
	case ACT_FAIL:
		break;
	}
	return true;
}

int gs_fault_errno(enum gs_fault_point p, int dflt)
{
	if ((unsigned)p >= GS_FI_COUNT_ || !table[p].set || table[p].action != ACT_FAIL || !table[p].has_arg)
		return dflt;
	return (int)table[p].arg;
}

const char *gs_fault_name(enum gs_fault_point p)
{
	return (unsigned)p < GS_FI_COUNT_ ? point_names[p] : NULL;
}

const char *gs_fault_where(enum gs_fault_point p)
{
	return (unsigned)p < GS_FI_COUNT_ ? point_where[p] : NULL;
}
