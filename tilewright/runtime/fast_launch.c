/* tilewright's compiled launcher: the last step of a CUDA launch (write the new pointers into a
 * packed argument buffer, call cuLaunchKernel or cuLaunchKernelEx) in C, so that a launch makes no
 * Python object and crosses one C call.  Built on first use by runtime/compiled_launch.py with the
 * machine's C compiler against the running interpreter's headers; libcuda is found with dlopen,
 * as cuda-bindings finds it (the same library: a process loads it once).
 *
 * Contract (what the Python side relies on):
 *   bind_driver(name) -> (has_launch_ex): dlopen `name`, look up cuLaunchKernel (and
 *       cuLaunchKernelEx where the driver has it); OSError when the library or cuLaunchKernel is
 *       missing.  Called once before any launch.
 *   launch_kernel(handle, gx, gy, gz, bx, by, bz, shared, stream, params, programmatic) -> int:
 *       one launch of an argument array the caller packed (`params`: the address of its void*[],
 *       0 for none); returns the CUresult (0: launched).  Bad ints raise OverflowError/TypeError
 *       before anything is launched.
 *   Launch(handle, grid, block, shared, data, params, n_lead, programmatic, owner): a launch whose
 *       buffer (`data`: its first bytes are the n_lead 8-byte pointer slots; `params`: the void*[]
 *       pointing into it) the caller packed once and keeps alive (`owner` is held for that).
 *       Launch.go(stream, ptrs) writes ptrs (a list or tuple of exactly n_lead ints) into the
 *       slots and launches; returns the CUresult as an int.  A wrong count or a value that is not a
 *       64-bit unsigned int raises before the launch.  One thread at a time per Launch (the caller's
 *       rule: FixedLaunch keeps a buffer to the thread that made it).
 *       Launch(..., stream_fn, device[, thread]).go_current(ptrs): go(stream_fn(device), ptrs) from
 *       the thread `thread` (threading.get_ident(); default: the one making the Launch); from any
 *       other thread returns -2 and launches nothing.
 *   config_layout(...): the bytes a programmatic launch hands cuLaunchKernelEx (for a layout test).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

typedef int CUresult;
typedef void *CUfunction;
typedef void *CUstream;

/* cuLaunchKernelEx's configuration, laid out as cuda.h (12.0+) lays out CUlaunchConfig and
 * CUlaunchAttribute: an attribute is an id padded to 8 bytes and a 64-byte value union. */
typedef struct {
    int id;
    char pad[4];
    union {
        char bytes[64];
        int programmatic_stream_serialization_allowed;
    } value;
} LaunchAttribute;

typedef struct {
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
    CUstream stream;
    LaunchAttribute *attrs;
    unsigned num_attrs;
} LaunchConfig;

#define ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6 /* (cuda.h: CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) */

typedef CUresult (*launch_kernel_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, CUstream, void **, void **);
typedef CUresult (*launch_kernel_ex_t)(const LaunchConfig *, CUfunction, void **, void **);

static launch_kernel_t launch_kernel_fn = NULL;
static launch_kernel_ex_t launch_kernel_ex_fn = NULL;
static launch_kernel_t launch_kernel_proc_fn = NULL; /* (measurement: cuGetProcAddress's cuLaunchKernel) */
static void *driver_lib = NULL;
static PyObject *result_objects[1024]; /* CUresult -> its int object, made once (CUDA's codes are < 1000) */

static PyObject *result_object(CUresult r) {
    if (r >= 0 && r < 1024) {
        PyObject *o = result_objects[r];
        if (o == NULL) o = result_objects[r] = PyLong_FromLong(r);
        Py_XINCREF(o);
        return o;
    }
    return PyLong_FromLong(r);
}

static void programmatic_config(LaunchConfig *cfg, LaunchAttribute *attr, const unsigned *grid,
                                const unsigned *block, unsigned shared, CUstream stream) {
    memset(attr, 0, sizeof *attr);
    attr->id = ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr->value.programmatic_stream_serialization_allowed = 1;
    memset(cfg, 0, sizeof *cfg);
    cfg->grid_x = grid[0], cfg->grid_y = grid[1], cfg->grid_z = grid[2];
    cfg->block_x = block[0], cfg->block_y = block[1], cfg->block_z = block[2];
    cfg->shared_bytes = shared;
    cfg->stream = stream;
    cfg->attrs = attr;
    cfg->num_attrs = 1;
}

static CUresult do_launch(CUfunction f, const unsigned *grid, const unsigned *block, unsigned shared,
                          CUstream stream, void **params, int programmatic) {
    if (!programmatic) {
        return launch_kernel_fn(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, stream,
                                params, NULL);
    }
    LaunchAttribute attr;
    LaunchConfig cfg;
    programmatic_config(&cfg, &attr, grid, block, shared, stream);
    return launch_kernel_ex_fn(&cfg, f, params, NULL);
}

/* config_layout(grid, block, shared, stream) -> (config bytes, attribute bytes): what the
 * programmatic launch passes cuLaunchKernelEx, the attribute array's address zeroed (a test
 * compares both with cuda-bindings' CUlaunchConfig and CUlaunchAttribute). */
static PyObject *config_layout(PyObject *self, PyObject *args) {
    unsigned grid[3], block[3], shared;
    unsigned long long stream;
    if (!PyArg_ParseTuple(args, "(III)(III)IK", &grid[0], &grid[1], &grid[2], &block[0], &block[1], &block[2],
                          &shared, &stream))
        return NULL;
    LaunchAttribute attr;
    LaunchConfig cfg;
    programmatic_config(&cfg, &attr, grid, block, shared, (CUstream)(uintptr_t)stream);
    cfg.attrs = NULL;
    return Py_BuildValue("(y#y#)", (const char *)&cfg, (Py_ssize_t)sizeof cfg, (const char *)&attr,
                         (Py_ssize_t)sizeof attr);
}

static PyObject *bind_driver(PyObject *self, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL) return NULL;
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL); /* (the copy cuda-bindings loaded: same soname) */
    if (lib == NULL) {
        PyErr_Format(PyExc_OSError, "cannot load %s: %s", name, dlerror());
        return NULL;
    }
    launch_kernel_t launch = (launch_kernel_t)dlsym(lib, "cuLaunchKernel");
    if (launch == NULL) {
        PyErr_Format(PyExc_OSError, "%s has no cuLaunchKernel", name);
        return NULL;
    }
    launch_kernel_fn = launch;
    launch_kernel_ex_fn = (launch_kernel_ex_t)dlsym(lib, "cuLaunchKernelEx");
    driver_lib = lib;
    return PyBool_FromLong(launch_kernel_ex_fn != NULL);
}

static int unsigned_arg(PyObject *o, unsigned *out) {
    unsigned long v = PyLong_AsUnsignedLong(o);
    if (v == (unsigned long)-1 && PyErr_Occurred()) return -1;
    if (v > 0xFFFFFFFFul) {
        PyErr_SetString(PyExc_OverflowError, "a launch dimension or shared size does not fit 32 bits");
        return -1;
    }
    *out = (unsigned)v;
    return 0;
}

static int pointer_arg(PyObject *o, void **out) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *out = (void *)(uintptr_t)v;
    return 0;
}

static int check_driver(int programmatic) {
    if (launch_kernel_fn == NULL || (programmatic && launch_kernel_ex_fn == NULL)) {
        PyErr_SetString(PyExc_RuntimeError, programmatic ? "the driver has no cuLaunchKernelEx"
                                                         : "bind_driver was not called");
        return -1;
    }
    return 0;
}

static PyObject *launch_kernel(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "launch_kernel takes 11 arguments");
        return NULL;
    }
    void *f, *stream, *params;
    unsigned dims[7];
    if (pointer_arg(args[0], &f) < 0) return NULL;
    for (int i = 0; i < 7; i++)
        if (unsigned_arg(args[1 + i], &dims[i]) < 0) return NULL;
    if (pointer_arg(args[8], &stream) < 0 || pointer_arg(args[9], &params) < 0) return NULL;
    int programmatic = PyObject_IsTrue(args[10]);
    if (programmatic < 0 || check_driver(programmatic) < 0) return NULL;
    return result_object(do_launch(f, dims, dims + 3, dims[6], stream, (void **)params, programmatic));
}

/* ------------------------------------------------------------------ measurement variants
 * Other forms of the same launch, for bench/launch_overhead.py's pieces (where does the driver
 * call's host time go?); the launch paths above use none of them.
 *   launch_variant(form, handle, gx, gy, gz, bx, by, bz, shared, stream, params, data, size) -> int:
 *     form 0: cuLaunchKernel with kernelParams (as launch_kernel); 1: cuLaunchKernel with `extra`
 *     (CU_LAUNCH_PARAM_BUFFER_POINTER `data` of `size` bytes: the packed arguments themselves,
 *     which must then be laid out as the kernel's parameters are: right for pointers and scalars,
 *     not for a TMA descriptor after 64 bytes of them, which ArgPacker aligns to 128, the kernel
 *     to 64; kernelParams is free of that, the driver placing each argument);
 *     2: cuLaunchKernelEx with no attributes; 3: cuLaunchKernel as cuGetProcAddress returns it
 *     (bind_proc_address first).
 *   bind_proc_address() -> bool: look up cuLaunchKernel through cuGetProcAddress_v2 (CUDA 12.0).
 * H200, 2026-12-02 12:05: none cheaper than form 0 (4.1 us: extra 4.8, Ex 4.6, cuGetProcAddress's
 * 4.6; form 0 on a non-blocking stream or CU_STREAM_PER_THREAD 4.4), so the launch paths keep it. */
typedef CUresult (*get_proc_address_t)(const char *, void **, int, unsigned long long, int *);

static PyObject *bind_proc_address(PyObject *self, PyObject *unused) {
    if (driver_lib == NULL) Py_RETURN_FALSE;
    get_proc_address_t get = (get_proc_address_t)dlsym(driver_lib, "cuGetProcAddress_v2");
    void *fn = NULL;
    int status = 0;
    if (get == NULL || get("cuLaunchKernel", &fn, 12000, 0, &status) != 0 || fn == NULL) Py_RETURN_FALSE;
    launch_kernel_proc_fn = (launch_kernel_t)fn;
    Py_RETURN_TRUE;
}

static PyObject *launch_variant(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "launch_variant takes 13 arguments");
        return NULL;
    }
    long form = PyLong_AsLong(args[0]);
    if (form == -1 && PyErr_Occurred()) return NULL;
    void *f, *stream, *params, *data, *size_p;
    unsigned d[7];
    if (pointer_arg(args[1], &f) < 0) return NULL;
    for (int i = 0; i < 7; i++)
        if (unsigned_arg(args[2 + i], &d[i]) < 0) return NULL;
    if (pointer_arg(args[9], &stream) < 0 || pointer_arg(args[10], &params) < 0 || pointer_arg(args[11], &data) < 0 ||
        pointer_arg(args[12], &size_p) < 0)
        return NULL;
    if (check_driver(form == 2) < 0) return NULL;
    size_t size = (size_t)(uintptr_t)size_p;
    CUresult r;
    if (form == 0) {
        r = launch_kernel_fn(f, d[0], d[1], d[2], d[3], d[4], d[5], d[6], stream, (void **)params, NULL);
    } else if (form == 1) {
        void *extra[] = {(void *)1 /* CU_LAUNCH_PARAM_BUFFER_POINTER */, data, (void *)2 /* ..._SIZE */, &size,
                         (void *)0 /* CU_LAUNCH_PARAM_END */};
        r = launch_kernel_fn(f, d[0], d[1], d[2], d[3], d[4], d[5], d[6], stream, NULL, extra);
    } else if (form == 2) {
        LaunchConfig cfg = {d[0], d[1], d[2], d[3], d[4], d[5], d[6], stream, NULL, 0};
        r = launch_kernel_ex_fn(&cfg, f, (void **)params, NULL);
    } else if (form == 3 && launch_kernel_proc_fn != NULL) {
        r = launch_kernel_proc_fn(f, d[0], d[1], d[2], d[3], d[4], d[5], d[6], stream, (void **)params, NULL);
    } else {
        PyErr_SetString(PyExc_ValueError, "unknown launch form (or form 3 before bind_proc_address)");
        return NULL;
    }
    return result_object(r);
}

/* ------------------------------------------------------------------ Launch: one packed buffer */
typedef struct {
    PyObject_HEAD
    CUfunction f;
    unsigned grid[3], block[3], shared;
    uint64_t *lead;  /* the n_lead pointer slots at the start of the caller's buffer */
    void **params;
    Py_ssize_t n_lead;
    int programmatic;
    PyObject *owner;
    PyObject *stream_fn, *device; /* go_current: the current-stream lookup and its argument */
    unsigned long thread;         /* go_current: the thread that made this launch */
} Launch;

static int Launch_init(Launch *self, PyObject *args, PyObject *kw) {
    PyObject *f, *grid, *block, *shared, *data, *params, *owner, *stream_fn = Py_None, *device = Py_None;
    Py_ssize_t n_lead;
    int programmatic;
    unsigned long thread = PyThread_get_thread_ident();
    if (!PyArg_ParseTuple(args, "OOOOOOnpO|OOk", &f, &grid, &block, &shared, &data, &params, &n_lead, &programmatic,
                          &owner, &stream_fn, &device, &thread))
        return -1;
    if (check_driver(programmatic) < 0) return -1;
    if (pointer_arg(f, &self->f) < 0 || unsigned_arg(shared, &self->shared) < 0) return -1;
    for (int i = 0; i < 3; i++) {
        PyObject *g = PySequence_GetItem(grid, i), *b = g ? PySequence_GetItem(block, i) : NULL;
        int bad = g == NULL || b == NULL || unsigned_arg(g, &self->grid[i]) < 0 || unsigned_arg(b, &self->block[i]) < 0;
        Py_XDECREF(g);
        Py_XDECREF(b);
        if (bad) return -1;
    }
    void *lead, *array;
    if (pointer_arg(data, &lead) < 0 || pointer_arg(params, &array) < 0) return -1;
    if (n_lead < 0 || (n_lead > 0 && lead == NULL)) {
        PyErr_SetString(PyExc_ValueError, "bad leading pointer count or buffer");
        return -1;
    }
    self->lead = (uint64_t *)lead;
    self->params = (void **)array;
    self->n_lead = n_lead;
    self->programmatic = programmatic;
    Py_INCREF(owner);
    Py_XSETREF(self->owner, owner);
    Py_INCREF(stream_fn);
    Py_XSETREF(self->stream_fn, stream_fn);
    Py_INCREF(device);
    Py_XSETREF(self->device, device);
    self->thread = thread;
    return 0;
}

static void Launch_dealloc(Launch *self) {
    Py_XDECREF(self->owner);
    Py_XDECREF(self->stream_fn);
    Py_XDECREF(self->device);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *write_and_launch(Launch *self, void *stream, PyObject *seq) {
    PyObject **items;
    Py_ssize_t n;
    if (PyList_CheckExact(seq)) {
        items = PySequence_Fast_ITEMS(seq);
        n = PyList_GET_SIZE(seq);
    } else if (PyTuple_CheckExact(seq)) {
        items = PySequence_Fast_ITEMS(seq);
        n = PyTuple_GET_SIZE(seq);
    } else {
        PyErr_SetString(PyExc_TypeError, "pointers must be a list or a tuple");
        return NULL;
    }
    if (n != self->n_lead) {
        PyErr_Format(PyExc_ValueError, "this launch takes %zd leading pointers, got %zd", self->n_lead, n);
        return NULL;
    }
    /* all converted before any is written: a bad value leaves the buffer as it was */
    uint64_t values[64];
    uint64_t *vals = n <= 64 ? values : PyMem_Malloc(n * sizeof(uint64_t));
    if (vals == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long v = PyLong_AsUnsignedLongLong(items[i]);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            if (vals != values) PyMem_Free(vals);
            return NULL;
        }
        vals[i] = v;
    }
    if (n) memcpy(self->lead, vals, n * sizeof(uint64_t));
    if (vals != values) PyMem_Free(vals);
    return result_object(do_launch(self->f, self->grid, self->block, self->shared, stream, self->params,
                                   self->programmatic));
}

static PyObject *Launch_go(Launch *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "go takes (stream, pointers)");
        return NULL;
    }
    void *stream;
    if (pointer_arg(args[0], &stream) < 0) return NULL;
    return write_and_launch(self, stream, args[1]);
}

/* go_current(pointers): go on the stream stream_fn(device) returns; NOT_THIS_THREAD (nothing
 * launched) when called from another thread than the one that made this launch. */
#define NOT_THIS_THREAD (-2)

static PyObject *Launch_go_current(Launch *self, PyObject *seq) {
    if (PyThread_get_thread_ident() != self->thread) return PyLong_FromLong(NOT_THIS_THREAD);
    if (self->stream_fn == NULL || self->stream_fn == Py_None) {
        PyErr_SetString(PyExc_RuntimeError, "this launch has no stream lookup");
        return NULL;
    }
    PyObject *s = PyObject_CallOneArg(self->stream_fn, self->device);
    if (s == NULL) return NULL;
    void *stream;
    int bad = pointer_arg(s, &stream);
    Py_DECREF(s);
    if (bad < 0) return NULL;
    return write_and_launch(self, stream, seq);
}

static PyMethodDef Launch_methods[] = {
    {"go", (PyCFunction)(void (*)(void))Launch_go, METH_FASTCALL,
     "go(stream, pointers) -> CUresult: write the leading pointers and launch"},
    {"go_current", (PyCFunction)Launch_go_current, METH_O,
     "go_current(pointers) -> CUresult: go on the current stream (-2: another thread's launch, not launched)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tilewright_fast_launch.Launch",
    .tp_basicsize = sizeof(Launch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a launch of one packed argument buffer whose leading pointers change per call",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Launch_init,
    .tp_dealloc = (destructor)Launch_dealloc,
    .tp_methods = Launch_methods,
};

static PyMethodDef module_methods[] = {
    {"bind_driver", bind_driver, METH_O, "bind_driver(library name) -> has cuLaunchKernelEx"},
    {"config_layout", config_layout, METH_VARARGS, "config_layout(grid, block, shared, stream) -> (bytes, bytes)"},
    {"bind_proc_address", bind_proc_address, METH_NOARGS, "bind_proc_address() -> bool (measurement)"},
    {"launch_variant", (PyCFunction)(void (*)(void))launch_variant, METH_FASTCALL,
     "launch_variant(form, handle, gx, gy, gz, bx, by, bz, shared, stream, params, data, size) -> CUresult"},
    {"launch_kernel", (PyCFunction)(void (*)(void))launch_kernel, METH_FASTCALL,
     "launch_kernel(handle, gx, gy, gz, bx, by, bz, shared, stream, params, programmatic) -> CUresult"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "tilewright_fast_launch", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit_tilewright_fast_launch(void) {
    if (PyType_Ready(&LaunchType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&LaunchType);
    if (PyModule_AddObject(m, "Launch", (PyObject *)&LaunchType) < 0) {
        Py_DECREF(&LaunchType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
