"""jax_cupy.py - a JAX, CuPy, Numba or cuda.core process for gpusnap's GPU
tests (t68).

JAX (--framework jax): an MLP with seeded random weights, its forward pass
jitted, and a jitted SGD step on a copy of the weights; XLA's allocator as it
comes (by default it takes 75% of the GPU at start, XLA_PYTHON_CLIENT_* in the
environment change that). CuPy (--framework cupy): cuBLAS matrix products, a
cuFFT transform, a reduction and an ElementwiseKernel that NVRTC compiles at
run time, through CuPy's memory pool. Numba (--framework numba): a @cuda.jit
kernel, cuda.reduce, device arrays through Numba's memory manager (the NVIDIA
driver bindings). cuda.core (--framework cudacore): kernels compiled with
NVRTC through Program, launched with launch(), memory from the device's
stream-ordered memory resource, read back through pinned host memory
(cuMemAllocHost). Either way the results of the first run
are kept as references (and a large seeded array is kept on the GPU as data
to carry), then it answers commands on stdin, one per line, like the C test
apps (check_loop.py):
  check  -> "CHECK OK <framework>" when every result computed again is
            bit-identical to its reference, the kept array is unchanged and
            a training step gives a finite loss; else "CHECK FAIL <why>"
  quit   -> "BYE <status>"
"""
import argparse
import sys

import check_loop


def jax_app(seed, held_mib):
    import jax
    import jax.numpy as jnp

    dev = jax.devices("gpu")[0]
    key = jax.random.PRNGKey(seed)
    k1, k2 = jax.random.split(key, 2)
    dims = [256, 1024, 1024, 256]
    params = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        kw, kb = jax.random.split(jax.random.fold_in(k1, i))
        params.append((jax.random.normal(kw, (a, b), jnp.float32) / a ** 0.5, jax.random.normal(kb, (b,), jnp.float32)))
    params = jax.device_put(params, dev)
    x = jax.device_put(jax.random.normal(k2, (64, dims[0]), jnp.float32), dev)
    # The kept array comes from one fused kernel that writes only its output: jax.random.bits
    # of a large array leaves several of its size of temporaries, freed to XLA's allocator but
    # written, which gpusnap must carry like any other memory of the process; t33 counts on the
    # process having written little more than the array itself.
    words, mix = held_mib * 262144, jnp.uint32(seed * 2654435761 % 2 ** 32)

    @jax.jit
    def make_held():
        v = jax.lax.iota(jnp.uint32, words) * jnp.uint32(0x9E3779B1) + mix
        v = (v ^ (v >> 16)) * jnp.uint32(0x85EBCA6B)
        return v ^ (v >> 13)

    held = make_held()
    sum_of = jax.jit(lambda h: jnp.sum(h * jnp.uint32(2654435761)))  # wraps in 32 bits (no 64-bit types by default)

    def held_sum():
        return int(sum_of(held))

    held_ref = held_sum()

    @jax.jit
    def forward(p, v):
        for w, b in p[:-1]:
            v = jax.nn.gelu(v @ w + b)
        w, b = p[-1]
        return v @ w + b

    @jax.jit
    def sgd_step(p, v):
        def loss(q):
            return jnp.mean(forward(q, v) ** 2)
        value, grads = jax.value_and_grad(loss)(p)
        return value, jax.tree_util.tree_map(lambda a, g: a - 1e-4 * g, p, grads)

    ref = jax.device_get(forward(params, x))
    trainee = jax.tree_util.tree_map(lambda a: a + 0, params)

    def check():
        nonlocal trainee
        why = []
        out = jax.device_get(forward(params, x))
        if not (out == ref).all():
            why.append("forward output differs")
        if held_sum() != held_ref:
            why.append("the kept array changed")
        value, trainee = sgd_step(trainee, x)
        if not jnp.isfinite(value):
            why.append("training step gave %s" % value)
        return why

    return check


def cupy_app(seed, held_mib):
    import cupy as cp

    rs = cp.random.RandomState(seed)
    a = rs.standard_normal((1024, 1024), dtype=cp.float32)
    b = rs.standard_normal((1024, 1024), dtype=cp.float32)
    sig = rs.standard_normal(1 << 20).astype(cp.complex64)
    held = rs.randint(0, 2 ** 31 - 1, size=held_mib * 262144, dtype=cp.int32)
    scale = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = x * 0.5f + y * y", "gpusnap_t68_scale")

    def compute():
        return [cp.asnumpy(a @ b), cp.asnumpy(cp.fft.fft(sig)), cp.asnumpy(scale(a, b)),
                int(cp.sum(held.astype(cp.int64) * 2654435761 % 4294967291))]

    refs = compute()
    names = ["matmul (cuBLAS)", "fft (cuFFT)", "elementwise kernel (NVRTC)", "the kept array"]

    def check():
        why = [n for n, got, want in zip(names, compute(), refs)
               if not (got == want if isinstance(want, int) else (got == want).all())]
        # allocations and frees through the pool after the resume
        churn = [cp.empty((i * 37) % 65536 + 1, dtype=cp.uint8) for i in range(500)]
        del churn
        cp.cuda.Device().synchronize()
        return why

    return check


def numba_app(seed, held_mib):
    import zlib

    import numpy as np
    from numba import cuda

    rng = np.random.default_rng(seed)
    n = 1 << 20
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)

    @cuda.jit
    def mix(out, x, y, k):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i] * k + y[i] * y[i]

    total = cuda.reduce(lambda p, q: p + q)
    da, db = cuda.to_device(a), cuda.to_device(b)
    held_host = rng.integers(0, 2 ** 31 - 1, size=held_mib * 262144, dtype=np.int32)
    held = cuda.to_device(held_host)
    del held_host

    def compute():
        out = cuda.device_array_like(a)
        mix[(n + 255) // 256, 256](out, da, db, np.float32(0.5))
        return [out.copy_to_host(), float(total(out)), zlib.crc32(held.copy_to_host())]

    refs = compute()
    names = ["the jitted kernel's output", "cuda.reduce's sum", "the kept array"]

    def check():
        why = [name for name, got, want in zip(names, compute(), refs)
               if not (np.array_equal(got, want) if isinstance(want, np.ndarray) else got == want)]
        # allocations and frees through Numba's memory manager after the resume
        churn = [cuda.device_array((i * 37) % 65536 + 1, dtype=np.uint8) for i in range(500)]
        del churn
        cuda.synchronize()
        return why

    return check


# cuda.core's kernels: the kept buffer filled from the seed on the GPU, then mixed in place
CUDA_CORE_CODE = r"""
extern "C" __global__ void fill(unsigned *p, size_t n, unsigned seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned x = (unsigned)i * 2654435761u ^ seed;
        x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
        p[i] = x;
    }
}
extern "C" __global__ void mix(const unsigned *p, unsigned *out, size_t n, unsigned k)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = (p[i] * 2654435761u) ^ k;
}
"""


def cudacore_app(seed, held_mib):
    import ctypes
    import zlib

    import numpy as np
    from cuda.core import Device, LaunchConfig, LegacyPinnedMemoryResource, Program, ProgramOptions, launch

    dev = Device()
    dev.set_current()
    stream = dev.create_stream()
    arch = "".join(str(v) for v in dev.compute_capability)
    prog = Program(CUDA_CORE_CODE, code_type="c++", options=ProgramOptions(arch="sm_" + arch))
    mod = prog.compile("cubin")
    fill, mix = mod.get_kernel("fill"), mod.get_kernel("mix")
    n = held_mib * 262144
    nbytes = n * 4
    held = dev.allocate(nbytes, stream=stream)  # the device's memory resource: a stream-ordered pool
    out = dev.allocate(nbytes, stream=stream)
    host = LegacyPinnedMemoryResource().allocate(nbytes)
    config = LaunchConfig(grid=1024, block=256)
    launch(stream, config, fill, held, np.uint64(n), np.uint32(seed))

    def crc_of(buf):
        buf.copy_to(host, stream=stream)
        stream.sync()
        view = (ctypes.c_char * nbytes).from_address(int(host.handle))
        return zlib.crc32(view)

    def compute():
        launch(stream, config, mix, held, out, np.uint64(n), np.uint32(0x9e3779b9))
        return [crc_of(out), crc_of(held)]

    refs = compute()
    names = ["the NVRTC-compiled kernel's output", "the kept buffer"]

    def check():
        why = [name for name, got, want in zip(names, compute(), refs) if got != want]
        # stream-ordered allocations and frees after the resume
        churn = [dev.allocate((i * 37) % 65536 + 1, stream=stream) for i in range(500)]
        for c in churn:
            c.close(stream)
        stream.sync()
        return why

    return check


APPS = {"jax": jax_app, "cupy": cupy_app, "numba": numba_app, "cudacore": cudacore_app}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", choices=sorted(APPS), required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--held-mib", type=int, default=1024, help="MiB of seeded data kept on the GPU")
    args = ap.parse_args()
    check = APPS[args.framework](args.seed, args.held_mib)
    why = check()
    if why:
        print("CHECK FAIL at start: " + "; ".join(why), flush=True)
        return 1
    return check_loop.serve(check, args.framework)


if __name__ == "__main__":
    sys.exit(main())
