// A stand-in for libamdhip64.so that does nothing: enough of the HIP runtime API for tilewright's
// ctypes layer and for hip-python to load a "module" and "launch" a kernel, so the host-side cost
// of a launch can be measured on a machine without a GPU.
#include <string.h>
#include <stdint.h>
typedef int hipError_t;
static char fake[4096];
unsigned long long launches = 0;
hipError_t hipInit(unsigned f) { return 0; }
hipError_t hipDriverGetVersion(int *v) { *v = 60300000; return 0; }
hipError_t hipRuntimeGetVersion(int *v) { *v = 60300000; return 0; }
hipError_t hipGetDeviceCount(int *n) { *n = 1; return 0; }
hipError_t hipGetDevice(int *d) { *d = 0; return 0; }
hipError_t hipSetDevice(int d) { return 0; }
hipError_t hipDeviceGetAttribute(int *v, int a, int d) { *v = (a == 87) ? 64 : (a == 74 || a == 75) ? 65536 : 1024; return 0; }
hipError_t hipModuleLoadData(void **m, const void *img) { *m = fake + 8; return 0; }
hipError_t hipModuleUnload(void *m) { return 0; }
hipError_t hipModuleGetFunction(void **f, void *m, const char *n) { *f = fake + 16; return 0; }
hipError_t hipFuncGetAttribute(int *v, int a, void *f) { *v = (a == 0) ? 1024 : 0; return 0; }
hipError_t hipFuncSetAttribute(const void *f, int a, int v) { return 0; }
// The last launch, for tests: grid, block, shared bytes, stream and the kernelParams array.
unsigned last_launch[8];
void **last_params = 0;
void *last_stream = 0;
hipError_t hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned sm, void *s, void **params, void **extra) {
  launches++;
  last_launch[0] = gx; last_launch[1] = gy; last_launch[2] = gz;
  last_launch[3] = bx; last_launch[4] = by; last_launch[5] = bz; last_launch[6] = sm;
  last_params = params; last_stream = s;
  return 0;
}
hipError_t hipDeviceSynchronize(void) { return 0; }
hipError_t hipMalloc(void **p, size_t n) { *p = fake + 64; return 0; }
hipError_t hipFree(void *p) { return 0; }
hipError_t hipMemcpy(void *d, const void *s, size_t n, int k) { return 0; }
const char *hipGetErrorName(hipError_t e) { return "hipErrorStub"; }
const char *hipGetErrorString(hipError_t e) { return "stub runtime"; }
hipError_t hipGetDevicePropertiesR0600(void *p, int d) { memset(p, 0, 1472); strcpy((char *)p + 1160, "gfx942:sramecc+:xnack-"); return 0; }
