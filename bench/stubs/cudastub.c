// A stand-in for libcuda.so.1 that does nothing: enough of the driver API for cuda.bindings and
// cuda.core to load a "module" and "launch" a kernel, so the host-side cost of a launch can be
// measured on a machine without a GPU.  Every handle is a fake non-null pointer.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <stdlib.h>
typedef int CUresult;
static char fake[4096];
static void *self_handle;
static int verbose = -1;
static void note(const char *what) {
  if (verbose < 0) verbose = getenv("CUDASTUB_VERBOSE") != NULL;
  if (verbose) fprintf(stderr, "stub: %s\n", what);
}
unsigned long long launches = 0;
CUresult cuInit(unsigned f) { return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(int *d, int i) { *d = i; return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  switch (attr) {
    case 75: *v = 9; break;   // compute capability major
    case 76: *v = 0; break;   // minor
    case 16: *v = 132; break; // SMs
    case 1: *v = 1024; break; // max threads per block
    case 10: *v = 32; break;  // warp size
    case 97: *v = 232448; break; // smem optin
    default: *v = 1; break;
  }
  return 0;
}
CUresult cuDeviceGetName(char *name, int len, int dev) { strncpy(name, "Stub GPU", len); return 0; }
CUresult cuDeviceGetUuid(void *u, int dev) { memset(u, 0, 16); return 0; }
CUresult cuDeviceGetUuid_v2(void *u, int dev) { memset(u, 0, 16); return 0; }
CUresult cuDeviceTotalMem(size_t *b, int dev) { *b = 1ull << 34; return 0; }
CUresult cuDeviceTotalMem_v2(size_t *b, int dev) { *b = 1ull << 34; return 0; }
static void *current_ctx = 0;
CUresult cuCtxGetCurrent(void **c) { *c = current_ctx; return 0; }
CUresult cuCtxSetCurrent(void *c) { current_ctx = c; return 0; }
CUresult cuCtxPushCurrent(void *c) { current_ctx = c; return 0; }
CUresult cuCtxPushCurrent_v2(void *c) { current_ctx = c; return 0; }
CUresult cuCtxPopCurrent(void **c) { if (c) *c = current_ctx; return 0; }
CUresult cuCtxPopCurrent_v2(void **c) { if (c) *c = current_ctx; return 0; }
CUresult cuCtxGetDevice(int *d) { *d = 0; return 0; }
CUresult cuCtxGetDevice_v2(int *d, void *ctx) { *d = 0; return 0; }
CUresult cuCtxGetId(void *c, unsigned long long *id) { *id = 1; return 0; }
CUresult cuCtxGetApiVersion(void *c, unsigned *v) { *v = 13000; return 0; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuCtxGetStreamPriorityRange(int *lo, int *hi) { if (lo) *lo = 0; if (hi) *hi = -5; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { *c = fake; return 0; }
CUresult cuDevicePrimaryCtxRelease(int d) { return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { return 0; }
CUresult cuDevicePrimaryCtxGetState(int d, unsigned *f, int *a) { *f = 0; *a = 1; return 0; }
CUresult cuModuleLoadData(void **m, const void *img) { *m = fake + 8; return 0; }
CUresult cuModuleUnload(void *m) { return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *n) { *f = fake + 16; return 0; }
CUresult cuLibraryLoadData(void **l, const void *code, void *jo, void *jv, unsigned nj, void *lo, void *lv, unsigned nl) { *l = fake + 24; return 0; }
CUresult cuLibraryUnload(void *l) { return 0; }
CUresult cuLibraryGetKernel(void **k, void *l, const char *n) { *k = fake + 32; return 0; }
CUresult cuKernelGetFunction(void **f, void *k) { *f = fake + 16; return 0; }
CUresult cuKernelGetAttribute(int *v, int a, void *k, int dev) { *v = (a == 0) ? 1024 : 0; return 0; }
CUresult cuKernelSetAttribute(int a, int v, void *k, int dev) { return 0; }
CUresult cuFuncGetAttribute(int *v, int a, void *f) { *v = (a == 0) ? 1024 : (a == 8 ? 49152 : 0); return 0; }
CUresult cuFuncSetAttribute(void *f, int a, int v) { return 0; }
CUresult cuFuncGetParamInfo(void *f, size_t i, size_t *off, size_t *sz) { return 1; }
// The last launch, for tests: grid, block, shared bytes, stream and the kernelParams array.
unsigned last_launch[8];
void **last_params = 0;
void *last_stream = 0;
// `extra` (its array lives on the caller's stack): the buffer pointer and the size it points at, or 0
void *last_extra[2];
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned sm, void *s, void **params, void **extra) {
  launches++;
  last_launch[0] = gx; last_launch[1] = gy; last_launch[2] = gz;
  last_launch[3] = bx; last_launch[4] = by; last_launch[5] = bz; last_launch[6] = sm;
  last_params = params; last_stream = s;
  last_extra[0] = last_extra[1] = 0;
  if (extra && extra[0] == (void *)1 && extra[2] == (void *)2 && extra[4] == 0) {
    last_extra[0] = extra[1];
    last_extra[1] = (void *)*(size_t *)extra[3];
  }
  return 0;
}
// TMA descriptors: 128 bytes of zeros (the host cost is the binding's, as with a real driver)
CUresult cuTensorMapEncodeTiled(void *tmap, int dtype, unsigned rank, void *addr, const unsigned long long *dims,
                                const unsigned long long *strides, const unsigned *box, const unsigned *estrides,
                                int interleave, int swizzle, int l2, int oob) { memset(tmap, 0, 128); return 0; }
// cuLaunchKernelEx records as cuLaunchKernel does, read through cuda.h's CUlaunchConfig layout (grid,
// block, shared bytes as 7 unsigned, the stream, the attribute array, its count), and the first
// attribute's id and the first int of its value
int last_ex_attr[3];  // (number of attributes, first id, first value's int)
CUresult cuLaunchKernelEx(const void *cfg, void *f, void **params, void **extra) {
  const unsigned *u = (const unsigned *)cfg;
  const char *c = (const char *)cfg;
  void *stream = *(void *const *)(c + 32);
  const int *attrs = *(const int *const *)(c + 40);
  unsigned n = *(const unsigned *)(c + 48);
  launches++;
  memcpy(last_launch, u, 7 * sizeof(unsigned));
  last_params = params; last_stream = stream;
  last_ex_attr[0] = (int)n;
  last_ex_attr[1] = n ? attrs[0] : -1;
  last_ex_attr[2] = n ? attrs[2] : -1;
  return 0;
}
CUresult cuStreamCreate(void **s, unsigned f) { *s = fake + 40; return 0; }
CUresult cuStreamCreateWithPriority(void **s, unsigned f, int p) { *s = fake + 40; return 0; }
CUresult cuStreamDestroy(void *s) { return 0; }
CUresult cuStreamDestroy_v2(void *s) { return 0; }
CUresult cuStreamSynchronize(void *s) { return 0; }
CUresult cuStreamGetCtx(void *s, void **c) { *c = fake; return 0; }
CUresult cuStreamGetCtx_v2(void *s, void **c, void **g) { *c = fake; if (g) *g = 0; return 0; }
CUresult cuStreamGetFlags(void *s, unsigned *f) { *f = 0; return 0; }
CUresult cuStreamGetPriority(void *s, int *p) { *p = 0; return 0; }
CUresult cuStreamGetId(void *s, unsigned long long *id) { *id = 7; return 0; }
CUresult cuStreamGetDevice(void *s, int *d) { *d = 0; return 0; }
CUresult cuPointerGetAttribute(void *v, int a, unsigned long long p) { *(int *)v = 0; return 0; }
CUresult cuGetErrorName(CUresult e, const char **s) { *s = "CUDA_ERROR_STUB"; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { *s = "stub driver"; return 0; }
static CUresult not_in_stub(void) { note("a call the stub does not implement"); return 801; }
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags, int *status) {
  if (!self_handle) { Dl_info info; dladdr((void *)cuInit, &info); self_handle = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD); }
  void *p = dlsym(self_handle, sym);
  if (!p) { char buf[256]; snprintf(buf, sizeof buf, "%s_v2", sym); p = dlsym(self_handle, buf); }
  if (!p) { p = (void *)not_in_stub; }
  *pfn = p;
  if (status) *status = 0;
  return 0;
}
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags) {
  return cuGetProcAddress_v2(sym, pfn, ver, flags, 0);
}
