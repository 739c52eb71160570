/*
 * plugin.c - gpusnap_criu.so, a CRIU plugin that carries the GPU state of
 * the CUDA processes CRIU dumps and restores (docs/CRIU.md, "The CRIU
 * plugin"): its descriptor, init and exit, CRIU's log, the driver session
 * (opened in the driver helper, plugin_driver.c), and letting the driver's
 * restore thread run while CRIU holds the process.
 *
 * The hooks themselves are in plugin_dump.c and plugin_restore.c. Nothing
 * here prints except through CRIU's log, and nothing exits: a failure is a
 * hook's return value, which CRIU acts on.
 */
#include "criu_plugin/plugin.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/proc.h"
#include "common/printable.h"
#include "core/protocol.h"
#include "criu_plugin/criu_plugin_abi.h"
#include "cuda/gpus.h"
#include "cuda/nvml.h"

struct gsp_state gsp = { .images_fd = -1, .verify_rd = -1, .driver_req = -1, .driver_rep = -1 };

void *gsp_criu_symbol(const char *name)
{
	return dlsym(RTLD_DEFAULT, name);
}

void gsp_log(unsigned level, const char *fmt, ...)
{
	char line[GS_ERR_MSG_MAX + 64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	gs_printable(line, sizeof(line), line); /* one line in CRIU's log, whatever it quotes */
	static gsp_print_on_level_t *print;
	static bool looked;
	if (!looked) {
		print = (gsp_print_on_level_t *)gsp_criu_symbol("print_on_level");
		looked = true;
	}
	if (print)
		print(level, "gpusnap: %s\n", line);
	else
		fprintf(stderr, "gpusnap: %s\n", line);
}

int gsp_fork_detached(void)
{
	pid_t child = fork();
	if (child < 0)
		return -1;
	if (child == 0) {
		pid_t helper = fork();
		if (helper == 0)
			return 0; /* the helper */
		_exit(helper < 0 ? 1 : 0);
	}
	int st = 0;
	while (waitpid(child, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 1;
	errno = EAGAIN;
	return -1;
}

int gsp_session_open(struct gs_err *err)
{
	if (gsp.session)
		return 0;
	struct cli_session *s = &gsp.s;
	memset(s, 0, sizeof(*s));
	/* nvidia-smi's numbering, as the command line uses, so GPU indexes in maps mean the same */
	setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
	unsetenv("CUDA_VISIBLE_DEVICES");
	int rc;
	if ((rc = gs_cuda_load(&s->cu, err)) || (rc = gs_cuda_init(&s->cu, err)) ||
	    (rc = gs_cuda_require_checkpoint(&s->cu, err)) || (rc = gs_gpus_list(&s->cu, &s->gpus, &s->ngpus, err)))
		return rc;
	s->nvml = gs_nvml_open();
	gsp.session = true;
	return 0;
}

pid_t gsp_ns_pid(pid_t pid)
{
	uid_t uid;
	pid_t ns;
	return gs_proc_status_ids(pid, &uid, &ns) ? pid : ns;
}

int gsp_run_alone_start(pid_t tid, struct gsp_traced_thread *t, struct gs_err *err)
{
	memset(t, 0, sizeof(*t));
	t->tid = tid;
	uint64_t block = ~0ULL & ~(1ULL << (SIGTRAP - 1));
	if (ptrace(PTRACE_GETSIGMASK, tid, sizeof(t->saved_mask), &t->saved_mask) ||
	    ptrace(PTRACE_SETSIGMASK, tid, sizeof(block), &block))
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot block the signals of the driver's restore thread %d",
				     (int)tid);
	if (ptrace(PTRACE_SETOPTIONS, tid, NULL, 0) || ptrace(PTRACE_CONT, tid, NULL, 0)) {
		int e = errno;
		ptrace(PTRACE_SETSIGMASK, tid, sizeof(t->saved_mask), &t->saved_mask);
		return gs_fail_errno(err, GS_E_FAILURE, e, "cannot let the driver's restore thread %d run", (int)tid);
	}
	t->running = true;
	return 0;
}

int gsp_run_alone_stop(struct gsp_traced_thread *t, struct gs_err *err)
{
	if (!t->running)
		return 0;
	t->running = false;
	if (ptrace(PTRACE_INTERRUPT, t->tid, NULL, 0))
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot stop the driver's restore thread %d again", (int)t->tid);
	for (;;) {
		int status;
		pid_t w = waitpid(t->tid, &status, __WALL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return gs_fail_errno(err, GS_E_FAILURE, errno, "waiting for the driver's restore thread %d", (int)t->tid);
		if (!WIFSTOPPED(status))
			return gs_fail(err, GS_E_NO_PROCESS, "the driver's restore thread %d ended", (int)t->tid);
		if ((status >> 16) == PTRACE_EVENT_STOP)
			break;
		/* a signal delivered meanwhile: it stays pending in the process, not lost */
		ptrace(PTRACE_CONT, t->tid, NULL, 0);
	}
	if (ptrace(PTRACE_SETOPTIONS, t->tid, NULL, PTRACE_O_SUSPEND_SECCOMP | PTRACE_O_TRACESYSGOOD) ||
	    ptrace(PTRACE_SETSIGMASK, t->tid, sizeof(t->saved_mask), &t->saved_mask))
		return gs_fail_errno(err, GS_E_FAILURE, errno, "cannot hand the driver's restore thread %d back to CRIU",
				     (int)t->tid);
	return 0;
}

int gsp_agent_resume(pid_t pid, struct cli_agent *ag, const char *dir, struct gs_err *err)
{
	return cli_agent_resume_image(pid, ag, dir, false, false, err);
}

/*
 * The settings of this run (docs/CRIU.md, "Settings"): the file named by
 * GPUSNAP_PLUGIN_CONFIG, else gpusnap_criu.conf beside this module (one
 * plugin folder, one set of settings: runc's per-container libdir), else
 * /etc/gpusnap/criu-plugin.conf; then criu's environment over it.
 */
static int load_settings(const char *what)
{
	char beside[4096] = "";
	Dl_info self;
	if (dladdr((void *)&gsp, &self) && self.dli_fname && strchr(self.dli_fname, '/')) {
		snprintf(beside, sizeof(beside), "%s", self.dli_fname);
		*strrchr(beside, '/') = '\0';
		size_t n = strlen(beside);
		snprintf(beside + n, sizeof(beside) - n, "/%s", GS_PLUGIN_CONFIG_NAME);
	}
	const char *search[] = { beside[0] ? beside : NULL, GS_PLUGIN_CONFIG_ETC };
	struct gs_err err = { 0 };
	if (gs_plugin_config_load(&gsp.cfg, search, 2, &err)) {
		gsp_err("refusing the %s: %s", what, err.msg);
		return -1;
	}
	if (gsp.cfg.file[0])
		gsp_info("settings from '%s'", gsp.cfg.file);
	return 0;
}

static int plugin_init(int stage)
{
	gsp.stage = stage;
	gsp.images_fd = -1;
	gsp.loads_rd = gsp.loads_wr = -1;
	gsp.verify_rd = -1;
	gsp.driver_req = gsp.driver_rep = -1;
	/* pre-dump leaves the GPU alone: its pages are not the process's data while it runs */
	if (stage == GSP_STAGE_PRE_DUMP)
		return 0;
	if ((stage == GSP_STAGE_DUMP || stage == GSP_STAGE_RESTORE) &&
	    load_settings(stage == GSP_STAGE_DUMP ? "dump" : "restore"))
		return -1;
	gsp_criu_get_image_dir_t *get_dir = (gsp_criu_get_image_dir_t *)gsp_criu_symbol("criu_get_image_dir");
	gsp.images_fd = get_dir ? get_dir() : -1;
	if (stage == GSP_STAGE_DUMP)
		return gsp_dump_init();
	if (stage == GSP_STAGE_RESTORE)
		return gsp_restore_init();
	return 0;
}

static void plugin_exit(int stage, int ret)
{
	if (stage == GSP_STAGE_DUMP)
		gsp_dump_fini(ret);
	else if (stage == GSP_STAGE_RESTORE)
		gsp_restore_fini(ret);
	gsp_driver_stop();
}

static int pause_devices(int pid)
{
	return gsp.active ? gsp_pause_devices(pid) : -ENOTSUP;
}

static int checkpoint_devices(int pid)
{
	return gsp.active ? gsp_checkpoint_devices(pid) : -ENOTSUP;
}

static int resume_devices_late(int pid)
{
	return gsp.active ? gsp_resume_devices_late(pid) : -ENOTSUP;
}

__attribute__((visibility("default"))) struct gsp_criu_plugin_desc CR_PLUGIN_DESC = {
	.name = GSP_NAME,
	.init = plugin_init,
	.exit = plugin_exit,
	.version = GSP_CRIU_PLUGIN_VERSION,
	.max_hooks = GSP_HOOKS,
	.hooks = {
		[GSP_HOOK_PAUSE_DEVICES] = (void *)pause_devices,
		[GSP_HOOK_CHECKPOINT_DEVICES] = (void *)checkpoint_devices,
		[GSP_HOOK_RESUME_DEVICES_LATE] = (void *)resume_devices_late,
	},
};
