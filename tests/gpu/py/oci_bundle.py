"""oci_bundle.py - writes an OCI runtime bundle (config.json and an empty
rootfs of mount points) for runc, for the container test on the GPU machine
(t71-container-runc.sh). No image and no registry: the container's file system
is the host's own /usr, /etc and /opt (and each mount under them), bound
read-only, over a read-only rootfs that holds only mount points and the usual
top-level links (bin -> usr/bin, as on a merged-/usr system). What a GPU container gets from nvidia-container-
toolkit is given by hand: the device nodes (--device: runc makes them in the
container's /dev and allows them in its device cgroup) and the driver's
libraries (already under the bound /usr).

Usage: oci_bundle.py BUNDLE [--bind HOST:PATH[:ro]]... [--device PATH]...
                     [--env K=V]... [--annotation K=V]... [--cgroup PATH]
                     [--hostname NAME] [--host-network] -- ARGS...
"""
import argparse
import json
import os
import re
import resource
import stat
import sys

# Docker's default capability set: what a CUDA container usually runs with.
CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
        "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
        "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"]


def device_entry(path):
    st = os.stat(path)
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    else:
        sys.exit("oci_bundle: %s is not a device node" % path)
    return {"path": path, "type": kind, "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev),
            "fileMode": stat.S_IMODE(st.st_mode), "uid": 0, "gid": 0}


def submounts(top):
    """The mount points strictly under folder top, in the order they were mounted."""
    top = os.path.realpath(top).rstrip("/")
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            where = line.split()[4]
            where = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), where)
            if where.startswith(top + "/") and where not in found:
                found.append(where)
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bundle")
    ap.add_argument("--bind", action="append", default=[])
    ap.add_argument("--device", action="append", default=[])
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--annotation", action="append", default=[])
    ap.add_argument("--cgroup", default="")
    ap.add_argument("--hostname", default="gpusnap-test")
    ap.add_argument("--host-network", action="store_true", help="share the host's network namespace")
    ap.add_argument("args", nargs="+")
    o = ap.parse_args()

    rootfs = os.path.join(o.bundle, "rootfs")
    os.makedirs(rootfs, exist_ok=True)
    for d in ("proc", "sys", "dev", "tmp", "run", "usr", "etc", "opt"):
        os.makedirs(os.path.join(rootfs, d), exist_ok=True)
    # merged /usr: the top-level directories are links into it where the host's are
    for top in ("bin", "sbin", "lib", "lib64", "lib32", "libx32"):
        host = "/" + top
        where = os.path.join(rootfs, top)
        if os.path.islink(host) and not os.path.lexists(where):
            os.symlink(os.readlink(host), where)
        elif os.path.isdir(host) and not os.path.islink(host):
            o.bind.append("%s:%s:ro" % (host, host))

    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
         "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
        {"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=755"]},
    ]
    binds = ["/usr:/usr:ro", "/etc:/etc:ro"] + (["/opt:/opt:ro"] if os.path.isdir("/opt") else []) + o.bind
    for b in binds:
        parts = b.split(":")
        if len(parts) not in (2, 3) or not parts[1].startswith("/"):
            sys.exit("oci_bundle: --bind HOST:PATH[:ro], not %r" % b)
        host, path = parts[0], parts[1]
        ro = len(parts) == 3 and parts[2] == "ro"
        # a mount point for each bind under the rootfs (read-only at run time): a directory, or
        # an empty file for a file
        if not any(path == "/" + d for d in ("usr", "etc", "opt", "tmp", "run")):
            if os.path.isdir(host):
                os.makedirs(rootfs + path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(rootfs + path), exist_ok=True)
                open(rootfs + path, "a").close()
        # Each mount under the bound folder gets an entry of its own rather than an rbind:
        # runc tells CRIU that the mounts it lists are external, while CRIU would try to dump one
        # that only an rbind brought in (and cannot: the GPU machine's driver libraries are a
        # squashfs mounted at /usr/local/nvidia).
        mode = "ro" if ro else "rw"
        mounts.append({"destination": path, "type": "bind", "source": host, "options": ["bind", mode]})
        for sub in submounts(host):
            mounts.append({"destination": path + sub[len(host.rstrip("/")):], "type": "bind", "source": sub,
                           "options": ["bind", mode]})

    devices = [device_entry(p) for p in o.device]
    allow = [{"allow": False, "access": "rwm"}]
    for d in devices:
        allow.append({"allow": True, "type": d["type"], "major": d["major"], "minor": d["minor"], "access": "rwm"})

    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    config = {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": o.args,
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    # NVLink multicast stays off in containers too (tests/gpu/lib.sh says why)
                    "NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1"] + o.env,
            "cwd": "/",
            "capabilities": {k: CAPS for k in ("bounding", "effective", "permitted")},
            # the caller's own limit: raising it needs CAP_SYS_RESOURCE, which a sandbox may lack
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": nofile[1], "soft": nofile[0]}],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": o.hostname,
        "mounts": mounts,
        "annotations": dict(a.split("=", 1) for a in o.annotation),
        "linux": {
            "devices": devices,
            "resources": {"devices": allow},
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount", "cgroup")
                           if t != "network" or not o.host_network],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        },
    }
    if o.cgroup:
        config["linux"]["cgroupsPath"] = o.cgroup
    with open(os.path.join(o.bundle, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


if __name__ == "__main__":
    main()
