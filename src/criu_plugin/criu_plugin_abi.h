/*
 * criu_plugin_abi.h - our declaration of the interface CRIU (4.x) uses to load
 * a plugin, written from CRIU's documented plugin interface so the build
 * needs no CRIU headers.
 *
 * CRIU dlopen()s every *.so of its plugin folder (--libdir, else
 * $CRIU_LIBS_DIR, else /usr/lib/criu) and looks up one symbol,
 * CR_PLUGIN_DESC. It refuses the plugin when `version` is newer than its own
 * plugin version or `max_hooks` is larger than the number of hooks it knows;
 * it reads hooks[0..max_hooks) only. CRIU 4.1 knows 12 hooks, 4.2 knows 13
 * (POST_FORKING was added): with max_hooks 12 both load us, and the hooks
 * we use are all below 12. Plugin version 0.2.0 is what 4.1 and 4.2 declare.
 *
 * Return values: 0 done; -ENOTSUP "not mine" (CRIU goes on); any other
 * negative value fails the dump (PAUSE/CHECKPOINT_DEVICES) or is only logged
 * (RESUME_DEVICES_LATE: CRIU ignores its errors). init() failing at the
 * restore stage stops the restore before any process is created.
 */
#ifndef GPUSNAP_CRIU_PLUGIN_ABI_H
#define GPUSNAP_CRIU_PLUGIN_ABI_H

#define GSP_CRIU_PLUGIN_VERSION ((0u << 16) + (2u << 8) + 0u)

enum gsp_criu_hook {
	GSP_HOOK_DUMP_UNIX_SK = 0,
	GSP_HOOK_RESTORE_UNIX_SK = 1,
	GSP_HOOK_DUMP_EXT_FILE = 2,
	GSP_HOOK_RESTORE_EXT_FILE = 3,
	GSP_HOOK_DUMP_EXT_MOUNT = 4,
	GSP_HOOK_RESTORE_EXT_MOUNT = 5,
	GSP_HOOK_DUMP_EXT_LINK = 6,
	GSP_HOOK_HANDLE_DEVICE_VMA = 7,
	GSP_HOOK_UPDATE_VMA_MAP = 8,
	GSP_HOOK_RESUME_DEVICES_LATE = 9, /* int (int pid): restore, tasks still stopped under CRIU's ptrace */
	GSP_HOOK_PAUSE_DEVICES = 10,      /* int (int pid): dump, before the task (the root first) is frozen */
	GSP_HOOK_CHECKPOINT_DEVICES = 11, /* int (int pid): dump, every live task, all frozen */
	GSP_HOOKS = 12,                   /* what CRIU 4.1 knows; 4.2 adds POST_FORKING = 12 */
};

enum gsp_criu_stage {
	GSP_STAGE_DUMP = 0,
	GSP_STAGE_PRE_DUMP = 1,
	GSP_STAGE_RESTORE = 2,
};

typedef int gsp_pid_hook_t(int pid);

/* The layout CRIU reads: name, init, exit, version, max_hooks, then max_hooks hook pointers. */
struct gsp_criu_plugin_desc {
	const char *name;
	int (*init)(int stage);
	void (*exit)(int stage, int ret);
	unsigned int version;
	unsigned int max_hooks;
	void *hooks[GSP_HOOKS];
};

/*
 * Functions the criu binary exports to its plugins. criu_get_image_dir is
 * the documented one (the images directory's descriptor); the inventory ones
 * are what CRIU's own plugins call (4.1 and later). All are looked up with
 * dlsym at run time, so the plugin also loads where one is missing.
 */
typedef int gsp_criu_get_image_dir_t(void);
typedef int gsp_add_inventory_plugin_t(const char *name);
typedef _Bool gsp_check_and_remove_inventory_plugin_t(const char *name, unsigned long n);
typedef void gsp_print_on_level_t(unsigned int level, const char *fmt, ...);
#define GSP_CRIU_LOG_ERROR 1
#define GSP_CRIU_LOG_WARN 2
#define GSP_CRIU_LOG_INFO 3
#define GSP_CRIU_LOG_DEBUG 4

#endif
