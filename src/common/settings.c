/*
 * settings.c - the table of every GPUSNAP_* variable, the one place that
 * reads them from the environment, and their parsed values (settings.h).
 *
 * Values are parsed with options.c's parsers, the ones the command line
 * uses, so "4G" or "0.5" means the same on both.
 */
#include "common/settings.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/options.h"
#include "common/printable.h"

#define CLI GS_SCOPE_CLI
#define AGENT GS_SCOPE_AGENT
#define PLUGIN GS_SCOPE_PLUGIN
#define NOLIMIT HUGE_VAL
#define MiB (1024.0 * 1024.0)

/* Each row: name, plugin key, type, who reads it, default, min, max, choices, hidden, doc. */
static const struct gs_setting_def table[GS_S_COUNT] = {
	[GS_S_LOG] = { "GPUSNAP_LOG", NULL, GS_SET_ENUM, CLI | AGENT | PLUGIN, "warn", 0, 0, "error|warn|info|debug", false,
		       "how much gpusnap says on stderr (the agent: in its log)" },
	[GS_S_LIBCUDA] = { "GPUSNAP_LIBCUDA", NULL, GS_SET_PATH, CLI | AGENT | PLUGIN, NULL, 0, 0, NULL, false,
			   "the driver library to load instead of libcuda.so.1 (the tests' fake driver)" },
	[GS_S_LIBNVML] = { "GPUSNAP_LIBNVML", NULL, GS_SET_PATH, CLI | PLUGIN, NULL, 0, 0, NULL, true,
			   "the NVML library to load instead of libnvidia-ml.so.1 (the tests' fake driver)" },
	[GS_S_RUN_DIR] = { "GPUSNAP_RUN_DIR", NULL, GS_SET_PATH, CLI | AGENT | PLUGIN, NULL, 0, 0, NULL, false,
			   "the runtime directory of agent sockets, locks and records (default /run/gpusnap for "
			   "root, else /tmp/gpusnap-UID)" },
	[GS_S_DEVICE_PATH_PREFIX] = { "GPUSNAP_DEVICE_PATH_PREFIX", NULL, GS_SET_PATH, CLI | AGENT | PLUGIN, "/dev/nvidia",
				      0, 0, NULL, true, "where the GPU's device files are (the tests' fake driver)" },
	[GS_S_FAULT] = { "GPUSNAP_FAULT", NULL, GS_SET_STRING, CLI | AGENT | PLUGIN, NULL, 0, 0, NULL, true,
			 "fault points to inject, POINT[:N[+]][=ACTION],... (common/fault.h; tests only)" },
	[GS_S_CRIU] = { "GPUSNAP_CRIU", NULL, GS_SET_PATH, CLI, NULL, 0, 0, NULL, false,
			"the criu binary to run (default: criu on PATH; CRIU 4.2 or later)" },
	[GS_S_CRIU_TIMEOUT] = { "GPUSNAP_CRIU_TIMEOUT", NULL, GS_SET_SECONDS, CLI, "600", 1e-9, NOLIMIT, NULL, false,
				"seconds each criu run may take before it is killed" },
	[GS_S_RESTORE_LAZY] = { "GPUSNAP_RESTORE_LAZY", NULL, GS_SET_ENUM, CLI, "off", 0, 0, "auto|on|off", false,
				"how restore brings the CPU memory back: on, through CRIU's lazy pages (the process goes "
				"on while a daemon fills it; restore --lazy-pages), auto (that where userfaultfd is "
				"usable), off (all of it before the process goes on)" },
	[GS_S_AGENT] = { "GPUSNAP_AGENT", NULL, GS_SET_PATH, CLI, NULL, 0, 0, NULL, false,
			 "the agent, libgpusnap.so, to use (default: beside the gpusnap binary, or in ../lib)" },
	[GS_S_STAGE_DIR] = { "GPUSNAP_STAGE_DIR", NULL, GS_SET_PATH, CLI, "/dev/shm", 0, 0, NULL, false,
			     "the memory file system (tmpfs) where dump --leave-running keeps its copy of the GPU data "
			     "while the process runs on" },
	[GS_S_STORE] = { "GPUSNAP_STORE", NULL, GS_SET_PATH, CLI, NULL, 0, 0, NULL, false,
			 "the chunk store dump writes the GPU data into where --store is not given (dump --store; not "
			 "for --driver or --parent)" },
	[GS_S_RESERVE] = { "GPUSNAP_RESERVE", NULL, GS_SET_SIZE, AGENT, "0", 0, NOLIMIT, NULL, false,
			   "in the app: staging host memory kept ready for suspends (what --reserve sets)" },
	[GS_S_AGENT_HOOKS] = { "GPUSNAP_AGENT_HOOKS", NULL, GS_SET_BOOL, AGENT, "1", 0, 0, NULL, false,
			       "in the app: 0 leaves allocations to the driver (for legacy CUDA IPC)" },
	[GS_S_AGENT_LOG] = { "GPUSNAP_AGENT_LOG", NULL, GS_SET_PATH, AGENT, NULL, 0, 0, NULL, false,
			     "in the app: the file the agent logs to" },
	[GS_S_STAGING_MODE] = { "GPUSNAP_STAGING_MODE", NULL, GS_SET_ENUM, AGENT, "bounce", 0, 0, "bounce|pinned", false,
				"in the app: bounce (through a small pinned ring) or pinned staging memory" },
	[GS_S_STAGING_UNPIN] = { "GPUSNAP_STAGING_UNPIN", NULL, GS_SET_BOOL, AGENT, "1", 0, 0, NULL, false,
				 "in the app, pinned mode: 0 keeps the staging memory pinned while the driver holds "
				 "the process" },
	[GS_S_STAGING_THREADS] = { "GPUSNAP_STAGING_THREADS", NULL, GS_SET_INT, AGENT, NULL, 1, 32, NULL, false,
				   "in the app: threads that copy between the GPU and the staging memory (default: "
				   "the CPUs but two, 4 to 16)" },
	[GS_S_STAGING_POPULATE] = { "GPUSNAP_STAGING_POPULATE", NULL, GS_SET_ENUM, AGENT, "lazy", 0, 0, "lazy|ahead",
				    false, "in the app: how a suspend without --reserve populates its host memory" },
	[GS_S_FORK_DROP_DEVICE] = { "GPUSNAP_FORK_DROP_DEVICE", NULL, GS_SET_BOOL, AGENT, "1", 0, 0, NULL, false,
				    "in the app: 0 lets fork children keep the GPU device files (they cannot be "
				    "dumped)" },
	[GS_S_GPU_ZERO_SCAN] = { "GPUSNAP_GPU_ZERO_SCAN", NULL, GS_SET_BOOL, AGENT, "1", 0, 0, NULL, false,
				 "in the app: 0 finds all-zero pieces on the host instead of on the GPU" },
	[GS_S_ZERO_CHUNKS] = { "GPUSNAP_ZERO_CHUNKS", NULL, GS_SET_BOOL, AGENT, "1", 0, 0, NULL, false,
			       "in the app: 0 copies all-zero GPU memory like any other" },
	[GS_S_HOST_MEMORY_LIMIT] = { "GPUSNAP_HOST_MEMORY_LIMIT", NULL, GS_SET_SIZE, AGENT, NULL, 0, NOLIMIT, NULL, false,
				     "in the app: the most host memory a suspend without --reserve may take" },
	[GS_S_HOST_MEMORY_MARGIN] = { "GPUSNAP_HOST_MEMORY_MARGIN", NULL, GS_SET_SHARE, AGENT, "1G", 0, 0, NULL, false,
				      "in the app: host memory a suspend leaves free, a size (2G) or a share of the "
				      "host's memory (10%)" },
	[GS_S_SPILL_DIR] = { "GPUSNAP_SPILL_DIR", NULL, GS_SET_PATH, CLI, NULL, 0, 0, NULL, false,
			     "where a suspend spills GPU data that host memory cannot hold (suspend --spill DIR)" },
	[GS_S_MULTI_GPU_DRIVER] = { "GPUSNAP_MULTI_GPU_DRIVER", "multi_gpu_driver", GS_SET_BOOL, CLI | PLUGIN, "0", 0, 0,
				    NULL, false,
				    "driver path (no agent): 1 checkpoints a process with GPU memory on several GPUs, "
				    "some of which the driver cannot restore "
				    "(default: refused; suspend and dump --multi-gpu-driver)" },
	[GS_S_CHUNK_SIZE] = { "GPUSNAP_CHUNK_SIZE", NULL, GS_SET_SIZE, AGENT, NULL, 1 * MiB, 256 * MiB, NULL, false,
			      "in the app: the unit a suspend copies in (default 4M bounce, 64M pinned)" },
	[GS_S_HOST_COPY] = { "GPUSNAP_HOST_COPY", NULL, GS_SET_ENUM, AGENT, "auto", 0, 0, "auto|memcpy|stream", false,
			     "in the app: how the host copies between the ring and the staging memory" },
	[GS_S_SHRINK_STACK] = { "GPUSNAP_SHRINK_STACK", NULL, GS_SET_BOOL, AGENT, "1", 0, 0, NULL, false,
				"in the app: 0 keeps each context's stack through the driver's checkpoint" },
	[GS_S_RDMA] = { "GPUSNAP_RDMA", NULL, GS_SET_BOOL, AGENT, "1", 0, 0, NULL, false,
			"in the app: 0 does not ask for GPUDirect RDMA on the agent's memory" },
	[GS_S_ALLOW_IO_URING] = { "GPUSNAP_ALLOW_IO_URING", NULL, GS_SET_BOOL, AGENT, "0", 0, 0, NULL, false,
				  "in the app: 1 lets the app set up io_uring (which CRIU cannot dump)" },
	[GS_S_IO_THREADS] = { "GPUSNAP_IO_THREADS", NULL, GS_SET_INT, AGENT, NULL, 1, 32, NULL, false,
			      "in the app: threads that stream GPU data to and from image files (default 8 for a "
			      "dump, one per CPU from 8 to 32 for a restore)" },
	[GS_S_GATE_FENCE] = { "GPUSNAP_GATE_FENCE", NULL, GS_SET_ENUM, AGENT, "auto", 0, 0, "auto|seq_cst", true,
			      "in the app: seq_cst makes the gate fence with atomics instead of membarrier (tests)" },
	[GS_S_AGENT_NO_DUMP_RUNNING] = { "GPUSNAP_AGENT_NO_DUMP_RUNNING", NULL, GS_SET_BOOL, AGENT, "0", 0, 0, NULL, true,
					 "in the app: 1 hides the agent's dump-while-running (tests the older path)" },
	[GS_S_PLUGIN_CONFIG] = { "GPUSNAP_PLUGIN_CONFIG", NULL, GS_SET_PATH, PLUGIN, NULL, 0, 0, NULL, false,
				 "the CRIU plugin's configuration file (set and empty: none; default "
				 "gpusnap_criu.conf beside the plugin, else /etc/gpusnap/criu-plugin.conf)" },
	[GS_S_PLUGIN_MAP] = { "GPUSNAP_PLUGIN_MAP", "map", GS_SET_STRING, PLUGIN, NULL, 0, 0, NULL, false,
			      "CRIU plugin, restore: the GPU map, FROM=TO pairs of GPU indexes or UUIDs" },
	[GS_S_PLUGIN_NO_VERIFY] = { "GPUSNAP_PLUGIN_NO_VERIFY", "no_verify", GS_SET_BOOL, PLUGIN, "0", 0, 0, NULL, false,
				    "CRIU plugin, restore: 1 skips the checksum pass" },
	[GS_S_PLUGIN_DRIVER] = { "GPUSNAP_PLUGIN_DRIVER", "driver", GS_SET_BOOL, PLUGIN, "0", 0, 0, NULL, false,
				 "CRIU plugin, dump: 1 takes the driver path even where an agent runs" },
	[GS_S_PLUGIN_TIMEOUT] = { "GPUSNAP_PLUGIN_TIMEOUT", "timeout", GS_SET_SECONDS, PLUGIN, "30", 0, NOLIMIT, NULL,
				  false, "CRIU plugin, dump: seconds to wait for running GPU work (0: no limit)" },
	[GS_S_PLUGIN_LEAVE_RUNNING] = { "GPUSNAP_PLUGIN_LEAVE_RUNNING", "leave_running", GS_SET_BOOL, PLUGIN, NULL, 0, 0,
					NULL, false,
					"CRIU plugin, dump: whether the process runs on (default: CRIU's own option)" },
	[GS_S_PLUGIN_COMPRESS] = { "GPUSNAP_PLUGIN_COMPRESS", "compress", GS_SET_STRING, PLUGIN, NULL, 0, 0, NULL, false,
				   "CRIU plugin, dump: compress the GPU data the agents write, lz4|zstd[:LEVEL] as dump "
				   "--compress (default none)" },
};

struct slot {
	char *raw; /* as read, NULL unset */
	bool good; /* set, non-empty, parsed */
	union gs_setting_value v;
	char bad[256]; /* the one line for a bad value, "" none */
};

static struct slot slots[GS_S_COUNT];
static union gs_setting_value defaults[GS_S_COUNT];
static int loaded; /* atomic */
static pthread_once_t lazy_once = PTHREAD_ONCE_INIT;

const struct gs_setting_def *gs_setting_def(enum gs_setting_id id)
{
	return (unsigned)id < GS_S_COUNT ? &table[id] : NULL;
}

int gs_setting_find(const char *name, bool key)
{
	for (int i = 0; i < GS_S_COUNT; i++) {
		const char *n = key ? table[i].key : table[i].name;
		if (n && !strcmp(n, name))
			return i;
	}
	return -1;
}

static int parse_choice(const char *choices, const char *v)
{
	int i = 0;
	for (const char *p = choices; *p; i++) {
		size_t len = strcspn(p, "|");
		if (strlen(v) == len && !strncasecmp(p, v, len))
			return i;
		p += len;
		p += *p == '|';
	}
	return -1;
}

/* A size as the docs write it: "256M" where it is a whole number of MiB, else bytes. */
static const char *size_text(double b, char *buf, size_t n)
{
	static const char units[] = "KMGT";
	uint64_t v = (uint64_t)b;
	int u = -1;
	while (u < 3 && v && !(v % 1024)) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, n, "%llu", (unsigned long long)v);
	else
		snprintf(buf, n, "%llu%c", (unsigned long long)v, units[u]);
	return buf;
}

const char *gs_setting_accepts(enum gs_setting_id id, char *buf, size_t n)
{
	const struct gs_setting_def *d = &table[id];
	char lo[32], hi[32];
	switch (d->type) {
	case GS_SET_BOOL:
		snprintf(buf, n, "0 or 1 (or no, yes, false, true, off, on)");
		break;
	case GS_SET_INT:
		snprintf(buf, n, "a number from %.0f to %.0f", d->min, d->max);
		break;
	case GS_SET_SIZE:
		if (isinf(d->max))
			snprintf(buf, n, "a size (bytes, or with K, M, G or T)");
		else
			snprintf(buf, n, "a size from %s to %s", size_text(d->min, lo, sizeof(lo)),
				 size_text(d->max, hi, sizeof(hi)));
		break;
	case GS_SET_SECONDS:
		snprintf(buf, n, d->min > 0 ? "a number of seconds > 0" : "a number of seconds (0 or more)");
		break;
	case GS_SET_ENUM: {
		size_t used = (size_t)snprintf(buf, n, "one of ");
		for (const char *p = d->choices; *p && used < n;) {
			size_t len = strcspn(p, "|");
			used += (size_t)snprintf(buf + used, n - used, "%s%.*s", p == d->choices ? "" : ", ", (int)len, p);
			p += len;
			p += *p == '|';
		}
		break;
	}
	case GS_SET_PATH:
		snprintf(buf, n, "a path");
		break;
	case GS_SET_SHARE:
		snprintf(buf, n, "a size (bytes, or with K, M, G or T) or a share of the host's memory (0%% to 100%%)");
		break;
	default:
		snprintf(buf, n, "text");
		break;
	}
	return buf;
}

int gs_setting_parse(enum gs_setting_id id, const char *text, union gs_setting_value *out, char *msg, size_t n)
{
	const struct gs_setting_def *d = &table[id];
	union gs_setting_value v = { 0 };
	bool ok = true;
	switch (d->type) {
	case GS_SET_BOOL:
		ok = !gs_parse_bool(text, &v.b);
		break;
	case GS_SET_INT:
		ok = !gs_parse_int(text, &v.i) && v.i >= d->min && v.i <= d->max;
		break;
	case GS_SET_SIZE:
		ok = !gs_parse_size(text, &v.size) && (double)v.size >= d->min && (double)v.size <= d->max;
		break;
	case GS_SET_SECONDS:
		ok = !gs_parse_seconds(text, &v.seconds) && v.seconds >= d->min && v.seconds <= d->max;
		break;
	case GS_SET_ENUM:
		ok = (v.choice = parse_choice(d->choices, text)) >= 0;
		break;
	case GS_SET_PATH:
		ok = strlen(text) < PATH_MAX;
		break;
	case GS_SET_STRING:
		break;
	case GS_SET_SHARE: {
		size_t len = strlen(text);
		char *end = NULL;
		double pct = len > 1 && text[len - 1] == '%' ? strtod(text, &end) : -1;
		uint64_t bytes;
		ok = end ? end == text + len - 1 && pct >= 0 && pct <= 100 : !gs_parse_size(text, &bytes);
		break;
	}
	}
	if (!ok) {
		char shown[96], acc[160];
		gs_printable(shown, sizeof(shown), text);
		if (d->type == GS_SET_PATH)
			snprintf(msg, n, "%s='%.64s...' is longer than a path may be (%d bytes)", d->name, shown,
				 PATH_MAX - 1);
		else
			snprintf(msg, n, "%s='%s' is not %s", d->name, shown, gs_setting_accepts(id, acc, sizeof(acc)));
		return -1;
	}
	*out = v;
	return 0;
}

static void set_defaults(void)
{
	char msg[256];
	for (int i = 0; i < GS_S_COUNT; i++)
		if (table[i].dflt && table[i].type != GS_SET_STRING && table[i].type != GS_SET_PATH &&
		    table[i].type != GS_SET_SHARE)
			gs_setting_parse((enum gs_setting_id)i, table[i].dflt, &defaults[i], msg, sizeof(msg));
}

int gs_settings_load(enum gs_settings_mode mode, struct gs_err *err)
{
	set_defaults();
	int rc = 0;
	for (int i = 0; i < GS_S_COUNT; i++) {
		struct slot *s = &slots[i];
		free(s->raw);
		memset(s, 0, sizeof(*s));
		s->v = defaults[i];
		const char *v = getenv(table[i].name);
		if (!v)
			continue;
		s->raw = strdup(v);
		/* plugin keys are parsed with the file's lines, by core/plugin_config.c */
		if (!*v || table[i].scope == GS_SCOPE_PLUGIN)
			continue;
		union gs_setting_value pv;
		if (gs_setting_parse((enum gs_setting_id)i, v, &pv, s->bad, sizeof(s->bad))) {
			if (mode == GS_SETTINGS_COMMAND && (table[i].scope & GS_SCOPE_CLI) && !rc)
				rc = gs_fail(err, GS_E_USAGE, "%s", s->bad);
			continue;
		}
		s->v = pv;
		s->good = true;
	}
	__atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
	return rc;
}

void gs_settings_warn(void)
{
	for (int i = 0; i < GS_S_COUNT; i++)
		if (slots[i].bad[0])
			pr_warn("%s: using the default", slots[i].bad);
}

static void lazy_load(void)
{
	if (!__atomic_load_n(&loaded, __ATOMIC_ACQUIRE))
		gs_settings_load(GS_SETTINGS_AGENT, NULL);
}

static const struct slot *get(enum gs_setting_id id)
{
	if (!__atomic_load_n(&loaded, __ATOMIC_ACQUIRE))
		pthread_once(&lazy_once, lazy_load);
	return &slots[(unsigned)id < GS_S_COUNT ? id : 0];
}

bool gs_setting_is_set(enum gs_setting_id id) { return get(id)->good; }
bool gs_setting_bool(enum gs_setting_id id) { return get(id)->v.b; }
int gs_setting_int(enum gs_setting_id id) { return get(id)->v.i; }
uint64_t gs_setting_size(enum gs_setting_id id) { return get(id)->v.size; }
double gs_setting_seconds(enum gs_setting_id id) { return get(id)->v.seconds; }
int gs_setting_choice(enum gs_setting_id id) { return get(id)->v.choice; }

const char *gs_setting_str(enum gs_setting_id id)
{
	const struct slot *s = get(id);
	if (s->good)
		return s->raw;
	return table[id].type == GS_SET_PATH || table[id].type == GS_SET_STRING || table[id].type == GS_SET_SHARE
		       ? table[id].dflt : NULL;
}

const char *gs_setting_raw(enum gs_setting_id id)
{
	return get(id)->raw;
}

static void md_cell(FILE *out, const char *s)
{
	for (; *s; s++) {
		if (*s == '|')
			fputc('\\', out);
		fputc(*s, out);
	}
}

void gs_settings_markdown(FILE *out)
{
	fputs("| Variable | Plugin key | Accepts | Default | Read by | What it sets |\n", out);
	fputs("|---|---|---|---|---|---|\n", out);
	for (int i = 0; i < GS_S_COUNT; i++) {
		const struct gs_setting_def *d = &table[i];
		if (d->hidden)
			continue;
		char acc[160];
		fprintf(out, "| `%s` | %s%s%s | ", d->name, d->key ? "`" : "", d->key ? d->key : "", d->key ? "`" : "");
		md_cell(out, gs_setting_accepts((enum gs_setting_id)i, acc, sizeof(acc)));
		fprintf(out, " | %s%s%s | ", d->dflt ? "`" : "", d->dflt ? d->dflt : "", d->dflt ? "`" : "");
		static const char *const readers[] = { "gpusnap", "agent", "plugin" };
		const char *sep = "";
		for (int r = 0; r < 3; r++)
			if (d->scope & (1u << r)) {
				fprintf(out, "%s%s", sep, readers[r]);
				sep = ", ";
			}
		fputs(" | ", out);
		md_cell(out, d->doc);
		fputs(" |\n", out);
	}
}
