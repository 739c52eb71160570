/*
 * plugin.h - gpusnap_criu.so's state, shared by its hooks: the CUDA
 * processes of the tree CRIU dumps (plugin_dump.c) or the gpusnap images it
 * restores (plugin_restore.c), the driver session, CRIU's log.
 *
 * One CRIU run loads the plugin once and calls its hooks from its main
 * thread only: the state is one static struct, not locked.
 */
#ifndef GPUSNAP_CRIU_PLUGIN_H
#define GPUSNAP_CRIU_PLUGIN_H

#include <stdbool.h>
#include <sys/types.h>

#include "cli/agent_client.h"
#include "cli/cli.h"
#include "common/err.h"
#include "core/plugin_config.h"
#include "cuda/checkpoint.h"
#include "image/image.h"

/* The plugin's name in CRIU's log and in the image's inventory (its "required plugins"). */
#define GSP_NAME "gpusnap"
/* The folder of CRIU's image directory holding one gpusnap image per CUDA process, named by its PID. */
#define GSP_SUBDIR "gpusnap"

/* One CUDA process of the dumped tree. */
struct gsp_proc {
	pid_t pid;   /* as CRIU sees it */
	pid_t nspid; /* in its own PID namespace: the image's name, what it has again after restore */
	char comm[64];
	struct cli_agent agent;
	struct gs_image_tmp *tmp; /* its image, until published */
	bool agent_gated;         /* several agents: its gate was closed before any dumped (opened on undo) */
	bool agent_dumped;        /* the agent streamed its data into tmp and holds it released */
	bool agent_staged;        /* an older agent: suspended into staging memory, the image not written */
	bool published;
	bool sync_later;          /* published unsynced (--leave-running): the resume helper syncs it after the resume */
};

/* One image being restored. */
struct gsp_image {
	pid_t nspid;
	struct gs_image *img;
	bool agent;
	CUcheckpointGpuPair *pairs;
	unsigned npairs;
	bool done; /* RESUME_DEVICES_LATE handled its process */
	/*
	 * Its image records GPU memory shared with other processes of the tree
	 * (share.export / share.import): its agent loads with theirs, as one
	 * job (plugin_restore.c). pid: the restored task, once RESUME_DEVICES_LATE
	 * put it back on the GPU; path: its image directory for the agent.
	 */
	bool shares;
	pid_t pid;
	char *path;
};

struct gsp_state {
	int stage;
	bool active;   /* the driver loaded: the hooks serve CUDA processes */
	bool session;  /* s is open: in the driver helper only */
	struct cli_session s; /* in criu: only gpus and ngpus, the helper's list */
	int images_fd; /* CRIU's image directory */
	char images_dir[4096];
	struct gs_plugin_config cfg; /* the settings of this run: file, then environment (plugin_init) */
	/* dump */
	bool tree_seen; /* the first PAUSE_DEVICES walked the tree */
	bool driver_suspended;
	bool leave_running;
	bool leave_stopped; /* criu --leave-stopped: refused for a tree with CUDA processes */
	bool shared; /* the agents of the tree share GPU memory (cli/share_tree.h): linked, let go, resumed as one */
	struct gsp_proc *procs;
	int nprocs;
	struct gs_ckpt_proc *ck;
	/* restore */
	struct gsp_image *images;
	int nimages;
	/*
	 * Images that share memory (gsp_image.shares): nshared of them, nready
	 * put back on the GPU and waiting for the others; their agents load
	 * together once all are (shared_loading), else the ready ones are killed.
	 */
	int nshared, nready;
	bool shared_loading;
	/*
	 * The checksum pass runs in a process of its own (the verifier) while
	 * CRIU restores the tasks; its result comes through verify_rd and is
	 * taken at the first RESUME_DEVICES_LATE. verifier is 0 when none runs;
	 * verify_rc is its result once taken (verified true).
	 */
	pid_t verifier;
	int verify_rd;
	bool verified;
	int verify_rc;
	struct gs_err verify_err;
	/*
	 * The helpers that have agents load their GPU data hold loads_wr (each
	 * writes one byte, 0 or 1 for a failed load, before it ends); the exit
	 * hook reads loads_rd until they all ended. -1 when none was started.
	 */
	int loads_rd, loads_wr;
	int nloads;
	/*
	 * The driver helper (gsp_driver_start), forked at the stage's init:
	 * requests through driver_req, replies through driver_rep. 0 / -1 when
	 * none runs.
	 */
	pid_t driver;
	int driver_req, driver_rep;
};

extern struct gsp_state gsp;

/* CRIU's log (or stderr where the criu binary exports none): one line, "gpusnap: " in front. */
void gsp_log(unsigned level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define gsp_err(...) gsp_log(1, __VA_ARGS__)
#define gsp_warn(...) gsp_log(2, __VA_ARGS__)
#define gsp_info(...) gsp_log(3, __VA_ARGS__)

/*
 * Forks a helper that outlives the hook and is no child of criu (CRIU takes
 * the end of a child of its for a restored task that died): an intermediate
 * child forks the helper and ends at once, reaped here. Returns 0 in the
 * helper, 1 in the caller once the helper runs, -1 (errno set) when either
 * fork failed.
 */
int gsp_fork_detached(void);
/* A symbol of the criu binary, NULL where it has none. */
void *gsp_criu_symbol(const char *name);
/* Opens the driver session (gsp.s), in the driver helper only. GS_E_NO_DRIVER where libcuda.so.1 is missing. */
int gsp_session_open(struct gs_err *err);
/* The innermost PID namespace's PID of pid (NSpid's last field), pid itself where unknown. */
pid_t gsp_ns_pid(pid_t pid);

/*
 * The driver's restore thread tid of a task CRIU holds stopped under its
 * ptrace, let run alone: its signals blocked (none of the app's handlers
 * runs on it), CRIU's ptrace options cleared. gsp_run_alone_stop stops it
 * again and puts mask and options back as CRIU set them (nothing when it
 * was never started). Called by criu's process, the tracer.
 */
struct gsp_traced_thread {
	pid_t tid;
	uint64_t saved_mask;
	bool running;
};
int gsp_run_alone_start(pid_t tid, struct gsp_traced_thread *t, struct gs_err *err);
int gsp_run_alone_stop(struct gsp_traced_thread *t, struct gs_err *err);

/*
 * The driver helper (plugin_driver.c): a process of its own, forked from
 * criu, makes every driver call, so that criu stays single-threaded
 * (libcuda's cuInit starts a thread; CRIU's setns into a container's mount
 * namespace is refused to a multithreaded process). gsp_driver_start forks
 * it and waits until it opened the driver (GS_E_NO_DRIVER and the like when
 * it could not: then none runs) and listed the GPUs into gsp.s.gpus;
 * gsp_driver_stop kills it and frees the list. The calls below are the
 * gs_ckpt_* and cli_process_vram_per_gpu calls of the same names, made there.
 */
int gsp_driver_start(struct gs_err *err);
void gsp_driver_stop(void);
int gsp_driver_state(pid_t pid, CUprocessState *st, struct gs_err *err);
int gsp_driver_suspend(struct gs_ckpt_proc *procs, int n, double timeout_s, struct gs_err *err);
int gsp_driver_resume(struct gs_ckpt_proc *procs, int n, struct gs_err *err);
/* pid's bytes on each GPU added to per_gpu (CLI_MAX_GPUS), *mask the GPUs it holds memory on; its total */
uint64_t gsp_driver_vram(pid_t pid, uint64_t *per_gpu, uint64_t *mask);
/*
 * The driver's restore (with pairs, none: the same GPUs) and unlock of pid
 * while CRIU holds the process stopped under its ptrace: the driver's
 * restore thread is let run alone (signals blocked) by criu, the tracer,
 * while the helper makes the calls, then stopped again (what CRIU's own CUDA
 * plugin does).
 */
int gsp_traced_restore(pid_t pid, const CUcheckpointGpuPair *pairs, unsigned npairs, struct gs_err *err);
/* Kills one of the plugin's helper processes and reaps it (SIGCHLD at its default meanwhile); *helper = 0. */
void gsp_end_helper(pid_t *helper);
/* Whole records on the helpers' pipes: false on end of file or error. */
bool gsp_read_exact(int fd, void *buf, size_t n);
bool gsp_write_exact(int fd, const void *buf, size_t n);

/*
 * The agent of pid loads its GPU data from the image at dir: the directory
 * passed as a descriptor where the agent takes one (it may live in another
 * mount namespace), else as the path.
 */
int gsp_agent_resume(pid_t pid, struct cli_agent *ag, const char *dir, struct gs_err *err);

/* Dump (plugin_dump.c). */
int gsp_dump_init(void);
int gsp_pause_devices(int pid);
int gsp_checkpoint_devices(int pid);
void gsp_dump_fini(int ret);

/* Restore (plugin_restore.c). */
int gsp_restore_init(void);
int gsp_resume_devices_late(int pid);
void gsp_restore_fini(int ret);

#endif
