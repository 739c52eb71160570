/*
 * cli.h - what the subcommands of the gpusnap command share: the command
 * table entry type, error printing, the driver/NVML session, GPU memory
 * snapshots for reports, and the progress line.
 */
#ifndef GPUSNAP_CLI_CLI_H
#define GPUSNAP_CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"
#include "common/json.h"
#include "common/options.h"
#include "common/printable.h" /* every command prints text that others control (a process's name) through it */
#include "cuda/driver.h"
#include "cuda/gpus.h"
#include "cuda/nvml.h"

/*
 * What a command's manual page says beyond its usage and option table, kept
 * beside them in its cmd_*.c (cli_doc.c writes the page and the completion).
 */
struct cli_doc_exit {
	int code;
	const char *text; /* NULL ends the list */
};
struct cli_doc_example {
	const char *command; /* NULL ends the list */
	const char *text;
};
struct cli_doc {
	const char *args;        /* the positional arguments, for completion: "PID", "PID PID", "DIR", "COMMAND", "a|b" or NULL */
	const char *description; /* paragraphs, separated by a blank line */
	const struct cli_doc_exit *exits;
	const char *env; /* the GPUSNAP_* variables it reads, space-separated (cli_doc.c describes each) */
	const struct cli_doc_example *examples;
};

struct cli_command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
	const struct cli_doc *doc;
};

/* The commands `gpusnap` runs (main.c), in the order its usage lists them. */
extern const struct cli_command cli_commands[];
extern const int cli_ncommands;

/*
 * Set while the documentation is written: cli_parse hands the command's
 * option table and usage to it instead of parsing, and the command returns
 * as after -h. So the table the parser uses is the one the pages show.
 */
/*
 * What main() found wrong in the environment (common/settings.h), code 0 for
 * nothing: cli_parse reports it as the command's error, exit 2, once the
 * options are parsed, before the command does anything.
 */
extern struct gs_err cli_settings_err;
extern void (*cli_parse_hook)(const struct gs_option *opts, const char *const *usage, int flags);

/* Prints "gpusnap: <message>" on stderr and returns err->code. */
int cli_report_error(const struct gs_err *err);
/*
 * Parses options; on -h prints usage (stdout) and returns GS_PARSE_HELP; on
 * an error prints one line, "gpusnap CMD: <what is wrong> (see gpusnap CMD
 * --help)", and returns GS_E_USAGE.
 */
int cli_parse(int argc, char **argv, const struct gs_option *opts, const char *const *usage, int flags, int *nargs);
/* A usage error of command cmd found after parsing: the same one line; returns GS_E_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * The positional arguments a command takes: exactly `want` (named `what`,
 * "PID"), else a usage error naming what is missing or extra. 0 or GS_E_USAGE.
 */
int cli_want_args(const char *cmd, char **args, int nargs, int want, const char *what);

/*
 * --json documents (json_out.c): an object opened with schema
 * ("gpusnap/ACTION/VERSION", docs/json/ACTION.json), action, ok and (on
 * failure) exit_code, error, message. Every document begins here.
 */
void cli_json_begin_outcome(struct gs_json *j, const char *action, int rc, const struct gs_err *err);
/* Closes nothing: prints the finished document on stdout (if valid) and frees the writer. */
void cli_json_print(struct gs_json *j);
/* After parsing: whether command's options (a bool "json") asked for JSON. */
void cli_json_note_options(const char *command, const struct gs_option *opts);
/* The error line a command reported (its code and message), for cli_json_end_command. */
void cli_json_note_error(int code, const char *message);
/* The command's end: with --json and a failure that printed no document, prints the opening part alone. Returns rc. */
int cli_json_end_command(int rc);

/* The driver and NVML, opened once per command. */
struct cli_session {
	struct gs_cuda cu;
	struct gs_nvml *nvml; /* NULL without NVML */
	struct gs_gpu *gpus;
	int ngpus;
};
/* Loads the driver (and NVML), cuInit, lists GPUs. Indexes follow nvidia-smi (PCI order). */
int cli_session_open(struct cli_session *s, struct gs_err *err);
void cli_session_close(struct cli_session *s);

/* GPU memory at one moment: per GPU used bytes, per process per GPU bytes. */
#define CLI_MAX_GPUS 64
struct cli_vram {
	bool known;
	int ngpus;
	uint64_t gpu_used[CLI_MAX_GPUS];
};
void cli_vram_read(struct cli_session *s, struct cli_vram *v);
/* Bytes held by pid on all GPUs; *on_gpu gets a bitmask of GPUs where it holds memory. */
uint64_t cli_process_vram(struct cli_session *s, pid_t pid, uint64_t *on_gpu_mask);
/*
 * Before the driver path takes pid (no agent): refused, in one line, where it
 * holds memory on several GPUs, unless allowed (--multi-gpu-driver) or
 * GPUSNAP_MULTI_GPU_DRIVER=1 (gs_ckpt_refuse_multi_gpu says why). on_gpu_mask:
 * the GPUs it holds memory on where the caller read them already
 * (cli_process_vram_per_gpu), else NULL and they are read here. 0 or GS_E_STATE.
 */
int cli_driver_multi_gpu_check(struct cli_session *s, pid_t pid, const uint64_t *on_gpu_mask, bool allowed,
			       struct gs_err *err);
/* The same, each GPU's bytes also added to per_gpu[i] (CLI_MAX_GPUS entries). */
uint64_t cli_process_vram_per_gpu(struct cli_session *s, pid_t pid, uint64_t *per_gpu, uint64_t *on_gpu_mask);

/* A progress line on a terminal for operations that take over a second. */
struct cli_progress;
struct cli_progress *cli_progress_start(const char *what);
void cli_progress_stop(struct cli_progress *p);

/* Resolves PID (and with `tree` its descendants) to the CUDA processes to act on. */
int cli_targets(struct cli_session *s, const char *pid_arg, bool tree, pid_t **pids, int *n, struct gs_err *err);
/*
 * GS_E_STATE with err set when a process of root's tree that is not one of
 * cuda[] (the CUDA processes the dump handles) maps the GPU's device files
 * or has one open (gs_proc_holds_gpu_device): CRIU would fail on it after
 * the GPU part.
 */
int cli_tree_check_device_files(pid_t root, const pid_t *cuda, int ncuda, struct gs_err *err);
/* A process under pid (not pid, not this gpusnap) that the driver knows as a CUDA process, or 0 when none is. */
pid_t cli_tree_other_cuda(struct cli_session *s, pid_t pid);

/* Records of suspended processes: the GPUs they used, for --map coverage checks on resume. */
int cli_record_suspend(struct cli_session *s, pid_t pid, uint64_t gpu_mask);
/* Fills used[] (up to max) with the UUIDs recorded at suspend; returns count, or -1 if unknown. */
int cli_recorded_gpus(pid_t pid, CUuuid *used, int max);
/* A driver-path resume of pid failed with msg: added to its record (none: -1). */
int cli_record_resume_failure(pid_t pid, const char *msg);
/* The last failed resume that pid's record holds, into msg; false when none (or no record of this process). */
bool cli_recorded_resume_failure(pid_t pid, char *msg, size_t n);
void cli_forget_suspend(pid_t pid);

/*
 * The agent's path into buf: $GPUSNAP_AGENT as given if set, else the real path of libgpusnap.so
 * beside the gpusnap binary (build tree) or in ../lib (installed). 0, or GS_E_AGENT naming what
 * is missing.
 */
int cli_find_agent(char *buf, size_t n, struct gs_err *err);

int cmd_suspend(int argc, char **argv);
int cmd_resume(int argc, char **argv);
int cmd_switch(int argc, char **argv);
int cmd_state(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_restore(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_gc(int argc, char **argv);
int cmd_container_spec(int argc, char **argv);
int cmd_help(int argc, char **argv);
int cmd_completion(int argc, char **argv);
int cmd_doc(int argc, char **argv);

extern const struct cli_doc suspend_doc, resume_doc, state_doc, run_doc, dump_doc, restore_doc, inspect_doc,
	container_spec_doc, help_doc, completion_doc;
extern const struct cli_doc switch_doc, export_doc, gc_doc;

#endif
