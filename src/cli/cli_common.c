/*
 * cli_common.c - helpers shared by the subcommands (see cli.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/interrupt.h"
#include "common/proc.h"
#include "common/settings.h"
#include "common/util.h"
#include "cuda/checkpoint.h"

int cli_report_error(const struct gs_err *err)
{
	fprintf(stderr, "gpusnap: %s\n", err->msg[0] ? err->msg : gs_exit_name(err->code));
	cli_json_note_error(err->code ? err->code : GS_E_FAILURE, err->msg);
	return err->code ? err->code : GS_E_FAILURE;
}

struct gs_err cli_settings_err;

void (*cli_parse_hook)(const struct gs_option *opts, const char *const *usage, int flags);

int cli_parse(int argc, char **argv, const struct gs_option *opts, const char *const *usage, int flags, int *nargs)
{
	struct gs_err err = { 0 };
	if (cli_parse_hook) {
		cli_parse_hook(opts, usage, flags);
		*nargs = 0;
		return GS_PARSE_HELP;
	}
	const char *cmd = argv[0]; /* the parser moves positional arguments over it */
	int rc = gs_parse_options(argc, argv, opts, flags, nargs, &err);
	if (rc == GS_PARSE_HELP) {
		gs_print_usage(stdout, usage, opts);
		return rc;
	}
	if (rc == GS_E_USAGE)
		return cli_usage_error(cmd, "%s", err.msg);
	if (!rc)
		cli_json_note_options(cmd, opts);
	/* a bad setting (main read them): reported here, so -h still answers and --json gets its document */
	if (!rc && cli_settings_err.code)
		return cli_report_error(&cli_settings_err);
	return rc ? cli_report_error(&err) : 0;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	char msg[GS_ERR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "gpusnap %s: %s (see gpusnap %s --help)\n", cmd, msg, cmd);
	cli_json_note_error(GS_E_USAGE, msg);
	return GS_E_USAGE;
}

int cli_want_args(const char *cmd, char **args, int nargs, int want, const char *what)
{
	if (nargs < want)
		return cli_usage_error(cmd, "%s is required", what);
	if (nargs > want)
		return cli_usage_error(cmd, "unexpected argument '%s'", args[want]);
	return 0;
}

int cli_session_open(struct cli_session *s, struct gs_err *err)
{
	memset(s, 0, sizeof(*s));
	/* nvidia-smi's numbering, whatever the caller's environment says */
	setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
	unsetenv("CUDA_VISIBLE_DEVICES");
	int rc = gs_cuda_load(&s->cu, err);
	if (rc)
		return rc;
	if ((rc = gs_cuda_init(&s->cu, err)))
		return rc;
	if ((rc = gs_gpus_list(&s->cu, &s->gpus, &s->ngpus, err)))
		return rc;
	s->nvml = gs_nvml_open();
	return 0;
}

void cli_session_close(struct cli_session *s)
{
	gs_nvml_close(s->nvml);
	free(s->gpus);
	s->nvml = NULL;
	s->gpus = NULL;
}

void cli_vram_read(struct cli_session *s, struct cli_vram *v)
{
	memset(v, 0, sizeof(*v));
	if (!s->nvml)
		return;
	struct gs_nvml_gpu g[CLI_MAX_GPUS];
	int n = gs_nvml_gpus(s->nvml, g, CLI_MAX_GPUS);
	v->ngpus = n < CLI_MAX_GPUS ? n : CLI_MAX_GPUS;
	for (int i = 0; i < v->ngpus; i++)
		v->gpu_used[i] = g[i].used_bytes;
	v->known = v->ngpus > 0;
}

uint64_t cli_process_vram_per_gpu(struct cli_session *s, pid_t pid, uint64_t *per_gpu, uint64_t *on_gpu_mask)
{
	uint64_t total = 0;
	if (on_gpu_mask)
		*on_gpu_mask = 0;
	for (int i = 0; i < s->ngpus && i < CLI_MAX_GPUS; i++) {
		uint64_t b = 0;
		if (gs_nvml_process_bytes(s->nvml, (unsigned)i, pid, &b) && b) {
			total += b;
			if (per_gpu)
				per_gpu[i] += b;
			if (on_gpu_mask)
				*on_gpu_mask |= 1ULL << i;
		}
	}
	return total;
}

uint64_t cli_process_vram(struct cli_session *s, pid_t pid, uint64_t *on_gpu_mask)
{
	return cli_process_vram_per_gpu(s, pid, NULL, on_gpu_mask);
}

int cli_driver_multi_gpu_check(struct cli_session *s, pid_t pid, const uint64_t *on_gpu_mask, bool allowed,
			       struct gs_err *err)
{
	uint64_t mask = on_gpu_mask ? *on_gpu_mask : 0;
	if (!on_gpu_mask)
		cli_process_vram(s, pid, &mask);
	return gs_ckpt_refuse_multi_gpu(pid, mask, allowed || gs_setting_bool(GS_S_MULTI_GPU_DRIVER), err);
}

struct cli_progress {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop, printed;
	const char *what;
	double start;
};

static void *progress_main(void *arg)
{
	struct cli_progress *p = arg;
	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 200 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&p->cond, &p->lock, &ts);
		double el = gs_now() - p->start;
		if (!p->stop && el >= 1.0) {
			int phase = __atomic_load_n(&gs_ckpt_current_phase, __ATOMIC_RELAXED);
			int sig = cli_signal_caught();
			/* a signal is obeyed at the end of the step: say so, or the user presses Ctrl-C again */
			fprintf(stderr, "\r\033[Kgpusnap: %s: %s %.1f s%s%s%s", p->what, gs_ckpt_phase_name((enum gs_ckpt_phase)phase),
				el, sig ? " (" : "", sig ? cli_signal_name(sig) : "", sig ? ": ending after this step)" : "");
			fflush(stderr);
			p->printed = true;
		}
	}
	if (p->printed)
		fprintf(stderr, "\r\033[K");
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

struct cli_progress *cli_progress_start(const char *what)
{
	if (!isatty(2))
		return NULL;
	struct cli_progress *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->what = what;
	p->start = gs_now();
	if (pthread_create(&p->thread, NULL, progress_main, p)) {
		free(p);
		return NULL;
	}
	return p;
}

void cli_progress_stop(struct cli_progress *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	free(p);
}

struct cuda_list {
	const pid_t *pids;
	int n;
};

/* Holds the GPU's device files without being a CUDA process (nor this gpusnap). */
static bool device_files_without_cuda(pid_t process, void *arg)
{
	const struct cuda_list *c = arg;
	if (process == getpid())
		return false;
	for (int k = 0; k < c->n; k++)
		if (c->pids[k] == process)
			return false;
	return gs_proc_holds_gpu_device(process);
}

int cli_tree_check_device_files(pid_t root, const pid_t *cuda, int ncuda, struct gs_err *err)
{
	struct cuda_list c = { cuda, ncuda };
	pid_t p;
	int rc = gs_proc_tree_find(root, device_files_without_cuda, &c, &p, err);
	if (rc || !p)
		return rc;
	char comm[64];
	gs_proc_comm(p, comm, sizeof(comm));
	return gs_fail(err, GS_E_STATE,
		       "process %d (%s) in the tree of %d holds the GPU's device files but is no CUDA process (a fork "
		       "child of one inherits them, CUDA does not; NVML opens them too): CRIU cannot dump them; let it "
		       "exit first, or start the job with gpusnap run, whose agent drops them in fork children",
		       (int)p, comm, (int)root);
}

pid_t cli_tree_other_cuda(struct cli_session *s, pid_t pid)
{
	pid_t *all, found = 0;
	size_t n;
	struct gs_err e = { 0 };
	if (gs_proc_tree(pid, &all, &n, &e))
		return 0;
	for (size_t i = 0; i < n && !found; i++) {
		CUprocessState st;
		/* all[0] is pid itself; gpusnap is in the tree when run from it */
		if (all[i] != pid && all[i] != getpid() && gs_ckpt_get_state(&s->cu, all[i], &st, &e) == 0)
			found = all[i];
	}
	free(all);
	return found;
}

int cli_targets(struct cli_session *s, const char *pid_arg, bool tree, pid_t **out, int *nout, struct gs_err *err)
{
	int pid;
	if (gs_parse_pid(pid_arg, &pid))
		return gs_fail(err, GS_E_USAGE, "'%s' is not a process ID", pid_arg);
	int rc = gs_proc_check(pid, err);
	if (rc)
		return rc;
	if (!tree) {
		CUprocessState st;
		rc = gs_ckpt_get_state(&s->cu, pid, &st, err);
		/*
		 * Stopped or frozen: the operation's own calls say so, after its lock
		 * has named any gpusnap at work on it (a restore holds its process
		 * stopped), which is the better answer then.
		 */
		if (rc == GS_E_STATE) {
			memset(err, 0, sizeof(*err));
			rc = 0;
		}
		if (rc) {
			pid_t child = rc == GS_E_NOT_CUDA ? cli_tree_other_cuda(s, pid) : 0;
			/* a launcher (torchrun, a shell) named instead of its ranks */
			if (child)
				cli_err_append(err, "; process %d under it is one: --tree acts on every CUDA process under %d",
					       (int)child, pid);
			return rc;
		}
		*out = malloc(sizeof(pid_t));
		if (!*out)
			return gs_fail(err, GS_E_FAILURE, "out of memory");
		(*out)[0] = pid;
		*nout = 1;
		return 0;
	}
	pid_t *all;
	size_t nall;
	if ((rc = gs_proc_tree(pid, &all, &nall, err)))
		return rc;
	int n = 0;
	for (size_t i = 0; i < nall; i++) {
		CUprocessState st;
		/* gpusnap itself has called cuInit and is in the tree when run from it: locking it would deadlock */
		if (all[i] == getpid())
			continue;
		/* a zombie of the tree (a child its parent has not reaped) is gone: nothing of it to act on */
		if (!gs_proc_alive(all[i]))
			continue;
		struct gs_err e = { 0 };
		int r = gs_ckpt_get_state(&s->cu, all[i], &st, &e);
		if (r == 0)
			all[n++] = all[i];
		else if (r != GS_E_NOT_CUDA && r != GS_E_NO_PROCESS) {
			free(all);
			*err = e;
			return r;
		}
	}
	if (n == 0) {
		free(all);
		char comm[64];
		gs_proc_comm(pid, comm, sizeof(comm));
		return gs_fail(err, GS_E_NOT_CUDA, "no CUDA process in the tree of process %d (%s)", pid, comm);
	}
	*out = all;
	*nout = n;
	return 0;
}
