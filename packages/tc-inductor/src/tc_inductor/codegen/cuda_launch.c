/* tc's launcher of compiled Triton kernels (see cuda_launch.py).

   One object per compiled kernel, made once its first launch has been checked against
   Triton's own launch path: ``launcher(grid0, *args)`` converts the arguments by the kinds
   fixed at creation and calls cuLaunchKernel, with the GIL held (as eager's ops launch). Where
   a launch cannot go this way (a Triton launch hook is set, a pointer is not 16-byte aligned as
   the kernel was specialised for, an int does not fit its parameter, an argument is not what
   its kind says) it calls ``fallback(grid0, *args)``, which launches through Triton.

   Needs only Python's headers: the driver's functions are looked up in libcuda.so.1 at the
   first launch (a machine without a driver can build and import this module). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

typedef int CUresult;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUcontext;
typedef int CUdevice;

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
typedef CUresult (*ctx_get_fn)(CUcontext *);
typedef CUresult (*ctx_set_fn)(CUcontext);
typedef CUresult (*device_get_fn)(CUdevice *, int);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*error_fn)(CUresult, const char **);

static launch_fn cu_launch = NULL;
static ctx_get_fn cu_ctx_get = NULL;
static ctx_set_fn cu_ctx_set = NULL;
static device_get_fn cu_device_get = NULL;
static retain_fn cu_retain = NULL;
static error_fn cu_error = NULL;

#define MAX_ARGS 1024  /* a multi-tensor kernel passes hundreds of pointers */

static int resolve_driver(void) {
    if (cu_launch != NULL)
        return 0;
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY);
    if (lib == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tc cuda_launch: libcuda.so.1 cannot be loaded");
        return -1;
    }
    cu_ctx_get = (ctx_get_fn)dlsym(lib, "cuCtxGetCurrent");
    cu_ctx_set = (ctx_set_fn)dlsym(lib, "cuCtxSetCurrent");
    cu_device_get = (device_get_fn)dlsym(lib, "cuDeviceGet");
    cu_retain = (retain_fn)dlsym(lib, "cuDevicePrimaryCtxRetain");
    cu_error = (error_fn)dlsym(lib, "cuGetErrorString");
    launch_fn launch = (launch_fn)dlsym(lib, "cuLaunchKernel");
    if (!cu_ctx_get || !cu_ctx_set || !cu_device_get || !cu_retain || !cu_error || !launch) {
        PyErr_SetString(PyExc_RuntimeError, "tc cuda_launch: libcuda.so.1 lacks a driver function");
        return -1;
    }
    cu_launch = launch;  /* last: the others are set whenever this is */
    return 0;
}

static int cuda_error(CUresult code, const char *what) {
    const char *text = NULL;
    if (cu_error == NULL || cu_error(code, &text) != 0 || text == NULL)
        text = "unknown error";
    PyErr_Format(PyExc_RuntimeError, "tc cuda_launch: %s failed: CUDA error %d (%s)", what, code, text);
    return -1;
}

/* The current thread has a CUDA context (a thread torch never used for CUDA has none). */
static int ensure_context(int device) {
    CUcontext context = NULL;
    CUresult r = cu_ctx_get(&context);
    if (r != 0)
        return cuda_error(r, "cuCtxGetCurrent");
    if (context != NULL)
        return 0;
    CUdevice dev;
    if ((r = cu_device_get(&dev, device)) != 0)
        return cuda_error(r, "cuDeviceGet");
    if ((r = cu_retain(&context, dev)) != 0)
        return cuda_error(r, "cuDevicePrimaryCtxRetain");
    if ((r = cu_ctx_set(context)) != 0)
        return cuda_error(r, "cuCtxSetCurrent");
    return 0;
}

typedef union {
    uint64_t u64;
    int64_t i64;
    uint32_t u32;
    int32_t i32;
    uint16_t u16;
    int16_t i16;
    uint8_t u8;
    int8_t i8;
    float f32;
    double f64;
} Slot;

/* Kinds, one per argument after grid0:
     'p' pointer (a tensor, or an int address; None is null), 16-byte aligned as the kernel
         was specialised for
     'x' a constexpr of the kernel: not passed
     'b' 'h' 'i' 'l'  int8 int16 int32 int64      'B' 'H' 'I' 'L'  uint8 uint16 uint32 uint64
     'f' 'd'  float32 float64
   Returns 0 when packed, 1 when this launch must take the fallback, -1 on an error. */
static int pack(const char *kinds, Py_ssize_t n, PyObject *const *args, PyObject *data_ptr, Slot *slots,
                void **params, Py_ssize_t *count) {
    Py_ssize_t used = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        char kind = kinds[i];
        PyObject *arg = args[i];
        Slot *slot = &slots[used];
        if (kind == 'x')
            continue;
        if (kind == 'p') {
            uint64_t address = 0;
            if (arg == Py_None) {
                address = 0;
            } else if (PyLong_CheckExact(arg)) {
                address = PyLong_AsUnsignedLongLong(arg);
            } else {
                PyObject *value = PyObject_CallMethodNoArgs(arg, data_ptr);
                if (value == NULL)
                    return -1;
                address = PyLong_AsUnsignedLongLong(value);
                Py_DECREF(value);
            }
            if (PyErr_Occurred())
                return -1;
            if (address & 15)
                return 1;
            slot->u64 = address;
        } else if (kind == 'f' || kind == 'd') {
            if (!PyFloat_CheckExact(arg) && !PyLong_CheckExact(arg))
                return 1;
            double value = PyFloat_AsDouble(arg);
            if (value == -1.0 && PyErr_Occurred())
                return -1;
            if (kind == 'f')
                slot->f32 = (float)value;
            else
                slot->f64 = value;
        } else {
            if (!PyLong_CheckExact(arg))
                return 1;  /* a bool, a SymInt, a float: Triton decides what it means */
            if (kind == 'L') {
                unsigned long long value = PyLong_AsUnsignedLongLong(arg);
                if (value == (unsigned long long)-1 && PyErr_Occurred()) {
                    if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                        return -1;
                    PyErr_Clear();  /* negative or past 64 bits */
                    return 1;
                }
                slot->u64 = (uint64_t)value;
                params[used++] = slot;
                continue;
            }
            int overflow = 0;
            long long value = PyLong_AsLongLongAndOverflow(arg, &overflow);
            if (value == -1 && PyErr_Occurred())
                return -1;
            if (overflow)
                return 1;
            switch (kind) {
            case 'b': if (value < INT8_MIN || value > INT8_MAX) return 1; slot->i8 = (int8_t)value; break;
            case 'h': if (value < INT16_MIN || value > INT16_MAX) return 1; slot->i16 = (int16_t)value; break;
            case 'i': if (value < INT32_MIN || value > INT32_MAX) return 1; slot->i32 = (int32_t)value; break;
            case 'l': slot->i64 = (int64_t)value; break;
            case 'B': if (value < 0 || value > UINT8_MAX) return 1; slot->u8 = (uint8_t)value; break;
            case 'H': if (value < 0 || value > UINT16_MAX) return 1; slot->u16 = (uint16_t)value; break;
            case 'I': if (value < 0 || value > UINT32_MAX) return 1; slot->u32 = (uint32_t)value; break;
            default:
                PyErr_Format(PyExc_ValueError, "tc cuda_launch: unknown argument kind %c", kind);
                return -1;
            }
        }
        params[used] = slot;
        used++;
    }
    *count = used;
    return 0;
}

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;   /* fallback(grid0, *args): Triton's launch */
    PyObject *stream_of;  /* stream_of(device) -> the current raw stream */
    PyObject *device;     /* its argument (an int) */
    PyObject *knobs;      /* Triton's runtime knobs: launch hooks are read from it at every launch */
    PyObject *kinds;      /* bytes */
    CUfunction function;
    unsigned block;
    unsigned shared;
    int device_index;
} Launcher;

static PyObject *str_data_ptr, *str_enter_hook, *str_exit_hook, *str_calls;

/* Whether a Triton launch hook is set: None is not; a hook chain (triton 3.6) is when its
   ``calls`` is non-empty; anything else is. */
static int hooked(PyObject *knobs, PyObject *name) {
    if (knobs == Py_None)
        return 0;
    PyObject *hook = PyObject_GetAttr(knobs, name);
    if (hook == NULL)
        return -1;
    int set = 1;
    if (hook == Py_None) {
        set = 0;
    } else {
        PyObject *calls = PyObject_GetAttr(hook, str_calls);
        if (calls != NULL) {
            set = PyObject_IsTrue(calls);
            Py_DECREF(calls);
        } else if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();  /* a hook function (older triton): set */
        } else {
            set = -1;
        }
    }
    Py_DECREF(hook);
    return set;
}

static PyObject *call_fallback(Launcher *self, PyObject *const *args, size_t nargsf) {
    return PyObject_Vectorcall(self->fallback, args, nargsf, NULL);
}

static PyObject *launcher_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Launcher *self = (Launcher *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkinds = PyBytes_GET_SIZE(self->kinds);
    if (kwnames != NULL || nargs != nkinds + 1 || nkinds > MAX_ARGS || !PyLong_CheckExact(args[0]))
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    int hook = hooked(self->knobs, str_enter_hook);
    if (hook == 0)
        hook = hooked(self->knobs, str_exit_hook);
    if (hook < 0)
        return NULL;
    if (hook)
        return call_fallback(self, args, nargsf);
    long long grid = PyLong_AsLongLong(args[0]);
    if (grid == -1 && PyErr_Occurred())
        return NULL;
    if (grid < 0 || grid > 0x7fffffff)
        return call_fallback(self, args, nargsf);
    Slot slots[MAX_ARGS + 2];
    void *params[MAX_ARGS + 2];
    Py_ssize_t used = 0;
    int packed = pack(PyBytes_AS_STRING(self->kinds), nkinds, args + 1, str_data_ptr, slots, params, &used);
    if (packed < 0)
        return NULL;
    if (packed > 0)
        return call_fallback(self, args, nargsf);
    /* Triton's kernels take two more pointers, its global and profile scratch: none here */
    slots[used].u64 = 0;
    params[used] = &slots[used];
    slots[used + 1].u64 = 0;
    params[used + 1] = &slots[used + 1];
    if (grid == 0)
        Py_RETURN_NONE;  /* as Triton: an empty grid launches nothing */
    PyObject *stream = PyObject_CallOneArg(self->stream_of, self->device);
    if (stream == NULL)
        return NULL;
    CUstream raw = (CUstream)(uintptr_t)PyLong_AsUnsignedLongLong(stream);
    Py_DECREF(stream);
    if (PyErr_Occurred())
        return NULL;
    if (resolve_driver() < 0 || ensure_context(self->device_index) < 0)
        return NULL;
    CUresult r = cu_launch(self->function, (unsigned)grid, 1, 1, self->block, 1, 1, self->shared, raw, params, NULL);
    if (r != 0) {
        cuda_error(r, "cuLaunchKernel");
        return NULL;
    }
    Py_RETURN_NONE;
}

static int launcher_traverse(Launcher *self, visitproc visit, void *arg) {
    Py_VISIT(self->fallback);
    Py_VISIT(self->stream_of);
    Py_VISIT(self->device);
    Py_VISIT(self->knobs);
    return 0;
}

static int launcher_clear(Launcher *self) {
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->stream_of);
    Py_CLEAR(self->device);
    Py_CLEAR(self->knobs);
    Py_CLEAR(self->kinds);
    return 0;
}

static void launcher_dealloc(Launcher *self) {
    PyObject_GC_UnTrack(self);
    launcher_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"fallback", "function", "block", "shared", "kinds", "stream_of", "device", "knobs", NULL};
    PyObject *fallback, *stream_of, *knobs, *kinds;
    unsigned long long function;
    unsigned int block, shared;
    int device;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OKIIO!OiO", names, &fallback, &function, &block, &shared,
                                     &PyBytes_Type, &kinds, &stream_of, &device, &knobs))
        return NULL;
    Py_ssize_t n = PyBytes_GET_SIZE(kinds);
    const char *k = PyBytes_AS_STRING(kinds);
    if (n > MAX_ARGS || (Py_ssize_t)strspn(k, "pxbhilBHILfd") != n) {
        PyErr_SetString(PyExc_ValueError, "tc cuda_launch: kinds must be at most MAX_ARGS of 'pxbhilBHILfd'");
        return NULL;
    }
    if (!PyCallable_Check(fallback) || !PyCallable_Check(stream_of)) {
        PyErr_SetString(PyExc_TypeError, "tc cuda_launch: fallback and stream_of must be callable");
        return NULL;
    }
    Launcher *self = (Launcher *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = launcher_vectorcall;
    self->fallback = Py_NewRef(fallback);
    self->stream_of = Py_NewRef(stream_of);
    self->device = PyLong_FromLong(device);
    self->knobs = Py_NewRef(knobs);
    self->kinds = Py_NewRef(kinds);
    self->function = (CUfunction)(uintptr_t)function;
    self->block = block;
    self->shared = shared;
    self->device_index = device;
    if (self->device == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tc_cuda_launch.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Launcher, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = launcher_new,
    .tp_dealloc = (destructor)launcher_dealloc,
    .tp_traverse = (traverseproc)launcher_traverse,
    .tp_clear = (inquiry)launcher_clear,
    .tp_doc = "Launcher(fallback, function, block, shared, kinds, stream_of, device, knobs): "
              "launcher(grid0, *args) launches the kernel, or calls fallback(grid0, *args)",
};

/* pack(kinds, *args) -> (bytes of each passed argument, in order) or None where a launch would
   take the fallback: the conversion, testable without a GPU. */
static PyObject *py_pack(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || !PyBytes_Check(args[0]) || PyBytes_GET_SIZE(args[0]) != nargs - 1 || nargs - 1 > MAX_ARGS) {
        PyErr_SetString(PyExc_TypeError, "pack(kinds, *args): one argument per kind");
        return NULL;
    }
    const char *kinds = PyBytes_AS_STRING(args[0]);
    if ((Py_ssize_t)strspn(kinds, "pxbhilBHILfd") != nargs - 1) {
        PyErr_SetString(PyExc_ValueError, "tc cuda_launch: kinds must be of 'pxbhilBHILfd'");
        return NULL;
    }
    Slot slots[MAX_ARGS + 2];
    void *params[MAX_ARGS + 2];
    Py_ssize_t used = 0;
    int packed = pack(kinds, nargs - 1, args + 1, str_data_ptr, slots, params, &used);
    if (packed < 0)
        return NULL;
    if (packed > 0)
        Py_RETURN_NONE;
    PyObject *out = PyTuple_New(used);
    if (out == NULL)
        return NULL;
    Py_ssize_t j = 0;
    for (Py_ssize_t i = 0; i < nargs - 1; i++) {
        static const char sized[] = "pbhilBHILfd";
        static const int sizes[] = {8, 1, 2, 4, 8, 1, 2, 4, 8, 4, 8};
        if (kinds[i] == 'x')
            continue;
        int size = sizes[strchr(sized, kinds[i]) - sized];
        PyObject *item = PyBytes_FromStringAndSize((const char *)params[j], size);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, j, item);
        j++;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"pack", (PyCFunction)(void (*)(void))py_pack, METH_FASTCALL, "pack(kinds, *args): the packed arguments"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "tc_cuda_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit_tc_cuda_launch(void) {
    str_data_ptr = PyUnicode_InternFromString("data_ptr");
    str_enter_hook = PyUnicode_InternFromString("launch_enter_hook");
    str_exit_hook = PyUnicode_InternFromString("launch_exit_hook");
    str_calls = PyUnicode_InternFromString("calls");
    if (!str_data_ptr || !str_enter_hook || !str_exit_hook || !str_calls)
        return NULL;
    if (PyType_Ready(&LauncherType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "MAX_ARGS", MAX_ARGS) < 0 ||
        PyModule_AddObjectRef(m, "Launcher", (PyObject *)&LauncherType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
