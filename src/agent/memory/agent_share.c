/*
 * agent_share.c - GPU memory shared with other processes as POSIX file
 * descriptors, moved together with them (see agent_share.h): the records of
 * exports and imports with the agent's duplicates of their descriptors, the
 * requests gpusnap coordinates them with, and the lifecycle's steps for them.
 */
#define LOG_PREFIX "agent: memory: "
#include "agent/memory/agent_share.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <linux/kcmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/intercept/agent_contexts.h"
#include "agent/intercept/gate.h"
#include "agent/intercept/interpose.h"
#include "agent/memory/agent_app_vmm.h"
#include "common/fault.h"
#include "common/log.h"
#include "core/alloc_registry.h"
#include "core/control_socket.h"
#include "core/share_plan.h"
#include "core/vmm_handles.h"
#include "image/image.h"

/* One descriptor the app exported (fd: the agent's duplicate; -1 once a suspend closed it). */
struct sh_export {
	uint64_t vh;
	int fd;
	bool early; /* memory created again by SHARE_EXPORT, before the resume maps and fills it */
};

/* One import; exporter and export_vh come from gpusnap (SHARE_LINK). */
struct sh_import {
	uint64_t vh;
	int fd;
	pid_t exporter;
	uint64_t export_vh;
	bool linked;
	bool released; /* let go by a suspend or dump: imported again from fd on resume */
};

/* remove_records_of reads both kinds of record through this common beginning */
_Static_assert(offsetof(struct sh_export, vh) == 0 && offsetof(struct sh_import, vh) == 0 &&
		       offsetof(struct sh_export, fd) == sizeof(uint64_t) &&
		       offsetof(struct sh_import, fd) == sizeof(uint64_t),
	       "export and import records begin with vh, then fd");

static struct {
	struct sh_export *ex;
	size_t nex, capex;
	struct sh_import *im;
	size_t nim, capim;
	bool go_ahead; /* SHARE_LINK came: gpusnap saw every process this one shares with */
} sh;

static int let_go(struct gs_agent *a, struct gs_err *err);
static void close_all(void);

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 8;
	void *p = realloc(*arr, nc * elem);
	if (!p)
		return -1;
	*arr = p;
	*cap = nc;
	return 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

int gs_share_note_export_locked(uint64_t vh, int fd)
{
	if (grow((void **)&sh.ex, &sh.capex, sh.nex, sizeof(*sh.ex)))
		return -1;
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dup < 0)
		return -1;
	sh.ex[sh.nex++] = (struct sh_export){ .vh = vh, .fd = dup };
	return 0;
}

int gs_share_note_import_locked(uint64_t vh, int fd)
{
	if (grow((void **)&sh.im, &sh.capim, sh.nim, sizeof(*sh.im)))
		return -1;
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dup < 0)
		return -1;
	sh.im[sh.nim++] = (struct sh_import){ .vh = vh, .fd = dup };
	return 0;
}

/*
 * Removes the records of vh from an array of n records of elem bytes (the
 * export or the import list), closing their duplicates. Both record types
 * begin with vh then fd, which is what this reads of them.
 */
static void remove_records_of(void *arr, size_t *n, size_t elem, uint64_t vh)
{
	char *base = arr;
	size_t k = 0;
	for (size_t i = 0; i < *n; i++) {
		char *rec = base + i * elem;
		if (*(uint64_t *)rec == vh)
			close_fd((int *)(rec + sizeof(uint64_t)));
		else if (k++ != i)
			memcpy(base + (k - 1) * elem, rec, elem);
	}
	*n = k;
}

static void remove_exports_of(uint64_t vh) { remove_records_of(sh.ex, &sh.nex, sizeof(*sh.ex), vh); }

void gs_share_forget_locked(uint64_t vh)
{
	remove_exports_of(vh);
	remove_records_of(sh.im, &sh.nim, sizeof(*sh.im), vh);
}

bool gs_share_created_early_locked(uint64_t vh)
{
	for (size_t i = 0; i < sh.nex; i++)
		if (sh.ex[i].vh == vh && sh.ex[i].early)
			return true;
	return false;
}

void gs_share_released_locked(uint64_t vh)
{
	for (size_t i = 0; i < sh.nex; i++)
		if (sh.ex[i].vh == vh)
			sh.ex[i].early = false;
}

static bool is_ours(int fd)
{
	for (size_t i = 0; i < sh.nex; i++)
		if (sh.ex[i].fd == fd)
			return true;
	for (size_t i = 0; i < sh.nim; i++)
		if (sh.im[i].fd == fd)
			return true;
	return false;
}

/* A descriptor of the app (not the agent's) that is the same open file as ours, or -1. */
static int app_copy_of(int ours)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int found = -1;
	pid_t self = getpid();
	struct dirent *e;
	while (found < 0 && (e = readdir(d))) {
		char *end;
		long n = strtol(e->d_name, &end, 10);
		if (*end || end == e->d_name || n == dirfd(d) || n == ours || is_ours((int)n))
			continue;
		if (syscall(SYS_kcmp, self, self, KCMP_FILE, (unsigned long)n, (unsigned long)ours) == 0)
			found = (int)n;
	}
	closedir(d);
	return found;
}

/* Exports whose descriptor the app keeps are demoted: their memory stays with the driver path. Lock held. */
static void demote_held_exports(void)
{
	for (size_t i = 0; i < sh.nex;) {
		int copy = sh.ex[i].fd >= 0 ? app_copy_of(sh.ex[i].fd) : -1;
		if (copy < 0) {
			i++;
			continue;
		}
		uint64_t vh = sh.ex[i].vh;
		struct gs_vh_handle *h = gs_app_vmm_get_locked(vh);
		char link[64], target[256] = "?";
		snprintf(link, sizeof(link), "/proc/self/fd/%d", copy);
		ssize_t tn = readlink(link, target, sizeof(target) - 1);
		if (tn > 0)
			target[tn] = '\0';
		pr_info("the app keeps descriptor %d (%s) of exported GPU memory %#llx open: left to the driver path", copy,
			target, (unsigned long long)vh);
		if (h)
			gs_app_vmm_mark_unreleasable_locked(h, "is exported and the app keeps its descriptor");
		remove_exports_of(vh);
		i = 0;
	}
}

void gs_share_refresh(void)
{
	gs_app_vmm_lock();
	demote_held_exports();
	gs_app_vmm_unlock();
}

static void answer_shares(struct gs_msg *reply)
{
	demote_held_exports();
	pid_t self = getpid();
	for (size_t i = 0; i < sh.nex; i++) {
		struct gs_share_export e = { .pid = self, .vh = sh.ex[i].vh, .fd = sh.ex[i].fd,
					     .flags = sh.ex[i].fd >= 0 ? GS_SHARE_EXPORT_READY : 0 };
		gs_share_add_export(reply, &e);
	}
	for (size_t i = 0; i < sh.nim; i++) {
		const struct sh_import *s = &sh.im[i];
		struct gs_share_import im = { .pid = self, .vh = s->vh, .fd = s->fd, .exporter = s->exporter,
					      .export_vh = s->export_vh };
		if (!s->released && s->fd >= 0 && app_copy_of(s->fd) >= 0)
			im.flags |= GS_SHARE_IMPORT_APP_HOLDS;
		if (s->linked)
			im.flags |= GS_SHARE_IMPORT_LINKED;
		if (s->released)
			im.flags |= GS_SHARE_IMPORT_RELEASED;
		gs_share_add_import(reply, &im);
	}
}

static struct sh_import *import_of(uint64_t vh)
{
	for (size_t i = 0; i < sh.nim; i++)
		if (sh.im[i].vh == vh)
			return &sh.im[i];
	return NULL;
}

static int take_links(const struct gs_msg *req, struct gs_err *err)
{
	struct gs_share_link *links = NULL;
	size_t n = 0;
	int rc = gs_share_get_links(req, &links, &n, err);
	for (size_t i = 0; !rc && i < n; i++) {
		struct sh_import *im = import_of(links[i].import_vh);
		if (!im) {
			rc = gs_fail(err, GS_E_STATE, "no import %#llx in process %d", (unsigned long long)links[i].import_vh,
				     (int)getpid());
			break;
		}
		im->exporter = links[i].exporter;
		im->export_vh = links[i].export_vh;
		im->linked = true;
	}
	free(links);
	if (!rc)
		sh.go_ahead = true;
	return rc;
}

static bool suspended(const struct gs_agent *a)
{
	enum gs_agent_state s = __atomic_load_n(&a->state, __ATOMIC_ACQUIRE);
	return s == GS_AGENT_SUSPENDED || s == GS_AGENT_DATA_RELEASED;
}

/* SHARE_EXPORT: each released exported allocation created again and exported (once per handle). */
static int export_again(struct gs_agent *a, struct gs_msg *reply, struct gs_err *err)
{
	if (!suspended(a))
		return gs_fail(err, GS_E_STATE, "process %d is not suspended: its exports are as they were", (int)getpid());
	gs_ctx_use_copy_context(a); /* this request's thread has no context; the driver's memory calls want one */
	for (size_t i = 0; i < sh.nex; i++) {
		struct sh_export *e = &sh.ex[i];
		struct gs_vh_handle *h = gs_app_vmm_get_locked(e->vh);
		if (!h || e->fd >= 0)
			continue;
		if (h->real)
			return gs_fail(err, GS_E_STATE, "exported allocation %#llx was not released", (unsigned long long)e->vh);
		int fd = -1;
		CUresult r = gs_app_vmm_create_exported_locked(a, h, &fd);
		if (r != CUDA_SUCCESS) {
			char b[128];
			return gs_fail(err, GS_E_AGENT, "cannot create exported GPU memory %#llx again: %s",
				       (unsigned long long)e->vh, gs_cuda_strerror(&a->cu, r, b, sizeof(b)));
		}
		e->fd = fd;
		e->early = true;
	}
	pid_t self = getpid();
	for (size_t i = 0; i < sh.nex; i++) {
		struct gs_share_export e = { .pid = self, .vh = sh.ex[i].vh, .fd = sh.ex[i].fd,
					     .flags = sh.ex[i].fd >= 0 ? GS_SHARE_EXPORT_READY : 0 };
		gs_share_add_export(reply, &e);
	}
	return 0;
}

/* SHARE_IMPORT: the descriptor to import from on resume (one per request), for the import its link names. */
static int import_fd(struct gs_agent *a, const struct gs_msg *req, struct gs_err *err)
{
	int fd = gs_ctl_take_passed_fd();
	struct gs_share_link *links = NULL;
	size_t n = 0;
	int rc = suspended(a) ? 0 : gs_fail(err, GS_E_STATE, "process %d is not suspended", (int)getpid());
	if (!rc)
		rc = gs_share_get_links(req, &links, &n, err);
	struct sh_import *im = !rc && n == 1 ? import_of(links[0].import_vh) : NULL;
	if (!rc && (!im || fd < 0))
		rc = gs_fail(err, GS_E_USAGE, "share-import: %s", fd < 0 ? "no descriptor came" : "no such import");
	if (!rc) {
		close_fd(&im->fd);
		im->fd = fd;
		fd = -1;
	}
	close_fd(&fd);
	free(links);
	return rc;
}

bool gs_share_handle(struct gs_agent *a, const struct gs_msg *req, struct gs_msg *reply)
{
	struct gs_err err = { 0 };
	int rc = 0;
	switch (req->type) {
	case GS_MSG_SHARES:
	case GS_MSG_SHARE_LINK:
	case GS_MSG_SHARE_EXPORT:
	case GS_MSG_SHARE_IMPORT:
	case GS_MSG_SHARE_RELEASE:
		break;
	default:
		return false;
	}
	pthread_mutex_lock(&a->lock);
	gs_app_vmm_lock();
	uint64_t flags = 0;
	gs_msg_get_u64(req, GS_F_FLAGS, &flags);
	if (req->type == GS_MSG_SHARE_RELEASE && !suspended(a))
		rc = gs_fail(&err, GS_E_STATE, "process %d is not suspended", (int)getpid());
	else if (req->type == GS_MSG_SHARE_RELEASE && (flags & GS_SHARE_RELEASE_CLOSE))
		close_all();
	else if (req->type == GS_MSG_SHARE_RELEASE)
		rc = let_go(a, &err);
	else if (req->type == GS_MSG_SHARES)
		answer_shares(reply);
	else if (req->type == GS_MSG_SHARE_LINK)
		rc = take_links(req, &err);
	else if (req->type == GS_MSG_SHARE_EXPORT)
		rc = export_again(a, reply, &err);
	else
		rc = import_fd(a, req, &err);
	gs_app_vmm_unlock();
	pthread_mutex_unlock(&a->lock);
	gs_msg_set_result(reply, rc, "%s", rc ? err.msg : "ok");
	return true;
}

/* ---- what the image says about them ---- */

int gs_share_describe(struct gs_image_writer *w, struct gs_err *err)
{
	gs_app_vmm_lock();
	int rc = 0;
	size_t n = 0;
	char key[64], value[GS_SHARE_DESCRIBE_MAX];
	for (size_t i = 0; !rc && i < sh.nex; i++) {
		bool seen = false;
		for (size_t j = 0; j < i && !seen; j++)
			seen = sh.ex[j].vh == sh.ex[i].vh;
		if (seen)
			continue;
		snprintf(key, sizeof(key), "%s%zu", GS_SHARE_META_EXPORT, n++);
		snprintf(value, sizeof(value), "handle=%#llx", (unsigned long long)sh.ex[i].vh);
		rc = gs_image_writer_set_metadata(w, key, value, err);
	}
	n = 0;
	for (size_t i = 0; !rc && i < sh.nim; i++) {
		const struct sh_import *im = &sh.im[i];
		const struct gs_vh_handle *h = gs_app_vmm_get_locked(im->vh);
		if (!im->linked || !h)
			continue;
		int len = snprintf(value, sizeof(value), "exporter=%d export_handle=%#llx handle=%#llx maps=", (int)im->exporter,
				   (unsigned long long)im->export_vh, (unsigned long long)im->vh);
		for (size_t m = 0; m < h->nmaps && len > 0 && (size_t)len < sizeof(value); m++)
			len += snprintf(value + len, sizeof(value) - (size_t)len, "%s%#llx+%#llx", m ? "," : "",
					(unsigned long long)h->maps[m]->va, (unsigned long long)h->maps[m]->size);
		if (len < 0 || (size_t)len >= sizeof(value)) {
			rc = gs_fail(err, GS_E_AGENT, "imported GPU memory %#llx is mapped in too many places to describe",
				     (unsigned long long)im->vh);
			break;
		}
		snprintf(key, sizeof(key), "%s%zu", GS_SHARE_META_IMPORT, n++);
		rc = gs_image_writer_set_metadata(w, key, value, err);
	}
	gs_app_vmm_unlock();
	return rc;
}

/* ---- the lifecycle's steps ---- */

int gs_share_before_suspend(struct gs_agent *a, struct gs_err *err)
{
	(void)a;
	gs_app_vmm_lock();
	int rc = 0;
	if ((sh.nex || sh.nim) && !sh.go_ahead)
		rc = gs_fail(err, GS_E_STATE,
			     "process %d shares GPU memory with other processes as file descriptors: suspend or dump them "
			     "together with --tree on their common parent",
			     (int)getpid());
	for (size_t i = 0; !rc && i < sh.nim; i++)
		if (!sh.im[i].linked && !sh.im[i].released)
			rc = gs_fail(err, GS_E_STATE, "process %d imported GPU memory from a process gpusnap did not find",
				     (int)getpid());
	gs_app_vmm_unlock();
	return rc;
}

/* Imports [0, upto) that this call let go are imported again from their duplicates. */
static void take_back(struct gs_agent *a, const bool *let_go, size_t upto)
{
	for (size_t i = 0; i < upto; i++) {
		struct gs_vh_handle *h = let_go[i] ? gs_app_vmm_get_locked(sh.im[i].vh) : NULL;
		if (h && gs_app_vmm_import_again_locked(a, h, sh.im[i].fd) != CUDA_SUCCESS)
			pr_err("cannot map imported GPU memory %#llx again", (unsigned long long)sh.im[i].vh);
	}
}

/* SHARE_RELEASE, first step: every import let go, its duplicate kept (a rollback imports it again from that). */
static int let_go(struct gs_agent *a, struct gs_err *err)
{
	if (a->cuda_ready)
		gs_ctx_use_copy_context(a);
	int rc = 0;
	bool *let_go = sh.nim ? calloc(sh.nim, sizeof(bool)) : NULL;
	if (sh.nim && !let_go)
		rc = gs_fail(err, GS_E_AGENT, "out of memory");
	for (size_t i = 0; !rc && i < sh.nim; i++) {
		struct gs_vh_handle *h = gs_app_vmm_get_locked(sh.im[i].vh);
		if (!h || !h->real)
			continue;
		CUresult r = gs_fault(GS_FI_SHARE_LET_GO) ? CUDA_ERROR_INVALID_VALUE : gs_app_vmm_let_go_locked(a, h);
		if (r != CUDA_SUCCESS) {
			char b[128];
			rc = gs_fail(err, GS_E_AGENT, "cannot let go of imported GPU memory %#llx: %s",
				     (unsigned long long)sh.im[i].vh, gs_cuda_strerror(&a->cu, r, b, sizeof(b)));
			take_back(a, let_go, i);
			break;
		}
		let_go[i] = true;
		sh.im[i].released = true;
	}
	free(let_go);
	return rc;
}

/* SHARE_RELEASE, second step: the duplicates would keep the memory alive; one record per exported handle stays. */
static void close_all(void)
{
	size_t k = 0;
	for (size_t i = 0; i < sh.nex; i++) {
		close_fd(&sh.ex[i].fd);
		sh.ex[i].early = false;
		bool seen = false;
		for (size_t j = 0; j < k && !seen; j++)
			seen = sh.ex[j].vh == sh.ex[i].vh;
		if (!seen)
			sh.ex[k++] = sh.ex[i];
	}
	sh.nex = k;
	for (size_t i = 0; i < sh.nim; i++) {
		close_fd(&sh.im[i].fd);
		sh.im[i].released = true;
	}
	sh.go_ahead = false;
}

int gs_share_export_fd_locked(uint64_t vh)
{
	for (size_t i = 0; i < sh.nex; i++)
		if (sh.ex[i].vh == vh && sh.ex[i].fd >= 0 && !sh.ex[i].early)
			return sh.ex[i].fd;
	return -1;
}

int gs_share_bring_back(struct gs_agent *a, struct gs_err *err)
{
	if (a->cuda_ready)
		gs_ctx_use_copy_context(a);
	gs_app_vmm_lock();
	int rc = 0;
	size_t done = 0;
	for (; !rc && done < sh.nim; done++) {
		struct sh_import *im = &sh.im[done];
		struct gs_vh_handle *h = gs_app_vmm_get_locked(im->vh);
		if (!im->released || !h)
			continue;
		if (im->fd < 0) {
			rc = gs_fail(err, GS_E_STATE,
				     "process %d maps GPU memory of process %d, which gpusnap did not hand over: resume them "
				     "together with gpusnap resume --tree",
				     (int)getpid(), (int)im->exporter);
			break;
		}
		CUresult r = gs_app_vmm_import_again_locked(a, h, im->fd);
		if (r != CUDA_SUCCESS) {
			char b[128];
			rc = gs_fail(err, GS_E_AGENT, "cannot import GPU memory of process %d again: %s", (int)im->exporter,
				     gs_cuda_strerror(&a->cu, r, b, sizeof(b)));
			break;
		}
	}
	if (rc) {
		/* all or nothing: those imported by this call are let go again */
		for (size_t i = 0; i < done; i++) {
			struct gs_vh_handle *h = sh.im[i].released ? gs_app_vmm_get_locked(sh.im[i].vh) : NULL;
			if (h && h->real && gs_app_vmm_let_go_locked(a, h) != CUDA_SUCCESS)
				pr_err("cannot let go of imported GPU memory %#llx", (unsigned long long)sh.im[i].vh);
		}
	} else {
		for (size_t i = 0; i < sh.nim; i++)
			sh.im[i].released = false;
	}
	gs_app_vmm_unlock();
	return rc;
}

void gs_share_after_resume(void)
{
	gs_app_vmm_lock();
	for (size_t i = 0; i < sh.nex; i++)
		sh.ex[i].early = false;
	for (size_t i = 0; i < sh.nim; i++)
		sh.im[i].linked = false;
	sh.go_ahead = false;
	gs_app_vmm_unlock();
}

void gs_share_forget_after_fork(void)
{
	for (size_t i = 0; i < sh.nex; i++)
		close_fd(&sh.ex[i].fd);
	for (size_t i = 0; i < sh.nim; i++)
		close_fd(&sh.im[i].fd);
	sh.nex = sh.nim = 0;
	sh.go_ahead = false;
}

/*
 * ---- legacy CUDA IPC (cuIpcGetMemHandle) ----
 *
 * The driver gives an IPC handle only for cuMemAlloc memory of its own; the
 * agent's allocations are cuMemCreate memory (releasable), for which the
 * driver fails with an error that names nothing. So the call fails here, as
 * CUDA_ERROR_NOT_SUPPORTED, with a log line saying why and what to do
 * (README, "Memory shared between processes"). Memory the agent does not
 * manage goes to the driver as ever.
 */
typedef struct {
	char reserved[64];
} gs_ipc_mem_handle;

static CUresult (*real_cuIpcGetMemHandle)(gs_ipc_mem_handle *, CUdeviceptr);

static CUresult ipc_get(gs_ipc_mem_handle *handle, CUdeviceptr p)
{
	struct gs_agent *a = gs_agent_get();
	struct gs_alloc_rec rec;
	if (a->allocs && gs_alloc_registry_find(a->allocs, (uint64_t)p, &rec)) {
		static bool said;
		if (!__atomic_exchange_n(&said, true, __ATOMIC_RELAXED))
			pr_err("cudaIpcGetMemHandle/cuIpcGetMemHandle on memory the gpusnap agent manages is not supported "
			       "(legacy CUDA IPC needs the driver's own cudaMalloc memory): run this app with "
			       "GPUSNAP_AGENT_HOOKS=0, or share memory as cuMem file descriptors (NCCL, PyTorch expandable "
			       "segments)");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return real_cuIpcGetMemHandle(handle, p);
}

static CUresult hook_cuIpcGetMemHandle(gs_ipc_mem_handle *handle, CUdeviceptr p) { return GS_GATED(ipc_get(handle, p)); }

int gs_share_install_hooks(struct gs_err *err)
{
	static const struct gs_interpose_hook hooks[] = {
		{ "cuIpcGetMemHandle", (void *)hook_cuIpcGetMemHandle, (void **)&real_cuIpcGetMemHandle },
	};
	return gs_interpose_replace_all(hooks, sizeof(hooks) / sizeof(hooks[0]), err);
}

/* The memory kind of memory shared with other processes (memory/memkind.h): its regions are app_vmm's. */
const struct gs_memkind gs_share_kind = {
	.name = "share",
	.install_hooks = gs_share_install_hooks,
	.forget_after_fork = gs_share_forget_after_fork,
	.refresh = gs_share_refresh,
	.before_suspend = gs_share_before_suspend,
	.bring_back = gs_share_bring_back,
	.after_resume = gs_share_after_resume,
	.save_image = gs_share_describe,
	.handle_request = gs_share_handle,
};
